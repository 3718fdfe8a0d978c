package duckdb

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/sinks/sinktest"
)

// harness runs the conformance suite against a DuckDB file per target.
type harness struct {
	path string
	cur  *Sink
}

func (h *harness) Open(t *testing.T) pipeline.Sink {
	h.path = filepath.Join(t.TempDir(), "target.duckdb")
	h.cur = New(Options{Path: h.path}, nil)
	return h.cur
}

func (h *harness) Reopen(t *testing.T) pipeline.Sink {
	h.cur = New(Options{Path: h.path}, nil)
	return h.cur
}

func (h *harness) Read(t *testing.T, table *pipeline.Table) map[string][]any {
	t.Helper()
	rows, err := h.cur.Rows(context.Background(), table)
	if err != nil {
		t.Fatalf("read %s: %v", table.ID, err)
	}
	out := make(map[string][]any, len(rows))
	for _, r := range rows {
		out[sinktest.RowKey(table, r)] = r
	}
	return out
}

func TestConformance(t *testing.T) { sinktest.Run(t, &harness{}) }

func TestMatrix(t *testing.T) {
	sinktest.Matrix(t, &harness{}, "DuckDB sink", "../../docs/types/duckdb.md")
}
