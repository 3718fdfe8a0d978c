package bleve

import (
	"context"
	"errors"
	"math"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/sinks/sinktest"
)

var ctx = context.Background()

func ver(minor uint64) pipeline.Version { return pipeline.Version{0, 7, 0, minor} }

func dec(s string) pipeline.Decimal {
	d, err := pipeline.ParseDecimal(s)
	if err != nil {
		panic(err)
	}
	return d
}

func openSink(t testing.TB, opts Options) *Sink {
	t.Helper()
	if opts.Path == "" {
		opts.Path = filepath.Join(t.TempDir(), "index")
	}
	s := New(opts, nil)
	if err := s.Open(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(ctx) })
	return s
}

func mustWrite(t testing.TB, s *Sink, recs ...pipeline.Record) {
	t.Helper()
	if err := s.Write(ctx, recs); err != nil {
		t.Fatalf("write: %v", err)
	}
}

func rows(t *testing.T, s *Sink, table *pipeline.Table) map[string][]any {
	t.Helper()
	rs, err := s.Rows(ctx, table)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]any{}
	for _, r := range rs {
		out[sinktest.RowKey(table, r)] = r
	}
	return out
}

func expectRows(t *testing.T, s *Sink, table *pipeline.Table, want ...[]any) {
	t.Helper()
	w := map[string][]any{}
	for _, r := range want {
		w[sinktest.RowKey(table, r)] = r
	}
	if d := sinktest.Diff(table, w, rows(t, s, table)); d != "" {
		t.Fatalf("rows differ:\n%s", d)
	}
}

var people = &pipeline.Table{
	ID: pipeline.TableID{Schema: "public", Table: "people"},
	Columns: []pipeline.Column{
		{Name: "id", Type: pipeline.TypeInt64, Key: true},
		{Name: "name", Type: pipeline.TypeString},
		{Name: "bio", Type: pipeline.TypeText},
	},
	KeyIdx: []int{0}, Generation: 1,
}

func change(op pipeline.Op, v uint64, row ...any) pipeline.Record {
	return pipeline.Record{Op: op, Table: people, After: row, Version: ver(v)}
}

func del(v uint64, id int64) pipeline.Record {
	return pipeline.Record{Op: pipeline.OpDelete, Table: people, Before: []any{id, nil, nil}, Version: ver(v)}
}

// storedDoc returns the stored state of a people row: version, tombstone
// flag, presence.
func storedDoc(t *testing.T, s *Sink, id string) (pipeline.Version, bool, bool) {
	t.Helper()
	doc, err := s.idx.Document("public.people/" + id)
	if err != nil {
		t.Fatal(err)
	}
	if doc == nil {
		return pipeline.Version{}, false, false
	}
	st, err := readStored(doc)
	if err != nil {
		t.Fatal(err)
	}
	return st.version, st.deleted, true
}

func TestUpsertStaleDeleteTombstone(t *testing.T) {
	s := openSink(t, Options{})
	mustWrite(t, s, change(pipeline.OpInsert, 2, int64(1), "ann", "x"), change(pipeline.OpInsert, 2, int64(2), "bob", "y"),
		pipeline.Record{Op: pipeline.OpHeartbeat, Version: ver(3)})
	mustWrite(t, s, change(pipeline.OpUpdate, 1, int64(1), "stale", "s"), change(pipeline.OpUpdate, 2, int64(2), "same version", "s"),
		change(pipeline.OpUpdate, 4, int64(2), "bobby", "y"))
	expectRows(t, s, people, []any{int64(1), "ann", "x"}, []any{int64(2), "bobby", "y"})
	// A delete leaves a tombstone; a late snapshot row does not resurrect it.
	mustWrite(t, s, del(5, 1))
	mustWrite(t, s, change(pipeline.OpRead, 0, int64(1), "snapshot", "z"))
	expectRows(t, s, people, []any{int64(2), "bobby", "y"})
	if v, deleted, ok := storedDoc(t, s, "1"); !ok || !deleted || v != ver(5) {
		t.Fatalf("tombstone: version %v deleted %v present %v", v, deleted, ok)
	}
	// A newer insert revives the key.
	mustWrite(t, s, change(pipeline.OpInsert, 6, int64(1), "ann again", nil))
	expectRows(t, s, people, []any{int64(1), "ann again", nil}, []any{int64(2), "bobby", "y"})
}

func TestTruncateBarrierSurvivesReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "index")
	s := openSink(t, Options{Path: path})
	mustWrite(t, s, change(pipeline.OpInsert, 1, int64(1), "a", nil), change(pipeline.OpInsert, 3, int64(2), "b", nil),
		change(pipeline.OpInsert, 7, int64(4), "kept: newer than the barrier", nil))
	mustWrite(t, s, pipeline.Record{Op: pipeline.OpTruncate, Table: people, Version: ver(5)},
		change(pipeline.OpInsert, 6, int64(3), "c", nil), change(pipeline.OpUpdate, 4, int64(2), "below the barrier", nil))
	expectRows(t, s, people, []any{int64(3), "c", nil}, []any{int64(4), "kept: newer than the barrier", nil})
	if _, _, ok := storedDoc(t, s, "1"); ok {
		t.Fatal("a row below the barrier is still in the index")
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	s = openSink(t, Options{Path: path})
	// Records below the barrier are ignored, even for keys never seen; an
	// older truncate does not lower it.
	mustWrite(t, s, change(pipeline.OpUpdate, 4, int64(2), "late", nil), change(pipeline.OpRead, 0, int64(9), "snap", nil),
		pipeline.Record{Op: pipeline.OpTruncate, Table: people, Version: ver(2)})
	expectRows(t, s, people, []any{int64(3), "c", nil}, []any{int64(4), "kept: newer than the barrier", nil})
	if got := s.state.Tables["public.people"].Barrier; got != ver(5).String() {
		t.Fatalf("barrier %s", got)
	}
}

func TestUnchangedAndDroppedColumns(t *testing.T) {
	s := openSink(t, Options{})
	mustWrite(t, s, change(pipeline.OpInsert, 1, int64(1), "a", "long text"))
	mustWrite(t, s, change(pipeline.OpUpdate, 2, int64(1), "a2", pipeline.UnchangedValue))
	// A new key whose only change leaves the column Unchanged gets NULL.
	mustWrite(t, s, change(pipeline.OpUpdate, 3, int64(2), "b", pipeline.UnchangedValue))
	expectRows(t, s, people, []any{int64(1), "a2", "long text"}, []any{int64(2), "b", nil})
	// A newer shape without bio: the stored bio stays, a new column joins.
	gen2 := &pipeline.Table{ID: people.ID, KeyIdx: []int{0}, Generation: 2,
		Columns: append(append([]pipeline.Column{}, people.Columns[:2]...),
			pipeline.Column{Name: "score", Type: pipeline.TypeDecimal, Precision: 6, Scale: 1})}
	mustWrite(t, s, pipeline.Record{Op: pipeline.OpUpdate, Table: gen2, After: []any{int64(1), "a3", dec("12.5")}, Version: ver(4)})
	wide := &pipeline.Table{ID: people.ID, KeyIdx: []int{0}, Columns: append(append([]pipeline.Column{}, people.Columns...), gen2.Columns[2])}
	expectRows(t, s, wide, []any{int64(1), "a3", "long text", dec("12.5")}, []any{int64(2), "b", nil, nil})
	// The kept column is still searchable.
	res, err := s.Search(ctx, SearchRequest{Query: "bio:long"})
	if err != nil || res.Total != 1 {
		t.Fatalf("search kept column: %+v %v", res, err)
	}
}

