package duckdb

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/duckdb/duckdb-go/v2"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/sinks/upsert"
)

// schemaError is a failure to bring a target table to a batch's shape
// (create it, add a column, fill existing rows with a new column's
// missing value).
type schemaError struct {
	table pipeline.TableID
	err   error
}

func (e *schemaError) Error() string { return e.err.Error() }
func (e *schemaError) Unwrap() error { return e.err }

// ensureShape is ensureTable with a panic inside DuckDB's driver (a
// missing value it cannot bind) turned into an error of the table, so the
// transaction is rolled back like after any other failure.
func (s *Sink) ensureShape(ctx context.Context, tb *upsert.TableBatch) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("panic in the duckdb driver: %v", v)
		}
		if err != nil {
			err = &schemaError{table: tb.ID, err: err}
		}
	}()
	return s.ensureTable(ctx, tb)
}

// tableError returns err as a *pipeline.TableError when it is a schema
// change this sink can never apply, so the runtime quarantines that table
// alone; nil otherwise. DuckDB runs in the process, so a failed DDL is the
// statement's fault (a type or default DuckDB cannot hold, a value the
// driver cannot bind), except for cancellation and I/O errors (a full
// disk), which stay transient.
func tableError(ctx context.Context, err error) error {
	var se *schemaError
	if !errors.As(err, &se) || ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, context.Canceled) || strings.Contains(err.Error(), "IO Error") || outOfMemory(err) {
		return nil
	}
	return &pipeline.TableError{Table: se.table, Err: err}
}

// outOfMemory reports DuckDB running out of its memory_limit: not the
// statement's fault, and a smaller write may pass (pipeline.Overloaded).
// The appender reports it as text only.
func outOfMemory(err error) bool {
	var de *duckdb.Error
	if errors.As(err, &de) && de.Type == duckdb.ErrorTypeOutOfMemory {
		return true
	}
	msg := err.Error()
	for _, m := range []string{"Out of Memory Error", "could not allocate block", "failed to allocate data of size", "failed to pin block"} {
		if strings.Contains(msg, m) {
			return true
		}
	}
	return false
}
