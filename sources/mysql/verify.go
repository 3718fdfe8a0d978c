package mysql

import (
	"context"
	"fmt"
	"strings"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"

	"github.com/sluice-cdc/sluice/pipeline"
)

// TableRows reads every row of db.table now, decoded exactly as the
// source's snapshot decodes them (same catalog shape, same converter),
// with the zero-date policy of opts. It is for verification: comparing a
// sink with its source.
func TableRows(ctx context.Context, opts Options, db, table string) (*pipeline.Table, [][]any, error) {
	opts.Tables = []string{db + "." + table}
	s, err := New(opts, nil, nil)
	if err != nil {
		return nil, nil, err
	}
	c, err := s.connect(ctx)
	if err != nil {
		return nil, nil, err
	}
	defer c.Close()
	cs, err := loadCharsets(c)
	if err != nil {
		return nil, nil, err
	}
	descs, err := catalogDescs(c, db, table)
	if err != nil {
		return nil, nil, err
	}
	zeroNull := s.opts.ZeroDates == ZeroDatesNull
	t := buildTable(pipeline.TableID{Database: db, Schema: db, Table: table}, descs, 1, zeroNull)
	cols := make([]string, len(descs))
	for i, d := range descs {
		cols[i] = quoteIdent(d.name)
	}
	stmt, err := c.Prepare("SELECT " + strings.Join(cols, ", ") + " FROM " + quoteIdent(db) + "." + quoteIdent(table))
	if err != nil {
		return nil, nil, err
	}
	defer stmt.Close()
	conv := converter{zeroNull: zeroNull, charsets: cs}
	var rows [][]any
	var result gomysql.Result
	err = stmt.ExecuteSelectStreaming(&result, func(row []gomysql.FieldValue) error {
		out := make([]any, len(row))
		for i, fv := range row {
			v, err := conv.value(&descs[i], fieldValue(fv), false)
			if err != nil {
				return fmt.Errorf("column %s: %w", descs[i].name, err)
			}
			out[i] = v
		}
		rows = append(rows, out)
		return nil
	}, nil)
	return t, rows, err
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
	srv, err := Preflight(ctx, c, PreflightOptions{Tables: s.opts.Tables, ServerID: s.opts.ServerID, ReportHost: s.reportHost()})
	if err != nil {
		return Position{}, err
	}
	return currentPosition(c, srv)
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