func TestPoisonRecordsApplyTheRest(t *testing.T) {
	s := openSink(t, Options{})
	docs := &pipeline.Table{ID: pipeline.TableID{Schema: "s", Table: "docs"}, KeyIdx: []int{0}, Generation: 1,
		Columns: []pipeline.Column{{Name: "id", Type: pipeline.TypeInt64, Key: true},
			{Name: "body", Type: pipeline.TypeJSON}, {Name: "title", Type: pipeline.TypeString}}}
	rec := func(id int64, body pipeline.JSON, title any) pipeline.Record {
		return pipeline.Record{Op: pipeline.OpInsert, Table: docs, After: []any{id, body, title}, Version: ver(uint64(id))}
	}
	err := s.Write(ctx, []pipeline.Record{
		rec(1, `{"ok": true}`, "fine"),
		rec(2, `{"broken": `, "invalid json"),
		rec(3, `[]`, "bad \xff utf-8"),
		rec(4, `1`, int64(4)), // wrong Go type for a string column
		rec(5, `"x"`, "fine too"),
		{Op: pipeline.OpInsert, Version: ver(6)}, // no table
	})
	var be *pipeline.BatchError
	if !errors.As(err, &be) {
		t.Fatalf("want BatchError, got %v", err)
	}
	failed := map[int]bool{}
	for _, f := range be.Failed {
		if !f.Permanent {
			t.Errorf("record %d failure not permanent: %v", f.Index, f.Err)
		}
		failed[f.Index] = true
	}
	if len(failed) != 4 || !failed[1] || !failed[2] || !failed[3] || !failed[5] {
		t.Fatalf("failed %v: %v", failed, err)
	}
	expectRows(t, s, docs, []any{int64(1), pipeline.JSON(`{"ok":true}`), "fine"}, []any{int64(5), pipeline.JSON(`"x"`), "fine too"})
}

// A shape that changes a column's type — against the index, or against an
// earlier shape in the same batch of a table the index does not hold yet —
// refuses its table with a *pipeline.TableError before anything of the
// batch is applied; the other tables go on.
func TestTypeChangeRefusesTable(t *testing.T) {
	s := openSink(t, Options{})
	shape := func(name string, gen int, body pipeline.Type) *pipeline.Table {
		return &pipeline.Table{ID: pipeline.TableID{Schema: "s", Table: name}, KeyIdx: []int{0}, Generation: gen,
			Columns: []pipeline.Column{{Name: "id", Type: pipeline.TypeInt64, Key: true}, {Name: "body", Type: body}}}
	}
	rec := func(tbl *pipeline.Table, v uint64, id int64, body any) pipeline.Record {
		return pipeline.Record{Op: pipeline.OpInsert, Table: tbl, After: []any{id, body}, Version: ver(v)}
	}
	docs, docs2 := shape("docs", 1, pipeline.TypeJSON), shape("docs", 2, pipeline.TypeString)
	fresh, fresh2 := shape("fresh", 1, pipeline.TypeInt64), shape("fresh", 2, pipeline.TypeString)
	mustWrite(t, s, rec(docs, 1, 1, pipeline.JSON(`{}`)))
	for _, tc := range []struct {
		table pipeline.TableID
		recs  []pipeline.Record
	}{
		{docs.ID, []pipeline.Record{change(pipeline.OpInsert, 2, int64(1), "a", nil), rec(docs2, 3, 1, "text"), rec(docs, 4, 2, pipeline.JSON(`[]`))}},
		{fresh.ID, []pipeline.Record{change(pipeline.OpInsert, 2, int64(1), "a", nil), rec(fresh, 3, 1, int64(7)), rec(fresh2, 4, 2, "seven")}},
	} {
		err := s.Write(ctx, tc.recs)
		var te *pipeline.TableError
		if !errors.As(err, &te) || te.Table != tc.table || !strings.Contains(err.Error(), "changed type") {
			t.Fatalf("err = %v (%T), want a *pipeline.TableError of %s", err, err, tc.table)
		}
		t.Logf("refused: %v", err)
		expectRows(t, s, people) // nothing of the batch was applied
	}
	expectRows(t, s, docs, []any{int64(1), pipeline.JSON(`{}`)})
	mustWrite(t, s, change(pipeline.OpInsert, 5, int64(1), "a", nil))
	expectRows(t, s, people, []any{int64(1), "a", nil})
}

