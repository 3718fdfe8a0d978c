package sinktest

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/sluice-cdc/sluice/pipeline"
)

// Matrix runs the type × operation conformance matrix against a sink: for
// every TypeCase, a table of its own receives each edge value through
// every operation a change stream carries, and after each step the
// target must hold exactly what the source would:
//
//	insert        one row per edge value
//	update        every row to the next edge value, then back
//	key update    every row moves to a new key, carrying its value
//	delete        every other row
//	add column    the table gains one column per edge value, each with
//	              that value as its missing value (ADD COLUMN … DEFAULT:
//	              the existing rows hold it with no change event), then
//	              one row is updated with the new shape
//	truncate      every row goes; a row inserted after it stays
//
// Each TypeCase is a subtest; a failure names the step and (in the diff)
// the row, so the type, the operation and the value.
//
// A harness with a method Excluded(tc TypeCase, v any) string leaves out
// the values it names a reason for (an open defect or a documented
// limit of its target); the test logs each with the reason. One with a
// method Fallback(tc TypeCase, v any) string names the values the
// target holds in a documented fallback form (still checked exactly, as
// the harness reads that form back), for the type table; one with a
// method MissingFallback(tc TypeCase, v any) string, the same for values
// as an added column's missing value only.
//
// The results — per type family, the values that went through exactly and
// the exceptions with their reasons — are the sink's type table, which
// must equal the file doc (the table users read; "" skips the check).
// The table is only compared when every cell passed.
func Matrix(t *testing.T, h Harness, title, doc string) {
	ex, _ := h.(interface{ Excluded(TypeCase, any) string })
	fb, _ := h.(interface{ Fallback(TypeCase, any) string })
	mf, _ := h.(interface{ MissingFallback(TypeCase, any) string })
	var cells []cellReport
	for _, tc := range TypeCases {
		rep := cellReport{name: tc.Name, sourceType: tc.Column.SourceType}
		var kept []any
		for _, v := range tc.Values {
			if ex != nil {
				if why := ex.Excluded(tc, v); why != "" {
					rep.excluded = append(rep.excluded, exception{docValue(v), why})
					continue
				}
			}
			if fb != nil {
				if how := fb.Fallback(tc, v); how != "" {
					rep.fallback = append(rep.fallback, exception{docValue(v), how})
				}
			}
			if mf != nil {
				if how := mf.MissingFallback(tc, v); how != "" {
					rep.missingFallback = append(rep.missingFallback, exception{docValue(v), how})
				}
			}
			kept = append(kept, v)
		}
		rep.exact = len(kept)
		cells = append(cells, rep)
		t.Run(tc.Name, func(t *testing.T) {
			for _, e := range rep.excluded {
				t.Logf("left out %s: %s", e.value, e.why)
			}
			tc.Values = kept
			if len(tc.Values) < 2 {
				t.Skipf("fewer than two values left")
			}
			runTypeCase(t, h, tc)
		})
	}
	if doc != "" && !t.Failed() {
		checkDoc(t, doc, matrixDoc(title, cells))
	}
}

// matrixTable is the table of one TypeCase: a bigint key and the value.
func matrixTable(tc TypeCase) *pipeline.Table {
	c := tc.Column
	c.Name, c.Nullable = "v", true
	return &pipeline.Table{
		ID: pipeline.TableID{Database: "matrix", Schema: "matrix", Table: "t_" + strings.Map(func(r rune) rune {
			if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
				return r
			}
			return '_'
		}, tc.Name)},
		Columns:    []pipeline.Column{{Name: "id", Type: pipeline.TypeInt64, Key: true}, c},
		KeyIdx:     []int{0},
		Generation: 1,
	}
}

// cellState is what the target must hold: rows by key text.
type cellState struct {
	table *pipeline.Table
	rows  map[string][]any
	tx    uint64
}

func (c *cellState) next() pipeline.Version {
	c.tx++
	return pipeline.Version{0, 0, c.tx, 0}
}

func (c *cellState) put(row []any) { c.rows[RowKey(c.table, row)] = row }

func (c *cellState) check(t *testing.T, h Harness, step string) {
	t.Helper()
	if diff := Diff(c.table, c.rows, h.Read(t, c.table)); diff != "" {
		t.Fatalf("after %s: %s differs:\n%s", step, c.table.ID, diff)
	}
}

