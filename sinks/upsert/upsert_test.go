package upsert

import (
	"errors"
	"reflect"
	"testing"

	"github.com/sluice-cdc/sluice/pipeline"
)

var errInvalid = errors.New("invalid")

// conv stages values as they are; keys of type tag go through AppendKey.
type conv struct{}

type tag struct{ s string }

func (conv) Stage(c *pipeline.Column, v any) (any, error) { return v, nil }

func (conv) Invalid(msg string) error { return errors.Join(errInvalid, errors.New(msg)) }

func (conv) AppendKey(b []byte, x any) ([]byte, bool) {
	if t, ok := x.(tag); ok {
		return append(append(b, 200, byte(len(t.s))), t.s...), true
	}
	return b, false
}

func ver(v uint64) pipeline.Version { return pipeline.Version{0, 0, 0, v} }

var (
	id = pipeline.TableID{Schema: "s", Table: "t"}
	// v1 is the older shape; v2 adds column c, whose missing value is "m",
	// and column d, which has none.
	v1 = &pipeline.Table{ID: id, Generation: 1, KeyIdx: []int{0}, Columns: []pipeline.Column{
		{Name: "id", Type: pipeline.TypeInt64}, {Name: "a", Type: pipeline.TypeString}}}
	v2 = &pipeline.Table{ID: id, Generation: 2, KeyIdx: []int{0}, Columns: []pipeline.Column{
		{Name: "id", Type: pipeline.TypeInt64}, {Name: "a", Type: pipeline.TypeString},
		{Name: "c", Type: pipeline.TypeString, Missing: "m"}, {Name: "d", Type: pipeline.TypeString}}}
)

func prepare(t *testing.T, recs ...pipeline.Record) ([]*TableBatch, []pipeline.RecordError) {
	t.Helper()
	return Prepare(recs, conv{}, func(id pipeline.TableID) string { return id.Schema + "_" + id.Table })
}

func TestNewestPerKeyWins(t *testing.T) {
	tbs, failed := prepare(t,
		pipeline.Record{Op: pipeline.OpInsert, Table: v2, Version: ver(1), After: []any{int64(1), "a1", "c1", "d1"}},
		pipeline.Record{Op: pipeline.OpUpdate, Table: v2, Version: ver(3), After: []any{int64(1), "a3", "c3", "d3"}},
		pipeline.Record{Op: pipeline.OpUpdate, Table: v2, Version: ver(2), After: []any{int64(1), "a2", "c2", "d2"}},
		pipeline.Record{Op: pipeline.OpInsert, Table: v2, Version: ver(1), After: []any{int64(2), "b", "c", "d"}},
	)
	if len(failed) != 0 || len(tbs) != 1 {
		t.Fatalf("batches %d, failed %v", len(tbs), failed)
	}
	tb := tbs[0]
	if tb.Target != "s_t" || tb.ID != id || len(tb.Rows) != 2 {
		t.Fatalf("batch %s %v with %d rows", tb.Target, tb.ID, len(tb.Rows))
	}
	r := tb.Rows[0]
	if r.Version != ver(3) || r.Kept != nil || !reflect.DeepEqual(r.Vals, []any{int64(1), "a3", "c3", "d3"}) {
		t.Fatalf("key 1: %+v", r)
	}
}

func TestKeptColumnFallback(t *testing.T) {
	tbs, _ := prepare(t,
		pipeline.Record{Op: pipeline.OpInsert, Table: v2, Version: ver(1), After: []any{int64(1), "a1", "c1", "d1"}},
		pipeline.Record{Op: pipeline.OpUpdate, Table: v2, Version: ver(2), After: []any{int64(1), "a2", "c2", pipeline.Unchanged{}}},
		pipeline.Record{Op: pipeline.OpUpdate, Table: v2, Version: ver(4), After: []any{int64(1), pipeline.Unchanged{}, "c4", pipeline.Unchanged{}}},
		// Older than the winner, applied out of order: its a is newer
		// than version 2's, so it is the fallback.
		pipeline.Record{Op: pipeline.OpUpdate, Table: v2, Version: ver(3), After: []any{int64(1), "a3", "c3", pipeline.Unchanged{}}},
	)
	r := tbs[0].Rows[0]
	if r.Version != ver(4) || r.Kept == nil {
		t.Fatalf("row %+v", r)
	}
	k := r.Kept
	if !reflect.DeepEqual(k.Keep, []bool{false, true, false, true}) {
		t.Fatalf("keep %v", k.Keep)
	}
	if !k.HasFb[1] || k.Fb[1] != "a3" || k.Fbv[1] != ver(3) {
		t.Fatalf("a fallback %v %v %v", k.HasFb[1], k.Fb[1], k.Fbv[1])
	}
	// d was Unchanged since version 1, whose value is the fallback.
	if !k.HasFb[3] || k.Fb[3] != "d1" || k.Fbv[3] != ver(1) {
		t.Fatalf("d fallback %v %v %v", k.HasFb[3], k.Fb[3], k.Fbv[3])
	}
	if k.HasFb[2] || r.Vals[2] != "c4" {
		t.Fatalf("c %v %v", k.HasFb[2], r.Vals[2])
	}
}