func TestTombstonePurgeWaitsForSnapshot(t *testing.T) {
	s := openSink(t, Options{TombstoneTTL: time.Hour})
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	s.now = func() time.Time { return now }
	snap := func(id int64) pipeline.Record {
		r := change(pipeline.OpRead, 1, id, "snap", nil)
		r.Snapshot = true
		return r
	}
	mustWrite(t, s, snap(1), snap(2), snap(3))
	mustWrite(t, s, del(2, 1))
	now = now.Add(50 * time.Minute)
	mustWrite(t, s, snap(4)) // the snapshot is still running
	now = now.Add(20 * time.Minute)
	mustWrite(t, s, del(3, 2))
	if _, deleted, ok := storedDoc(t, s, "1"); !ok || !deleted {
		t.Fatal("tombstone purged while its table's snapshot ran within the TTL")
	}
	now = now.Add(61 * time.Minute) // an hour after the last snapshot record
	mustWrite(t, s, change(pipeline.OpUpdate, 4, int64(3), "c", nil))
	if _, _, ok := storedDoc(t, s, "1"); ok {
		t.Fatal("expired tombstone not purged")
	}
	// Tombstone 2 is 61 minutes old as well: purged. Live rows stay.
	if _, _, ok := storedDoc(t, s, "2"); ok {
		t.Fatal("expired tombstone 2 not purged")
	}
	expectRows(t, s, people, []any{int64(3), "c", nil}, []any{int64(4), "snap", nil})
}

func TestWriteHonoursCancellation(t *testing.T) {
	s := openSink(t, Options{})
	c, cancel := context.WithCancel(ctx)
	cancel()
	if err := s.Write(c, []pipeline.Record{change(pipeline.OpInsert, 1, int64(1), "a", nil)}); !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v", err)
	}
	closed := New(Options{Path: filepath.Join(t.TempDir(), "x")}, nil)
	if err := closed.Write(ctx, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("write before open: %v", err)
	}
}

