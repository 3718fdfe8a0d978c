package postgres

import (
	"context"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/sluice-cdc/sluice/pipeline"
)

// TableRows reads every current row of schema.table as ScanTable does,
// into memory.
func TableRows(ctx context.Context, dsn, schema, table string) (*pipeline.Table, [][]any, error) {
	var t *pipeline.Table
	var rows [][]any
	err := ScanTable(ctx, dsn, schema, table, func(s *pipeline.Table) error { t = s; return nil },
		func(row []any) error { rows = append(rows, row); return nil })
	return t, rows, err
}

// ScanTable reads schema.table's shape (given to shape) and streams every
// current row to row, under the source's session settings, in text form,
// decoded with DecodeText exactly as the initial load and the stream
// decode them. It is for verification: comparing a sink with its source.
func ScanTable(ctx context.Context, dsn, schema, table string, shape func(*pipeline.Table) error, row func([]any) error) error {
	conn, database, err := verifyConn(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	ts, err := LoadTableShape(ctx, conn, database, TableRef{Schema: schema, Name: table})
	if err != nil {
		return err
	}
	if err := shape(ts.Table); err != nil {
		return err
	}
	return scanRows(ctx, conn, ts, "", nil, row)
}

// KeyRows reads the current rows of schema.table among keys (each key's
// values in the table's key order, in the record model's types) as
// TableRows reads rows, and then the server's WAL position: once a
// checkpoint reaches it, every change the read saw is durable in every
// sink. Keys with no row are absent. It is for continuous verification.
func KeyRows(ctx context.Context, dsn, schema, table string, keys [][]any) (*pipeline.Table, [][]any, pglogrepl.LSN, error) {
	conn, database, err := verifyConn(ctx, dsn)
	if err != nil {
		return nil, nil, 0, err
	}
	defer conn.Close(context.Background())
	shape, err := LoadTableShape(ctx, conn, database, TableRef{Schema: schema, Name: table})
	if err != nil {
		return nil, nil, 0, err
	}
	var rows [][]any
	if len(keys) > 0 {
		where, args, err := keyFilter(shape.Table, keys)
		if err != nil {
			return nil, nil, 0, err
		}
		if rows, err = readRows(ctx, conn, shape, where, args); err != nil {
			return nil, nil, 0, err
		}
	}
	lsn, err := walPosition(ctx, conn)
	return shape.Table, rows, lsn, err
}

// keyFilter is a WHERE clause matching any of keys, with the key values
// as text parameters (pgx sends a string in text form, so the server
// parses each with its column's type).
func keyFilter(t *pipeline.Table, keys [][]any) (string, []any, error) {
	if len(t.KeyIdx) == 0 {
		return "", nil, fmt.Errorf("table %s has no key", t.ID)
	}
	var or []string
	var args []any
	for _, key := range keys {
		if len(key) != len(t.KeyIdx) {
			return "", nil, fmt.Errorf("table %s: a key of %d values for %d key columns", t.ID, len(key), len(t.KeyIdx))
		}
		var and []string
		for i, idx := range t.KeyIdx {
			text, err := keyText(key[i])
			if err != nil {
				return "", nil, fmt.Errorf("table %s column %s: %w", t.ID, t.Columns[idx].Name, err)
			}
			args = append(args, text)
			and = append(and, fmt.Sprintf("%s = $%d", pgx.Identifier{t.Columns[idx].Name}.Sanitize(), len(args)))
		}
		or = append(or, "("+strings.Join(and, " AND ")+")")
	}
	return strings.Join(or, " OR "), args, nil
}

// keyText is a key value in Postgres's input syntax.
func keyText(v any) (string, error) {
	switch v := v.(type) {
	case string:
		return v, nil
	case int64:
		return strconv.FormatInt(v, 10), nil
	case int32:
		return strconv.FormatInt(int64(v), 10), nil
	case int16:
		return strconv.FormatInt(int64(v), 10), nil
	case bool:
		return strconv.FormatBool(v), nil
	case float64:
		return strconv.FormatFloat(v, 'g', -1, 64), nil
	case []byte:
		return `\x` + hex.EncodeToString(v), nil
	case pipeline.Interval:
		return pipeline.FormatInterval(v), nil
	case pipeline.TimeTZ:
		return pipeline.FormatTimeTZ(v), nil
	case pipeline.Date:
		if v.Special == pipeline.Finite && v.Days < bcDays {
			return "", fmt.Errorf("a date before year 1 as a key is not supported")
		}
		return v.String(), nil
	case pipeline.Timestamp:
		if v.Special == pipeline.Finite && v.Micros < bcDays*86400_000_000 {
			return "", fmt.Errorf("a timestamp before year 1 as a key is not supported")
		}
		return v.String(), nil
	case fmt.Stringer: // Decimal, UUID, TimeOfDay
		return v.String(), nil
	case nil:
		return "", fmt.Errorf("a NULL key value")
	}
	return "", fmt.Errorf("a key of type %T is not supported", v)
}

// bcDays is 0001-01-01 in days since 1970-01-01.
const bcDays = -719162

// readRows is scanRows into memory.
func readRows(ctx context.Context, conn *pgx.Conn, shape *TableShape, where string, args []any) ([][]any, error) {
	var out [][]any
	err := scanRows(ctx, conn, shape, where, args, func(row []any) error { out = append(out, row); return nil })
	return out, err
}

// scanRows runs SELECT of shape's columns (WHERE where, when set) in text
// form and decodes each row with DecodeText for fn.
func scanRows(ctx context.Context, conn *pgx.Conn, shape *TableShape, where string, args []any, fn func([]any) error) error {
	cols := make([]string, len(shape.Columns))
	for i, c := range shape.Columns {
		cols[i] = pgx.Identifier{c.Name}.Sanitize()
	}
	q := fmt.Sprintf("SELECT %s FROM %s", strings.Join(cols, ", "), pgx.Identifier{shape.Table.ID.Schema, shape.Table.ID.Table}.Sanitize())
	if where != "" {
		q += " WHERE " + where
	}
	rows, err := conn.Query(ctx, q, append([]any{pgx.QueryResultFormats{pgx.TextFormatCode}}, args...)...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		raw := rows.RawValues()
		row := make([]any, len(raw))
		for i, b := range raw {
			if b == nil {
				continue
			}
			if row[i], err = DecodeText(shape.Columns[i], b); err != nil {
				return fmt.Errorf("column %s: %w", shape.Columns[i].Name, err)
			}
		}
		if err := fn(row); err != nil {
			return err
		}
	}
	return rows.Err()
}

// CurrentLSN is the server's WAL insert position now: once a checkpoint
// (Position.LSN) reaches it, every transaction committed before the call
// is durable in every sink.
func CurrentLSN(ctx context.Context, dsn string) (pglogrepl.LSN, error) {
	conn, _, err := verifyConn(ctx, dsn)
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.Background())
	return walPosition(ctx, conn)
}

// walPosition is the end of the last WAL record inserted. Not the write
// position (pg_current_wal_lsn): under synchronous_commit = off a commit
// is visible to readers before its WAL is written, so a read could see a
// commit the write position does not cover yet, and a check would not
// wait for the pipeline to read it.
func walPosition(ctx context.Context, conn *pgx.Conn) (pglogrepl.LSN, error) {
	var s string
	if err := conn.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&s); err != nil {
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
