package sinktest

import (
	"errors"
	"testing"

	"github.com/sluice-cdc/sluice/pipeline"
)

// RefusedShapeChange checks how a table-holding sink treats a schema
// change it can never apply: an added int32 column whose missing value
// (the source's default for rows that existed before it) is text. Write
// must fail with a *pipeline.TableError naming that table — so the runtime
// quarantines it alone — and a later write of another table must still
// succeed. write is the sink's Write; base is a table with an int64 key
// and one string column, already empty in the sink; v makes versions.
func RefusedShapeChange(t *testing.T, write func([]pipeline.Record) error, base *pipeline.Table, v func(uint64) pipeline.Version) {
	t.Helper()
	row := func(tbl *pipeline.Table, ver uint64, vals ...any) pipeline.Record {
		return pipeline.Record{Op: pipeline.OpInsert, Table: tbl, After: vals, Version: v(ver)}
	}
	pad := func(vals ...any) []any { return append(vals, make([]any, len(base.Columns)-len(vals))...) }
	if err := write([]pipeline.Record{row(base, 1, pad(int64(1), "a")...)}); err != nil {
		t.Fatalf("first write: %v", err)
	}
	gen2 := *base
	gen2.Generation++
	gen2.Columns = append(append([]pipeline.Column(nil), base.Columns...),
		pipeline.Column{Name: "n", Type: pipeline.TypeInt32, Missing: "forty-two"})
	other := &pipeline.Table{ID: pipeline.TableID{Schema: base.ID.Schema, Table: "other_" + base.ID.Table}, KeyIdx: []int{0},
		Generation: 1, Columns: []pipeline.Column{{Name: "id", Type: pipeline.TypeInt64, Key: true}, {Name: "name", Type: pipeline.TypeString}}}
	err := write([]pipeline.Record{row(other, 2, int64(1), "x"), row(&gen2, 3, append(pad(int64(2), "b"), int64(7))...)})
	var te *pipeline.TableError
	if !errors.As(err, &te) || te.Table != base.ID {
		t.Fatalf("a shape change the sink cannot apply: %v (%T), want a *pipeline.TableError of %s", err, err, base.ID)
	}
	if err := write([]pipeline.Record{row(other, 2, int64(1), "x")}); err != nil {
		t.Fatalf("another table after the refusal: %v", err)
	}
}
