package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/sinks/duckdb"
	"github.com/sluice-cdc/sluice/sinks/sinktest"
	"github.com/sluice-cdc/sluice/sources/postgres"
)

// pgRows reads a table in text format under the source's session settings
// and decodes every value exactly as the source does, keyed by row key.
func pgRows(t *testing.T, ctx context.Context, dsn, database, schema, table string) (*pipeline.Table, map[string][]any) {
	t.Helper()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range postgres.SessionSettings {
		cfg.RuntimeParams[k] = v
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	shape, err := postgres.LoadTableShape(ctx, conn, database, postgres.TableRef{Schema: schema, Name: table})
	if err != nil {
		t.Fatal(err)
	}
	cols := make([]string, len(shape.Columns))
	for i, c := range shape.Columns {
		cols[i] = pgx.Identifier{c.Name}.Sanitize()
	}
	rows, err := conn.Query(ctx, fmt.Sprintf("SELECT %s FROM %s", strings.Join(cols, ", "), pgx.Identifier{schema, table}.Sanitize()),
		pgx.QueryResultFormats{pgx.TextFormatCode})
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string][]any{}
	for rows.Next() {
		raw := rows.RawValues()
		row := make([]any, len(raw))
		for i, b := range raw {
			if b == nil {
				continue
			}
			if row[i], err = postgres.DecodeText(shape.Columns[i], b); err != nil {
				t.Fatal(err)
			}
		}
		out[sinktest.RowKey(shape.Table, row)] = row
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return shape.Table, out
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
