package postgres

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/sluice-cdc/sluice/pipeline"
)

// TableRows reads every current row of schema.table under the source's
// session settings, in text form, decoded with DecodeText exactly as the
// initial load and the stream decode them. It is for verification:
// comparing a sink with its source.
func TableRows(ctx context.Context, dsn, schema, table string) (*pipeline.Table, [][]any, error) {
	conn, database, err := verifyConn(ctx, dsn)
	if err != nil {
		return nil, nil, err
	}
	defer conn.Close(context.Background())
	shape, err := LoadTableShape(ctx, conn, database, TableRef{Schema: schema, Name: table})
	if err != nil {
		return nil, nil, err
	}
	cols := make([]string, len(shape.Columns))
	for i, c := range shape.Columns {
		cols[i] = pgx.Identifier{c.Name}.Sanitize()
	}
	rows, err := conn.Query(ctx, fmt.Sprintf("SELECT %s FROM %s", strings.Join(cols, ", "), pgx.Identifier{schema, table}.Sanitize()),
		pgx.QueryResultFormats{pgx.TextFormatCode})
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	var out [][]any
	for rows.Next() {
		raw := rows.RawValues()
		row := make([]any, len(raw))
		for i, b := range raw {
			if b == nil {
				continue
			}
			if row[i], err = DecodeText(shape.Columns[i], b); err != nil {
				return nil, nil, fmt.Errorf("column %s: %w", shape.Columns[i].Name, err)
			}
		}
		out = append(out, row)
	}
	return shape.Table, out, rows.Err()
}

// CurrentLSN is the server's WAL write position now: once a checkpoint
// (Position.LSN) reaches it, every transaction committed before the call
// is durable in every sink.
func CurrentLSN(ctx context.Context, dsn string) (pglogrepl.LSN, error) {
	conn, _, err := verifyConn(ctx, dsn)
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.Background())
	var s string
	if err := conn.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&s); err != nil {
		return 0, err
	}
	return pglogrepl.ParseLSN(s)
}

func verifyConn(ctx context.Context, dsn string) (*pgx.Conn, string, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, "", fmt.Errorf("dsn: %w", err)
	}
	for k, v := range SessionSettings {
		cfg.RuntimeParams[k] = v
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, "", err
	}
	return conn, cfg.Database, nil
}
