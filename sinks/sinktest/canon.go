package sinktest

import (
	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/verify"
)

// Canon is verify.Canon: the conformance suite compares values through the
// same canonical forms as `sluice verify`.
func Canon(v any) string { return verify.Canon(v) }

// Equal reports whether two record-model values are the same value.
func Equal(a, b any) bool { return verify.Equal(a, b) }

// Key is verify.Key.
func Key(values []any) string { return verify.Key(values) }

// RowKey is verify.RowKey.
func RowKey(table *pipeline.Table, row []any) string { return verify.RowKey(table, row) }
