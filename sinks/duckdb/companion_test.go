package duckdb

import (
	"math"
	"path/filepath"
	"testing"

	"github.com/sluice-cdc/sluice/pipeline"
)

var grids = &pipeline.Table{
	ID: pipeline.TableID{Schema: "public", Table: "grids"},
	Columns: []pipeline.Column{
		{Name: "id", Type: pipeline.TypeInt64, Key: true},
		{Name: "cells", Type: pipeline.TypeArray, Elem: pipeline.TypeInt32, Nullable: true, SourceType: "integer[]"},
		{Name: "note", Type: pipeline.TypeText, Nullable: true},
	},
	KeyIdx: []int{0}, Generation: 1,
}

func grid(op pipeline.Op, v uint64, id int64, cells any, note any) pipeline.Record {
	return pipeline.Record{Op: op, Table: grids, After: []any{id, cells, note}, Version: ver(v)}
}

// A multi-dimensional array lands in the row's companion column and a
// one-dimensional one in the LIST column, in either order, through the
// bulk path, the MERGE, an Unchanged value (the stored one is kept) and a
// restart; the rest of the row stays current.
func TestNestedArraysLandWithTheRow(t *testing.T) {
	path := filepath.Join(t.TempDir(), "n.duckdb")
	s := openSink(t, Options{Path: path})
	flat := []any{int64(1), nil, int64(3)}
	deep := []any{[]any{int64(1), int64(2)}, []any{int64(3), nil}}
	mustWrite(t, s, grid(pipeline.OpInsert, 1, 1, flat, "a"), grid(pipeline.OpInsert, 2, 2, flat, "b"))
	mustWrite(t, s, grid(pipeline.OpUpdate, 3, 1, deep, "a2"))
	expectRows(t, s, grids, []any{int64(1), deep, "a2"}, []any{int64(2), flat, "b"})
	// Back to one dimension: the companion is cleared.
	mustWrite(t, s, grid(pipeline.OpUpdate, 4, 1, []any{int64(7)}, "a3"))
	expectRows(t, s, grids, []any{int64(1), []any{int64(7)}, "a3"}, []any{int64(2), flat, "b"})
	// A new key with a nested value among inserts (the bulk path refuses
	// it, the MERGE writes it), then an Unchanged array keeps it.
	mustWrite(t, s, grid(pipeline.OpInsert, 5, 3, deep, "c"), grid(pipeline.OpInsert, 6, 4, flat, "d"))
	mustWrite(t, s, grid(pipeline.OpUpdate, 7, 3, pipeline.UnchangedValue, "c2"))
	want := [][]any{{int64(1), []any{int64(7)}, "a3"}, {int64(2), flat, "b"}, {int64(3), deep, "c2"}, {int64(4), flat, "d"}}
	expectRows(t, s, grids, want...)
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	s = openSink(t, Options{Path: path})
	expectRows(t, s, grids, want...)
	got, err := s.RowsByKey(ctx, grids, [][]any{{int64(3)}})
	if err != nil || len(got) != 1 {
		t.Fatalf("RowsByKey: %v, %v", got, err)
	}
	var text string
	if err := s.conn.QueryRowContext(ctx, `SELECT "_sluice_text_cells" FROM main.public_grids WHERE id = 3`).Scan(&text); err != nil || text != "[[1,2],[3,null]]" {
		t.Fatalf("companion of row 3: %q, %v", text, err)
	}
}

var amounts = &pipeline.Table{
	ID: pipeline.TableID{Schema: "public", Table: "amounts"},
	Columns: []pipeline.Column{
		{Name: "id", Type: pipeline.TypeInt64, Key: true},
		{Name: "amount", Type: pipeline.TypeDecimal, Precision: 12, Scale: 2, Nullable: true, SourceType: "numeric(12,2)"},
	},
	KeyIdx: []int{0}, Generation: 1,
}