func TestOpenRefusesForeignDirectory(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("mine"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := New(Options{Path: dir}, nil).Open(ctx)
	if err == nil || !pipeline.IsFatal(err) {
		t.Fatalf("open of a foreign directory: %v", err)
	}
	// An empty directory is taken over.
	empty := t.TempDir()
	openSink(t, Options{Path: empty})
}

func TestSmallBatchMaxBytesSplitsWrites(t *testing.T) {
	path := filepath.Join(t.TempDir(), "index")
	s := openSink(t, Options{Path: path, BatchMaxBytes: 1})
	var recs []pipeline.Record
	var want [][]any
	for i := int64(1); i <= 50; i++ {
		recs = append(recs, change(pipeline.OpInsert, uint64(i), i, "n", "b"))
		want = append(want, []any{i, "n", "b"})
	}
	mustWrite(t, s, append(recs, pipeline.Record{Op: pipeline.OpTruncate, Table: people, Version: ver(10)})...)
	expectRows(t, s, people, want[9:]...)
}

func TestTypesRoundTrip(t *testing.T) {
	cols := []pipeline.Column{
		{Name: "k", Type: pipeline.TypeUUID, Key: true},
		{Name: "b", Type: pipeline.TypeBool},
		{Name: "i16", Type: pipeline.TypeInt16},
		{Name: "i64", Type: pipeline.TypeInt64},
		{Name: "u64", Type: pipeline.TypeUint64},
		{Name: "f32", Type: pipeline.TypeFloat32},
		{Name: "f64", Type: pipeline.TypeFloat64},
		{Name: "d", Type: pipeline.TypeDecimal, Precision: 60, Scale: 20},
		{Name: "s", Type: pipeline.TypeString},
		{Name: "blob", Type: pipeline.TypeBytes},
		{Name: "j", Type: pipeline.TypeJSON},
		{Name: "day", Type: pipeline.TypeDate},
		{Name: "tod", Type: pipeline.TypeTime},
		{Name: "ttz", Type: pipeline.TypeTimeTZ},
		{Name: "ts", Type: pipeline.TypeTimestamp},
		{Name: "tstz", Type: pipeline.TypeTimestampTZ},
		{Name: "iv", Type: pipeline.TypeInterval},
		{Name: "inet", Type: pipeline.TypeInet},
		{Name: "mood", Type: pipeline.TypeEnum, Enum: []string{"ok", "sad"}},
		{Name: "ints", Type: pipeline.TypeArray, Elem: pipeline.TypeInt32},
		{Name: "docs", Type: pipeline.TypeArray, Elem: pipeline.TypeJSON},
		{Name: "stamps", Type: pipeline.TypeArray, Elem: pipeline.TypeTimestampTZ},
		{Name: "_id", Type: pipeline.TypeString}, // a reserved field name
	}
	table := &pipeline.Table{ID: pipeline.TableID{Schema: "s.x", Table: "all/types"}, Columns: cols, KeyIdx: []int{0}}
	huge, _ := new(big.Int).SetString("-123456789012345678901234567890123456789012345678901234567890", 10)
	rowA := []any{pipeline.UUID{0xde, 0xad, 0xbe, 0xef, 15: 1}, true, int64(-32768), int64(math.MinInt64),
		uint64(math.MaxUint64), float64(float32(1.25)), math.Inf(-1),
		pipeline.Decimal{Unscaled: huge, Scale: 20},
		"héllo \"quoted\"\n\ttab \x01", []byte{0, 1, 0xff}, pipeline.JSON(` {"a": [1, 2.5, null], "b": "x"} `),
		pipeline.Date{Days: -719528}, pipeline.TimeOfDay(86400_000_000), pipeline.TimeTZ{Micros: 45296_789012, OffsetSec: -(3*3600 + 30*60 + 7)},
		pipeline.Timestamp{Micros: -62135596800_000_000}, pipeline.Timestamp{Micros: 1700000000_123456},
		pipeline.Interval{Months: -14, Days: -3, Micros: -4_000_005}, "10.0.0.0/8", "sad",
		[]any{int64(1), nil, []any{int64(-3)}}, []any{pipeline.JSON(`[1,2]`), nil, pipeline.JSON(`{"x":1}`)},
		[]any{pipeline.Timestamp{Special: pipeline.NegInfinity}, pipeline.Timestamp{Micros: 1}}, "reserved"}
	rowB := make([]any, len(cols))
	rowB[0] = pipeline.UUID{1}
	rowB[6] = math.NaN()
	rowB[7] = pipeline.Decimal{Special: pipeline.NaN}
	rowB[11] = pipeline.Date{Days: 5_000_000} // beyond year 9999
	rowB[14] = pipeline.Timestamp{Special: pipeline.PosInfinity}
	rowB[15] = pipeline.Timestamp{Micros: math.MaxInt64 / 2}
	rowB[19] = []any{}
	path := filepath.Join(t.TempDir(), "index")
	s := openSink(t, Options{Path: path})
	mustWrite(t, s, pipeline.Record{Op: pipeline.OpInsert, Table: table, After: rowA, Version: ver(1)},
		pipeline.Record{Op: pipeline.OpRead, Table: table, After: rowB, Version: ver(1)})
	s.Close(ctx)
	s = openSink(t, Options{Path: path}) // reopen keeps state
	expectRows(t, s, table, rowA, rowB)
	got := rows(t, s, table)[sinktest.RowKey(table, rowA)]
	if got[7].(pipeline.Decimal).String() != rowA[7].(pipeline.Decimal).String() {
		t.Fatalf("decimal lost its exact form: %v", got[7])
	}
	res, err := s.Search(ctx, SearchRequest{Query: "_c_id:reserved", Table: "s.x.all/types"})
	if err != nil || res.Total != 1 || res.Hits[0].Key[0] != "deadbeef-0000-0000-0000-000000000001" {
		t.Fatalf("search by a reserved column name: %+v %v", res, err)
	}
}

// TestReopenAfterFailedBatch checks the recovery path of a failed bleve
// batch: the next Write reopens the index from disk and carries on.
func TestReopenAfterFailedBatch(t *testing.T) {
	s := openSink(t, Options{})
	mustWrite(t, s, pipeline.Record{Op: pipeline.OpTruncate, Table: people, Version: ver(1)},
		change(pipeline.OpInsert, 2, int64(1), "a", nil))
	s.broken = true
	mustWrite(t, s, change(pipeline.OpInsert, 3, int64(2), "b", nil), change(pipeline.OpInsert, 0, int64(3), "below the barrier", nil))
	if s.broken {
		t.Fatal("still marked broken")
	}
	expectRows(t, s, people, []any{int64(1), "a", nil}, []any{int64(2), "b", nil})
}
