package mysql

import (
	"context"
	"fmt"
	"strings"

	"github.com/go-mysql-org/go-mysql/client"
	gomysql "github.com/go-mysql-org/go-mysql/mysql"

	"github.com/sluice-cdc/sluice/pipeline"
)

// TableRows reads every row of db.table as ScanTable does, into memory.
func TableRows(ctx context.Context, opts Options, db, table string) (*pipeline.Table, [][]any, error) {
	var t *pipeline.Table
	var rows [][]any
	err := ScanTable(ctx, opts, db, table, func(s *pipeline.Table) error { t = s; return nil },
		func(row []any) error { rows = append(rows, row); return nil })
	return t, rows, err
}

// ScanTable reads db.table's shape (given to shape) and streams every row
// to row, decoded exactly as the source's snapshot decodes them (same
// catalog shape, same converter), with the zero-date policy of opts. It
// is for verification: comparing a sink with its source.
func ScanTable(ctx context.Context, opts Options, db, table string, shape func(*pipeline.Table) error, row func([]any) error) error {
	_, err := readTable(ctx, opts, db, table, nil, false, shape, row)
	return err
}

// KeyRows reads the rows of db.table among keys (each key's values in
// the table's key order, in the record model's types) as TableRows reads
// rows, and then the server's binlog position: once a checkpoint covers
// it, every change the read saw is durable in every sink. Keys with no
// row are absent. It is for continuous verification.
func KeyRows(ctx context.Context, opts Options, db, table string, keys [][]any) (*pipeline.Table, [][]any, Position, error) {
	var t *pipeline.Table
	var rows [][]any
	pos, err := readTable(ctx, opts, db, table, keys, true, func(s *pipeline.Table) error { t = s; return nil },
		func(row []any) error { rows = append(rows, row); return nil })
	return t, rows, pos, err
}

// CurrentPosition is the server's binlog position now: once a checkpoint
// covers it (Position.Covers), every transaction committed before the
// call is durable in every sink.
func CurrentPosition(ctx context.Context, opts Options) (Position, error) {
	s, err := New(opts, nil, nil)
	if err != nil {
		return Position{}, err
	}
	c, err := s.connect(ctx)
	if err != nil {
		return Position{}, err
	}
	defer c.Close()
	return s.positionNow(ctx, c)
}

func (s *Source) positionNow(ctx context.Context, c *client.Conn) (Position, error) {
	srv, err := Preflight(ctx, c, PreflightOptions{Tables: s.opts.Tables, ServerID: s.opts.ServerID, ReportHost: s.reportHost()})
	if err != nil {
		return Position{}, err
	}
	return currentPosition(c, srv)
}

// readTable reads db.table's shape and rows (only those among keys when
// byKey), then, when byKey, the position after the read.
func readTable(ctx context.Context, opts Options, db, table string, keys [][]any, byKey bool,
	shape func(*pipeline.Table) error, row func([]any) error) (Position, error) {
	opts.Tables = []string{db + "." + table}
	s, err := New(opts, nil, nil)
	if err != nil {
		return Position{}, err
	}
	c, err := s.connect(ctx)
	if err != nil {
		return Position{}, err
	}
	defer c.Close()
	cs, err := loadCharsets(c)
	if err != nil {
		return Position{}, err
	}
	descs, err := catalogDescs(c, db, table)
	if err != nil {
		return Position{}, err
	}
	zeroNull := s.opts.ZeroDates == ZeroDatesNull
	t := buildTable(pipeline.TableID{Database: db, Schema: db, Table: table}, descs, 1, zeroNull)
	if err := shape(t); err != nil {
		return Position{}, err
	}
	q := "SELECT " + selectList(descs) + " FROM " + quoteIdent(db) + "." + quoteIdent(table)
	var args []any
	if byKey {
		where, a, err := keyFilter(t, keys)
		if err != nil {
			return Position{}, err
		}
		q, args = q+" WHERE "+where, a
	}
	if !byKey || len(keys) > 0 {
		if err := selectRows(c, q, args, descs, converter{zeroNull: zeroNull, charsets: cs}, row); err != nil {
			return Position{}, err
		}
	}
	if !byKey {
		return Position{}, nil
	}
	return s.positionNow(ctx, c)
}

// selectRows runs q with args and decodes every row with conv for fn.
func selectRows(c *client.Conn, q string, args []any, descs []colDesc, conv converter, fn func([]any) error) error {
	stmt, err := c.Prepare(q)
	if err != nil {
		return err
	}
	defer stmt.Close()
	rr := rowReader{conv: conv, descs: descs}
	var result gomysql.Result
	return stmt.ExecuteSelectStreaming(&result, func(row []gomysql.FieldValue) error {
		out, bad, err := rr.row(row)
		if err != nil {
			return fmt.Errorf("column %s: %w", descs[bad].name, err)
		}
		return fn(out)
	}, nil, args...)
}

// keyFilter is a WHERE clause matching any of keys, with the key values
// as parameters in the forms the server compares with each column.
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
			v, err := keyParam(key[i])
			if err != nil {
				return "", nil, fmt.Errorf("table %s column %s: %w", t.ID, t.Columns[idx].Name, err)
			}
			args = append(args, v)
			and = append(and, quoteIdent(t.Columns[idx].Name)+" = ?")
		}
		or = append(or, "("+strings.Join(and, " AND ")+")")
	}
	return strings.Join(or, " OR "), args, nil
}

// keyParam is a key value as a statement parameter.
func keyParam(v any) (any, error) {
	switch v := v.(type) {
	case int64, int32, int16, uint8, uint16, uint32, uint64, string, []byte, float64, float32:
		return v, nil
	case pipeline.Decimal:
		return v.String(), nil
	case pipeline.Date:
		return v.String(), nil
	case pipeline.Timestamp:
		// DATETIME and TIMESTAMP keys: the session reads TIMESTAMP in UTC.
		return v.String(), nil
	case pipeline.Interval:
		return formatTimeKey(v), nil
	case nil:
		return nil, fmt.Errorf("a NULL key value")
	}
	return nil, fmt.Errorf("a key of type %T is not supported", v)
}

// formatTimeKey is a TIME value (an Interval of microseconds) as text.
func formatTimeKey(i pipeline.Interval) string {
	us := i.Micros
	sign := ""
	if us < 0 {
		sign, us = "-", -us
	}
	return fmt.Sprintf("%s%d:%02d:%02d.%06d", sign, us/3600_000_000, us/60_000_000%60, us/1_000_000%60, us%1_000_000)
}

// Covers reports whether every transaction in mark's GTID set is in p's:
// a checkpoint at p holds everything committed up to mark.
func (p Position) Covers(mark Position) (bool, error) {
	have, err := p.gtidSet()
	if err != nil {
		return false, err
	}
	want, err := mark.gtidSet()
	if err != nil {
		return false, err
	}
	if h, ok := have.(*gomysql.MariadbGTIDSet); ok {
		w, ok := want.(*gomysql.MariadbGTIDSet)
		if !ok {
			return false, fmt.Errorf("a %s position cannot cover a %s one", p.Flavor, mark.Flavor)
		}
		for domain, g := range w.Sets {
			if mine := h.Sets[domain]; mine == nil || mine.SequenceNumber < g.SequenceNumber {
				return false, nil
			}
		}
		return true, nil
	}
	return have.Contain(want), nil
}