func runTypeCase(t *testing.T, h Harness, tc TypeCase) {
	s := open(t, h.Open(t))
	defer func() { closeSink(t, s) }()
	st := &cellState{table: matrixTable(tc), rows: map[string][]any{}}
	n := len(tc.Values)
	id := func(i int) int64 { return int64(i + 1) }

	var recs []pipeline.Record
	for i, v := range tc.Values {
		row := []any{id(i), v}
		st.put(row)
		recs = append(recs, pipeline.Record{Op: pipeline.OpInsert, Table: st.table, After: row, Version: st.next()})
	}
	write(t, s, recs)
	st.check(t, h, "insert")

	// Every row to the next edge value, then back, in separate writes.
	for _, shift := range []int{1, 0} {
		recs = recs[:0]
		for i := range tc.Values {
			row := []any{id(i), tc.Values[(i+shift)%n]}
			st.put(row)
			recs = append(recs, pipeline.Record{Op: pipeline.OpUpdate, Table: st.table, After: row, Version: st.next()})
		}
		write(t, s, recs)
		st.check(t, h, fmt.Sprintf("update by %d", shift))
	}

	// A key update is the old key's delete and the new key's insert.
	recs = recs[:0]
	for i, v := range tc.Values {
		old := []any{id(i), v}
		moved := []any{id(i) + 1000, v}
		delete(st.rows, RowKey(st.table, old))
		st.put(moved)
		recs = append(recs,
			pipeline.Record{Op: pipeline.OpDelete, Table: st.table, Before: []any{id(i), nil}, Version: st.next()},
			pipeline.Record{Op: pipeline.OpInsert, Table: st.table, After: moved, Version: st.next()})
	}
	write(t, s, recs)
	st.check(t, h, "key update")

	recs = recs[:0]
	for i := 0; i < n; i += 2 {
		delete(st.rows, RowKey(st.table, []any{id(i) + 1000, nil}))
		recs = append(recs, pipeline.Record{Op: pipeline.OpDelete, Table: st.table, Before: []any{id(i) + 1000, nil}, Version: st.next()})
	}
	write(t, s, recs)
	st.check(t, h, "delete")

	addColumns(t, h, s, st, tc)

	// Truncate, then one row after it.
	write(t, s, []pipeline.Record{{Op: pipeline.OpTruncate, Table: st.table, Version: st.next()}})
	clear(st.rows)
	st.check(t, h, "truncate")
	row := make([]any, len(st.table.Columns))
	row[0] = int64(1)
	for j := 1; j < len(row); j++ {
		row[j] = tc.Values[(j-1)%n]
	}
	st.put(row)
	write(t, s, []pipeline.Record{{Op: pipeline.OpInsert, Table: st.table, After: row, Version: st.next()}})
	st.check(t, h, "insert after truncate")
}

// addColumns gives the table one more column per edge value, with that
// value as its missing value, writes the new shape alone (OpShape), then
// one row of it: the rows written before hold the missing values, the
// written one its own.
func addColumns(t *testing.T, h Harness, s pipeline.Sink, st *cellState, tc TypeCase) {
	t.Helper()
	wider := *st.table
	wider.Columns = slices.Clone(st.table.Columns)
	wider.Generation++
	for j, v := range tc.Values {
		c := tc.Column
		c.Name, c.Nullable, c.Missing = fmt.Sprintf("d%d", j), true, v
		wider.Columns = append(wider.Columns, c)
	}
	st.table = &wider
	n := len(tc.Values)
	held := slices.Clone(tc.Values) // what the older rows read in each new column
	var written []any
	for k, row := range st.rows {
		grown := slices.Clone(row)
		grown = append(grown, held...)
		st.rows[k] = grown
		if written == nil {
			written = slices.Clone(grown)
		}
	}
	if written == nil {
		t.Fatal("no row left to update after the shape change")
	}
	// The written row's new columns take the edge values shifted by one,
	// so that each differs from its missing value.
	for j := range tc.Values {
		written[2+j] = tc.Values[(j+1)%n]
	}
	// The new shape first reaches the sink alone (OpShape: the source saw
	// the column added with no row change after it), then again, replayed
	// with the row.
	write(t, s, []pipeline.Record{{Op: pipeline.OpShape, Table: st.table, Version: st.next()}})
	st.check(t, h, "add column … default, the shape alone")
	st.put(written)
	write(t, s, []pipeline.Record{{Op: pipeline.OpShape, Table: st.table, Version: st.next()},
		{Op: pipeline.OpUpdate, Table: st.table, After: written, Version: st.next()}})
	st.check(t, h, "add column … default")
}