func TestDeleteKeepsNonKeyColumns(t *testing.T) {
	tbs, _ := prepare(t,
		pipeline.Record{Op: pipeline.OpUpdate, Table: v2, Version: ver(1), After: []any{int64(1), "a1", "c1", "d1"}},
		pipeline.Record{Op: pipeline.OpDelete, Table: v2, Version: ver(2), Before: []any{int64(1), nil, nil, nil}},
	)
	r := tbs[0].Rows[0]
	if !r.Deleted || r.Kept == nil || !reflect.DeepEqual(r.Kept.Keep, []bool{false, true, true, true}) {
		t.Fatalf("row %+v", r)
	}
	if r.Kept.Fb[1] != "a1" || r.Kept.Fbv[1] != ver(1) {
		t.Fatalf("fallback %v", r.Kept.Fb)
	}
}

func TestOlderShapeMissingFill(t *testing.T) {
	tbs, failed := prepare(t,
		pipeline.Record{Op: pipeline.OpInsert, Table: v1, Version: ver(1), After: []any{int64(1), "a1"}},
		pipeline.Record{Op: pipeline.OpInsert, Table: v2, Version: ver(2), After: []any{int64(2), "a2", "c2", "d2"}},
	)
	if len(failed) != 0 {
		t.Fatal(failed)
	}
	tb := tbs[0]
	if tb.Newest != v2 || len(tb.Cols) != 4 || !reflect.DeepEqual(tb.Keys, []int{0}) {
		t.Fatalf("cols %v keys %v", tb.Cols, tb.Keys)
	}
	r := tb.Rows[0]
	// c takes its missing value; d, which has none, keeps the target's.
	if r.Vals[2] != "m" || r.Kept == nil || !reflect.DeepEqual(r.Kept.Keep, []bool{false, false, false, true}) {
		t.Fatalf("row %+v kept %+v", r, r.Kept)
	}
}

func TestTruncateVersionPerTable(t *testing.T) {
	other := &pipeline.Table{ID: pipeline.TableID{Schema: "s", Table: "u"}, Generation: 1, KeyIdx: []int{0},
		Columns: []pipeline.Column{{Name: "id", Type: pipeline.TypeString}}}
	tbs, failed := prepare(t,
		pipeline.Record{Op: pipeline.OpTruncate, Table: v1, Version: ver(5)},
		pipeline.Record{Op: pipeline.OpHeartbeat, Version: ver(6)},
		pipeline.Record{Op: pipeline.OpTruncate, Table: v1, Version: ver(3)},
		pipeline.Record{Op: pipeline.OpTruncate, Table: other, Version: ver(2)},
		pipeline.Record{Op: pipeline.OpInsert, Table: other, Version: ver(4), After: []any{"k"}},
	)
	if len(failed) != 0 || len(tbs) != 2 {
		t.Fatalf("batches %d failed %v", len(tbs), failed)
	}
	if *tbs[0].Truncate != ver(5) || len(tbs[0].Rows) != 0 {
		t.Fatalf("t: truncate %v rows %d", tbs[0].Truncate, len(tbs[0].Rows))
	}
	if *tbs[1].Truncate != ver(2) || len(tbs[1].Rows) != 1 {
		t.Fatalf("u: truncate %v rows %d", tbs[1].Truncate, len(tbs[1].Rows))
	}
}

func TestKeysOfOtherTypes(t *testing.T) {
	tt := &pipeline.Table{ID: id, Generation: 1, KeyIdx: []int{0, 1}, Columns: []pipeline.Column{
		{Name: "k", Type: pipeline.TypeText}, {Name: "n", Type: pipeline.TypeString}, {Name: "v", Type: pipeline.TypeString}}}
	tbs, _ := prepare(t,
		pipeline.Record{Op: pipeline.OpInsert, Table: tt, Version: ver(1), After: []any{tag{"x"}, "1", "a"}},
		pipeline.Record{Op: pipeline.OpInsert, Table: tt, Version: ver(2), After: []any{tag{"x"}, "1", "b"}},
		pipeline.Record{Op: pipeline.OpInsert, Table: tt, Version: ver(3), After: []any{tag{"x1"}, "", "c"}},
	)
	if rows := tbs[0].Rows; len(rows) != 2 || rows[0].Vals[2] != "b" || rows[1].Vals[2] != "c" {
		t.Fatalf("rows %+v", rows)
	}
}

