package integration

import (
	"context"
	"testing"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/sinks/duckdb"
	"github.com/sluice-cdc/sluice/sinks/sinktest"
	"github.com/sluice-cdc/sluice/sources/postgres"
)

// pgRows reads a table as the source decodes it, keyed by row key.
func pgRows(t *testing.T, ctx context.Context, dsn, database, schema, table string) (*pipeline.Table, map[string][]any) {
	t.Helper()
	shape, rows, err := postgres.TableRows(ctx, dsn, schema, table)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]any{}
	for _, row := range rows {
		out[sinktest.RowKey(shape, row)] = row
	}
	return shape, out
}

// duckRows reads the live rows of a source table from a DuckDB sink file.
func duckRows(t *testing.T, ctx context.Context, path string, table *pipeline.Table) map[string][]any {
	t.Helper()
	sink := duckdb.New(duckdb.Options{Name: "check", Path: path}, nil)
	if err := sink.Open(ctx); err != nil {
		t.Fatal(err)
	}
	defer sink.Close(ctx)
	rows, err := sink.Rows(ctx, table)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]any{}
	for _, r := range rows {
		out[sinktest.RowKey(table, r)] = r
	}
	return out
}

// assertSinkEqualsSource compares a captured table row by row.
func assertSinkEqualsSource(t *testing.T, ctx context.Context, dsn, database, duckPath, schema, table string) int {
	t.Helper()
	shape, want := pgRows(t, ctx, dsn, database, schema, table)
	got := duckRows(t, ctx, duckPath, shape)
	if diff := sinktest.Diff(shape, want, got); diff != "" {
		t.Fatalf("%s.%s: DuckDB differs from PostgreSQL:\n%s", schema, table, diff)
	}
	return len(want)
}