// A numeric(p,s) NaN or infinity, which a DuckDB DECIMAL(p,s) cannot hold,
// lands in the companion column with the DECIMAL NULL, through the bulk
// path and the MERGE, as an added column's missing value, and across a
// restart; a finite value clears the companion again. Nothing goes to the
// dead-letter queue.
func TestNonFiniteDecimalsLandWithTheRow(t *testing.T) {
	path := filepath.Join(t.TempDir(), "d.duckdb")
	s := openSink(t, Options{Path: path})
	nan, inf := pipeline.Decimal{Special: pipeline.NaN}, pipeline.Decimal{Special: pipeline.PosInfinity}
	row := func(op pipeline.Op, v uint64, id int64, amount any) pipeline.Record {
		return pipeline.Record{Op: op, Table: amounts, After: []any{id, amount}, Version: ver(v)}
	}
	one, err := pipeline.ParseDecimal("1.50")
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, s, row(pipeline.OpInsert, 1, 1, nan), row(pipeline.OpInsert, 2, 2, one))
	mustWrite(t, s, row(pipeline.OpUpdate, 3, 2, inf), row(pipeline.OpUpdate, 4, 1, one))
	expectRows(t, s, amounts, []any{int64(1), one}, []any{int64(2), inf})

	// An added column whose missing value is NaN fills the older rows.
	wider := *amounts
	wider.Columns = append(append([]pipeline.Column(nil), amounts.Columns...),
		pipeline.Column{Name: "fee", Type: pipeline.TypeDecimal, Precision: 8, Scale: 3, Nullable: true, SourceType: "numeric(8,3)", Missing: nan})
	wider.Generation = 2
	mustWrite(t, s, pipeline.Record{Op: pipeline.OpShape, Table: &wider, Version: ver(5)})
	want := [][]any{{int64(1), one, nan}, {int64(2), inf, nan}}
	expectRows(t, s, &wider, want...)
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	s = openSink(t, Options{Path: path})
	expectRows(t, s, &wider, want...)
}

var readings = &pipeline.Table{
	ID: pipeline.TableID{Schema: "public", Table: "readings"},
	Columns: []pipeline.Column{
		{Name: "id", Type: pipeline.TypeInt64, Key: true},
		{Name: "v", Type: pipeline.TypeFloat64, Nullable: true, SourceType: "double precision"},
	},
	KeyIdx: []int{0}, Generation: 1,
}

// A float -0 lands in the companion column: an update from 0 to -0 (which
// DuckDB takes as no change) and a -0 among many zeros (which its
// checkpoint stores as 0) both read back as -0 after a restart, and 0
// again clears the companion.
func TestNegativeZeroLandsWithTheRow(t *testing.T) {
	path := filepath.Join(t.TempDir(), "z.duckdb")
	s := openSink(t, Options{Path: path})
	negZero := math.Copysign(0, -1)
	row := func(op pipeline.Op, v uint64, id int64, x float64) pipeline.Record {
		return pipeline.Record{Op: op, Table: readings, After: []any{id, x}, Version: ver(v)}
	}
	var recs []pipeline.Record
	for i := range int64(3000) {
		x := 0.0
		if i == 1500 {
			x = negZero
		}
		recs = append(recs, row(pipeline.OpInsert, 1, i, x))
	}
	mustWrite(t, s, recs...)
	mustWrite(t, s, row(pipeline.OpUpdate, 2, 7, negZero), row(pipeline.OpUpdate, 2, 1500, 0))
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	s = openSink(t, Options{Path: path})
	got, err := s.RowsByKey(ctx, readings, [][]any{{int64(7)}, {int64(1500)}, {int64(8)}})
	if err != nil || len(got) != 3 {
		t.Fatalf("RowsByKey: %v, %v", got, err)
	}
	sign := map[int64]bool{}
	for _, r := range got {
		f, ok := r[1].(float64)
		if !ok || f != 0 {
			t.Fatalf("row %v: want a zero", r)
		}
		sign[r[0].(int64)] = math.Signbit(f)
	}
	if !sign[7] || sign[1500] || sign[8] {
		t.Fatalf("signs after restart (true: -0): %v, want 7 only", sign)
	}
}