func TestPermanentFailures(t *testing.T) {
	nokey := &pipeline.Table{ID: pipeline.TableID{Schema: "s", Table: "n"}, Generation: 1,
		Columns: []pipeline.Column{{Name: "id", Type: pipeline.TypeInt64}}}
	changed := &pipeline.Table{ID: id, Generation: 0, KeyIdx: []int{0}, Columns: []pipeline.Column{
		{Name: "id", Type: pipeline.TypeInt64}, {Name: "a", Type: pipeline.TypeInt64}}}
	tbs, failed := prepare(t,
		pipeline.Record{Op: pipeline.OpInsert, Table: nokey, Version: ver(1), After: []any{int64(1)}},
		pipeline.Record{Op: pipeline.OpInsert, Table: v1, Version: ver(1), After: []any{nil, "a"}},
		pipeline.Record{Op: pipeline.OpInsert, Table: changed, Version: ver(1), After: []any{int64(1), int64(2)}},
		pipeline.Record{Op: pipeline.OpInsert, Table: v1, Version: ver(1), After: []any{int64(1)}},
		pipeline.Record{Op: pipeline.OpInsert, Version: ver(1)},
		pipeline.Record{Op: pipeline.OpInsert, Table: v1, Version: ver(2), After: []any{int64(1), "ok"}},
	)
	if len(tbs) != 1 || len(tbs[0].Rows) != 1 || tbs[0].Rows[0].Vals[1] != "ok" {
		t.Fatalf("batches %+v", tbs)
	}
	var idx []int
	for _, f := range failed {
		if !f.Permanent {
			t.Errorf("record %d: failure not permanent", f.Index)
		}
		idx = append(idx, f.Index)
	}
	if !reflect.DeepEqual(idx, []int{0, 1, 2, 3, 4}) {
		t.Fatalf("failed %v", failed)
	}
	if !errors.Is(failed[2].Err, errInvalid) {
		t.Fatalf("type change: %v", failed[2].Err)
	}
}

// SnapshotTables lists each shape with a snapshot record once, in order:
// reads and records marked Snapshot (a load's barrier) count, stream
// changes and tableless records do not.
func TestSnapshotTables(t *testing.T) {
	a := &pipeline.Table{ID: pipeline.TableID{Schema: "s", Table: "a"}}
	b := &pipeline.Table{ID: pipeline.TableID{Schema: "s", Table: "b"}}
	c := &pipeline.Table{ID: pipeline.TableID{Schema: "s", Table: "c"}}
	got := SnapshotTables([]pipeline.Record{
		{Op: pipeline.OpInsert, Table: c},
		{Op: pipeline.OpTruncate, Table: b, Snapshot: true},
		{Op: pipeline.OpRead, Table: a}, {Op: pipeline.OpRead, Table: a},
		{Op: pipeline.OpRead, Table: b}, {Op: pipeline.OpRead, Table: a},
		{Op: pipeline.OpHeartbeat},
	})
	if len(got) != 2 || got[0] != b || got[1] != a {
		t.Fatalf("snapshot tables %v", got)
	}
}

// Two shapes of one generation (a read's and the stream's, say) give the
// same union every time: the one the batch showed last leads, and its
// column definitions (here c's missing value) are the ones kept.
func TestShapesOfOneGenerationUniteInBatchOrder(t *testing.T) {
	read := &pipeline.Table{ID: id, Generation: 2, KeyIdx: []int{0}, Columns: []pipeline.Column{
		{Name: "id", Type: pipeline.TypeInt64}, {Name: "c", Type: pipeline.TypeString}, {Name: "a", Type: pipeline.TypeString}}}
	for trial := range 50 {
		tbs, failed := prepare(t,
			pipeline.Record{Op: pipeline.OpRead, Table: read, Version: ver(1), After: []any{int64(1), "c1", "a1"}},
			pipeline.Record{Op: pipeline.OpInsert, Table: v2, Version: ver(2), After: []any{int64(2), "a2", "c2", "d2"}},
		)
		if len(failed) != 0 {
			t.Fatal(failed)
		}
		tb := tbs[0]
		var names []string
		for _, c := range tb.Cols {
			names = append(names, c.Name)
		}
		if tb.Newest != v2 || !reflect.DeepEqual(names, []string{"id", "a", "c", "d"}) || tb.Cols[2].Missing != "m" {
			t.Fatalf("trial %d: newest generation %d with %d columns, union %v (c missing %v); want v2's order and definitions",
				trial, tb.Newest.Generation, len(tb.Newest.Columns), names, tb.Cols[2].Missing)
		}
	}
}
