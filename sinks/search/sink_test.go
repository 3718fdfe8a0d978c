package search

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/integration/harness"
	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/sinks/sinktest"
	"github.com/sluice-cdc/sluice/sinks/upsert"
)

var acct = &pipeline.Table{
	ID: pipeline.TableID{Database: "d", Schema: "public", Table: "acct"},
	Columns: []pipeline.Column{
		{Name: "id", Type: pipeline.TypeInt64, Key: true},
		{Name: "name", Type: pipeline.TypeString, Nullable: true},
		{Name: "note", Type: pipeline.TypeString, Nullable: true},
	},
	KeyIdx: []int{0}, Generation: 1,
}

func row(op pipeline.Op, minor uint64, id int64, name, note any) pipeline.Record {
	r := pipeline.Record{Op: op, Table: acct, Version: pipeline.Version{0, 100, 0, minor}}
	img := []any{id, name, note}
	if op == pipeline.OpDelete {
		r.Before = img
	} else {
		r.After = img
	}
	return r
}

func mustWrite(t testing.TB, s *Sink, recs ...pipeline.Record) {
	t.Helper()
	if err := s.Write(ctx, recs); err != nil {
		t.Fatalf("write: %v", err)
	}
}

func expect(t *testing.T, s *Sink, table *pipeline.Table, want ...[]any) {
	t.Helper()
	m := map[string][]any{}
	for _, r := range want {
		m[sinktest.RowKey(table, r)] = r
	}
	if diff := sinktest.Diff(table, m, readMap(t, s, table)); diff != "" {
		t.Fatal(diff)
	}
}

// get returns a document's _version and _source, found false when absent.
func get(t *testing.T, s *Sink, index, id string) (version int64, src map[string]json.RawMessage, found bool) {
	t.Helper()
	_, body, err := s.call(ctx, "get", http.MethodGet, "/"+url.PathEscape(index)+"/_doc/"+url.PathEscape(id), nil, nil, 404)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Found   bool                       `json:"found"`
		Version int64                      `json:"_version"`
		Source  map[string]json.RawMessage `json:"_source"`
	}
	if err := json.Unmarshal(body, &d); err != nil {
		t.Fatalf("get %s/%s: %v: %s", index, id, err, body)
	}
	return d.Version, d.Source, d.Found
}

// count returns the number of documents of an index or alias matching
// nothing but itself (after a refresh).
func count(t *testing.T, s *Sink, index string) int {
	t.Helper()
	return countQuery(t, s, index, "")
}

// countQuery counts the documents of index that query (JSON; "" for all)
// matches, after a refresh.
func countQuery(t *testing.T, s *Sink, index, query string) int {
	t.Helper()
	if _, _, err := s.call(ctx, "refresh", http.MethodPost, "/"+url.PathEscape(index)+"/_refresh", nil, nil); err != nil {
		t.Fatal(err)
	}
	var q []byte
	if query != "" {
		q = []byte(`{"query":` + query + `}`)
	}
	_, body, err := s.call(ctx, "count", http.MethodPost, "/"+url.PathEscape(index)+"/_count", nil, q)
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Count int `json:"count"`
	}
	if err := json.Unmarshal(body, &c); err != nil {
		t.Fatal(err)
	}
	return c.Count
}

func indexOf(s *Sink, table *pipeline.Table) string {
	name, _ := indexName(s.opts.IndexTemplate, table.ID)
	return name
}

// allTypes has one column of every pipeline.Type, keyed by a string with
// the characters the document id escapes and an integer.
var allTypes = func() *pipeline.Table {
	t := &pipeline.Table{ID: pipeline.TableID{Database: "d", Schema: "s", Table: "Types"}, KeyIdx: []int{0, 1}, Generation: 1}
	t.Columns = append(t.Columns, pipeline.Column{Name: "k1", Type: pipeline.TypeString, Key: true},
		pipeline.Column{Name: "k2", Type: pipeline.TypeInt64, Key: true})
	for ty := pipeline.TypeText; ty <= pipeline.TypeArray; ty++ {
		c := pipeline.Column{Name: "c_" + ty.String(), Type: ty, Nullable: true}
		if ty == pipeline.TypeArray {
			c.Elem = pipeline.TypeString
		}
		t.Columns = append(t.Columns, c)
	}
	t.Columns = append(t.Columns,
		pipeline.Column{Name: "c_int_array", Type: pipeline.TypeArray, Elem: pipeline.TypeInt64, Nullable: true},
		pipeline.Column{Name: "c_ts_array", Type: pipeline.TypeArray, Elem: pipeline.TypeTimestampTZ, Nullable: true},
		pipeline.Column{Name: "c_json_array", Type: pipeline.TypeArray, Elem: pipeline.TypeJSON, Nullable: true})
	return t
}()

func typeRows() [][]any {
	dec, _ := pipeline.ParseDecimal("-12345678901234567890.000123400")
	u := pipeline.UUID{0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
	rows := [][]any{
		{"a:b\\c", int64(1), "text ∂", true, int64(-32768), int64(math.MinInt32), int64(math.MinInt64), uint64(255), uint64(65535),
			uint64(math.MaxUint32), uint64(math.MaxUint64), float64(float32(1.1)), 0.1 + 0.2, dec, "str\n\"q\"\x01",
			[]byte{0, 1, 0xff}, u, pipeline.JSON(`{"a": [1, 2.50, 12345678901234567890], "b": "x/y"}`),
			pipeline.Date{Days: -719162}, pipeline.TimeOfDay(86400e6), pipeline.TimeTZ{Micros: 3723000004, OffsetSec: -(5*3600 + 30*60 + 15)},
			pipeline.Timestamp{Micros: 1_700_000_000_123_456}, pipeline.Timestamp{Micros: -62135596800_000_000 + 1},
			pipeline.Interval{Months: -14, Days: 3, Micros: -1_500_000}, "10.0.0.0/8", "08:00:2b:01:02:03", "happy", "a,b",
			[]byte{0xa5}, []byte{1, 1, 0, 0}, []any{"x", nil, []any{"y:z"}}, []any{int64(math.MaxInt64), nil, int64(-1)},
			[]any{pipeline.Timestamp{Micros: 42}, pipeline.Timestamp{Special: pipeline.PosInfinity}},
			[]any{pipeline.JSON(`[1,2]`), nil, pipeline.JSON(`{"k":"v"}`)}},
		{"", int64(-2), "", false, int64(0), int64(0), int64(0), uint64(0), uint64(0), uint64(0), uint64(0), math.Inf(-1), math.NaN(),
			pipeline.Decimal{Special: pipeline.NaN}, "", []byte{}, pipeline.UUID{}, pipeline.JSON(`"just a string"`),
			pipeline.Date{Special: pipeline.PosInfinity}, pipeline.TimeOfDay(0), pipeline.TimeTZ{Micros: 1, OffsetSec: 14 * 3600},
			pipeline.Timestamp{Special: pipeline.NegInfinity}, pipeline.Timestamp{Special: pipeline.PosInfinity},
			pipeline.Interval{}, "::1", "", "", "", []byte{}, nil, []any{}, []any{}, nil, []any{}},
		// A key longer than an id may be: the id is hashed.
		{strings.Repeat("long key ", 80), int64(3), "x", nil, nil, nil, nil, nil, nil, nil, nil, math.Inf(1), -0.0,
			pipeline.Decimal{Unscaled: big.NewInt(5), Scale: 0}, nil, nil, nil, pipeline.JSON(`[]`), nil, nil, nil, nil, nil,
			nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil},
	}
	nulls := make([]any, len(allTypes.Columns))
	nulls[0], nulls[1] = "nulls", int64(4)
	return append(rows, nulls)
}

func testTypesRoundTrip(t *testing.T, n *harness.SearchNode) {
	s := openSink(t, target(n, Options{}))
	want := map[string][]any{}
	var recs []pipeline.Record
	for _, r := range typeRows() {
		if len(r) != len(allTypes.Columns) {
			t.Fatalf("row has %d values for %d columns", len(r), len(allTypes.Columns))
		}
		recs = append(recs, pipeline.Record{Op: pipeline.OpInsert, Table: allTypes, After: r, Version: pipeline.Version{0, 1, 0, 1}})
		want[sinktest.RowKey(allTypes, r)] = r
	}
	mustWrite(t, s, recs...)
	if diff := sinktest.Diff(allTypes, want, readMap(t, s, allTypes)); diff != "" {
		t.Fatal(diff)
	}
	index := indexOf(s, allTypes)
	if index != strings.Replace(s.opts.IndexTemplate, "{schema}.{table}", "s.types", 1) {
		t.Fatalf("index name %q", index)
	}
	// The id escapes ':' and '\' of key values; a long key's id is hashed.
	for _, id := range []string{`a\:b\\c:1`, ":-2", "nulls:4"} {
		if _, _, found := get(t, s, index, id); !found {
			t.Errorf("document %q missing", id)
		}
	}
	if id := docID([]int{0, 1}, []any{strings.Repeat("long key ", 80), int64(3)}); !strings.HasPrefix(id, `\h`) || len(id) != 66 {
		t.Errorf("long id %q", id)
	} else if _, _, found := get(t, s, index, id); !found {
		t.Errorf("document %q missing", id)
	}
	// The derived mapping.
	_, body, err := s.call(ctx, "mapping", http.MethodGet, "/"+index+"/_mapping", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"k1":{"type":"keyword"}`, `"c_string":{"type":"text"`, `"c_int64":{"type":"long"}`,
		`"c_json":{"type":"object","enabled":false}`, `"c_timestamptz":{"type":"date","ignore_malformed":true}`,
		`"c_bytes":{"type":"binary"}`, `"c_uuid":{"type":"keyword"}`, `"_sluice_version":{"type":"keyword"}`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("mapping lacks %s:\n%s", want, body)
		}
	}
}

// testPoisonRecord overrides two columns' mappings (note as integer, a
// strict date format for name) so that some values are rejected by the
// engine: those records fail permanently with the engine's reason, the
// rest of the batch is durable.
func testPoisonRecord(t *testing.T, n *harness.SearchNode) {
	s := openSink(t, target(n, Options{Mappings: map[string]json.RawMessage{
		"public.acct": json.RawMessage(`{"properties":{"note":{"type":"integer"},"name":{"type":"date","format":"yyyy-MM-dd"}}}`)}}))
	recs := []pipeline.Record{
		row(pipeline.OpInsert, 1, 1, "2024-01-31", "12"),
		row(pipeline.OpInsert, 1, 2, "2024-02-01", "7"),
		row(pipeline.OpUpdate, 2, 2, "2024-02-02", "not a number"), // folded with the one above: both fail
		row(pipeline.OpInsert, 1, 3, "31/12/2024", nil),            // not the date format
		row(pipeline.OpInsert, 1, 4, nil, nil),
	}
	err := s.Write(ctx, recs)
	var be *pipeline.BatchError
	if !errors.As(err, &be) {
		t.Fatalf("err = %v, want a *pipeline.BatchError", err)
	}
	got := map[int]string{}
	for _, f := range be.Failed {
		if !f.Permanent {
			t.Errorf("record %d: not permanent: %v", f.Index, f.Err)
		}
		got[f.Index] = f.Err.Error()
	}
	if len(got) != 3 || got[1] == "" || got[2] == "" || got[3] == "" {
		t.Fatalf("failed records %v, want 1, 2 and 3", got)
	}
	t.Logf("engine's reason: %s", got[2])
	for i, field := range map[int]string{2: "[note]", 3: "[name]"} {
		if !strings.Contains(got[i], "failed to parse field "+field) || !strings.Contains(got[i], "parsing_exception") {
			t.Errorf("record %d: error lacks the engine's reason for %s: %s", i, field, got[i])
		}
	}
	expect(t, s, acct, []any{int64(1), "2024-01-31", "12"}, []any{int64(4), nil, nil})
}

// testManyPoisonRecords fails half the keys of a large batch: exactly the
// records of those keys fail (the newest change and the one folded into
// it), and every other key is written.
func testManyPoisonRecords(t *testing.T, n *harness.SearchNode) {
	s := openSink(t, target(n, Options{Mappings: map[string]json.RawMessage{
		"public.acct": json.RawMessage(`{"properties":{"note":{"type":"integer"}}}`)}}))
	const keys = 2000
	var recs []pipeline.Record
	wantFailed := map[int]bool{}
	var want [][]any
	for id := int64(1); id <= keys; id++ {
		note := strconv.FormatInt(id, 10)
		if id%2 == 0 {
			note = "not a number"
			wantFailed[len(recs)], wantFailed[len(recs)+1] = true, true
		} else {
			want = append(want, []any{id, "b", note})
		}
		recs = append(recs, row(pipeline.OpInsert, 1, id, "a", "1"), row(pipeline.OpUpdate, 2, id, "b", note))
	}
	err := s.Write(ctx, recs)
	var be *pipeline.BatchError
	if !errors.As(err, &be) || len(be.Failed) != len(wantFailed) {
		t.Fatalf("err = %v, want %d failed records", err, len(wantFailed))
	}
	for _, f := range be.Failed {
		if !wantFailed[f.Index] || !f.Permanent {
			t.Fatalf("record %d failed (%v), not a poisoned key's", f.Index, f.Err)
		}
	}
	expect(t, s, acct, want...)
}

// testLateSnapshot deletes a key, then writes a late snapshot row and a
// replay of the insert: the tombstone (Invariant 4) keeps the key deleted.
func testLateSnapshot(t *testing.T, n *harness.SearchNode) {
	s := openSink(t, target(n, Options{}))
	index := indexOf(s, acct)
	mustWrite(t, s, row(pipeline.OpInsert, 10, 1, "a", "n"), row(pipeline.OpInsert, 10, 2, "b", nil))
	mustWrite(t, s, row(pipeline.OpDelete, 11, 1, nil, nil))
	late := row(pipeline.OpRead, 1, 1, "snapshot", nil)
	late.Snapshot = true
	mustWrite(t, s, late, row(pipeline.OpInsert, 10, 1, "replay", nil))
	expect(t, s, acct, []any{int64(2), "b", nil})
	ver, src, found := get(t, s, index, "1")
	want, _, _ := external(pipeline.Version{0, 100, 0, 11})
	if !found || ver != want || string(src[fieldDeleted]) != "true" || src["name"] != nil {
		t.Fatalf("tombstone: found %v version %d (want %d) source %v", found, ver, want, src)
	}
	if c := count(t, s, index+defaultAliasSuffix); c != 1 {
		t.Fatalf("the live alias shows %d documents, want 1", c)
	}
	// A newer insert brings the key back.
	mustWrite(t, s, row(pipeline.OpInsert, 12, 1, "back", nil))
	expect(t, s, acct, []any{int64(1), "back", nil}, []any{int64(2), "b", nil})
}

func testTruncateBarrier(t *testing.T, n *harness.SearchNode) {
	o := target(n, Options{})
	s := openSink(t, o)
	index := indexOf(s, acct)
	var recs []pipeline.Record
	for i := int64(1); i <= 2500; i++ { // more than one scroll page
		recs = append(recs, row(pipeline.OpInsert, 10, i, "x", nil))
	}
	recs = append(recs, row(pipeline.OpInsert, 30, 9999, "newer than the truncate", nil))
	mustWrite(t, s, recs...)
	mustWrite(t, s, row(pipeline.OpDelete, 11, 7, nil, nil)) // a tombstone goes too
	trunc := pipeline.Record{Op: pipeline.OpTruncate, Table: acct, Version: pipeline.Version{0, 100, 0, 20}}
	// In one batch: an older change before the truncate, a newer one after.
	mustWrite(t, s, row(pipeline.OpUpdate, 15, 1, "older", nil), trunc, row(pipeline.OpInsert, 25, 2, "after", nil))
	want := [][]any{{int64(2), "after", nil}, {int64(9999), "newer than the truncate", nil}}
	expect(t, s, acct, want...)
	if c := count(t, s, index); c != 2 {
		t.Fatalf("%d documents after the truncate, want 2", c)
	}
	// Records below the barrier change nothing, even for absent keys, and
	// after a restart; an older truncate leaves the barrier.
	s.Close(ctx)
	s = openSink(t, o)
	old := trunc
	old.Version[3] = 5
	mustWrite(t, s, row(pipeline.OpRead, 1, 3, "snapshot", nil), row(pipeline.OpDelete, 19, 2, nil, nil), old)
	expect(t, s, acct, want...)
	if c := count(t, s, index); c != 2 {
		t.Fatalf("%d documents, want 2", c)
	}
	if st := s.indices[index]; st == nil || st.barrier != trunc.Version {
		t.Fatalf("barrier = %+v", st)
	}
	if c := count(t, s, index+defaultAliasSuffix); c != 2 {
		t.Fatalf("the live alias shows %d documents, want 2", c)
	}
}

// testSaturated writes versions whose index part saturates the external
// version (the exact path) mixed with plain ones.
func testSaturated(t *testing.T, n *harness.SearchNode) {
	s := openSink(t, target(n, Options{}))
	v := func(lsn, idx uint64, name string) pipeline.Record {
		r := row(pipeline.OpUpdate, 0, 1, name, nil)
		r.Version = pipeline.Version{0, lsn, 0, idx}
		return r
	}
	steps := []struct {
		rec  pipeline.Record
		want string
	}{
		{v(100, 5000, "a"), "a"},
		{v(100, 4500, "older, saturated"), "a"},
		{v(100, 5000, "equal, saturated"), "a"},
		{v(100, 6000, "newer, saturated"), "newer, saturated"},
		{v(100, 10, "older, plain"), "newer, saturated"},
		{v(100, maxIndex-1, "older, plain, just below"), "newer, saturated"},
		{v(101, 1, "next transaction"), "next transaction"},
		{v(100, 7000, "older transaction, saturated"), "next transaction"},
		{v(0, 1<<20, "generate-like, older"), "next transaction"},
	}
	for i, st := range steps {
		mustWrite(t, s, st.rec)
		expect(t, s, acct, []any{int64(1), st.want, nil})
		if i == 0 {
			if ver, _, _ := get(t, s, indexOf(s, acct), "1"); ver != 100<<indexBits|maxIndex {
				t.Fatalf("version %d", ver)
			}
		}
	}
	// A tombstone on the exact path, then a late saturated row.
	mustWrite(t, s, pipeline.Record{Op: pipeline.OpDelete, Table: acct, Before: []any{int64(1), nil, nil},
		Version: pipeline.Version{0, 101, 0, 9000}})
	mustWrite(t, s, v(101, 8000, "late"))
	expect(t, s, acct)
}

func testUnchanged(t *testing.T, n *harness.SearchNode) {
	s := openSink(t, target(n, Options{}))
	mustWrite(t, s, row(pipeline.OpInsert, 1, 1, "a", "kept"))
	mustWrite(t, s, row(pipeline.OpUpdate, 2, 1, "b", pipeline.UnchangedValue),
		row(pipeline.OpUpdate, 3, 1, pipeline.UnchangedValue, pipeline.UnchangedValue))
	// Unchanged on a key the target does not hold, or on a tombstone: NULL.
	mustWrite(t, s, row(pipeline.OpUpdate, 3, 2, "c", pipeline.UnchangedValue))
	mustWrite(t, s, row(pipeline.OpInsert, 1, 3, "d", "gone"), row(pipeline.OpDelete, 2, 3, nil, nil))
	mustWrite(t, s, row(pipeline.OpUpdate, 4, 3, "e", pipeline.UnchangedValue))
	// A replay of an older Unchanged update changes nothing.
	mustWrite(t, s, row(pipeline.OpUpdate, 2, 1, "replayed", pipeline.UnchangedValue))
	expect(t, s, acct, []any{int64(1), "b", "kept"}, []any{int64(2), "c", nil}, []any{int64(3), "e", nil})
}

// testNewColumn writes a newer shape with an added column: the column is
// mapped, and a record of the older shape keeps the stored value.
func testNewColumn(t *testing.T, n *harness.SearchNode) {
	s := openSink(t, target(n, Options{}))
	v2 := &pipeline.Table{ID: acct.ID, Generation: 2, KeyIdx: []int{0}, Columns: append(append([]pipeline.Column{}, acct.Columns...),
		pipeline.Column{Name: "score", Type: pipeline.TypeInt32, Nullable: true},
		pipeline.Column{Name: "flag", Type: pipeline.TypeBool, Nullable: true, Missing: false})}
	mustWrite(t, s, row(pipeline.OpInsert, 1, 1, "a", nil))
	mustWrite(t, s, pipeline.Record{Op: pipeline.OpInsert, Table: v2, Version: pipeline.Version{0, 100, 0, 2},
		After: []any{int64(2), "b", nil, int64(7), true}})
	mustWrite(t, s, row(pipeline.OpUpdate, 3, 2, "b'", nil)) // older shape: score kept, flag missing value
	// Row 1 predates both columns: it holds flag's missing value.
	expect(t, s, v2, []any{int64(1), "a", nil, nil, false}, []any{int64(2), "b'", nil, int64(7), false})
	index := indexOf(s, acct)
	_, body, err := s.call(ctx, "mapping", http.MethodGet, "/"+index+"/_mapping", nil, nil)
	if err != nil || !strings.Contains(string(body), `"score":{"type":"integer"}`) || !strings.Contains(string(body), `"flag":{"type":"boolean"}`) {
		t.Fatalf("mapping: %s %v", body, err)
	}
	if n := countQuery(t, s, index, `{"term":{"flag":false}}`); n != 2 {
		t.Fatalf("flag:false finds %d documents; want both rows (the filled field is indexed)", n)
	}

	// A crash after the next column was mapped and before its fill
	// finished: the restarted sink fills it at its next write.
	v3 := &pipeline.Table{ID: acct.ID, Generation: 3, KeyIdx: []int{0}, Columns: append(append([]pipeline.Column{}, v2.Columns...),
		pipeline.Column{Name: "tag", Type: pipeline.TypeText, Nullable: true, Missing: "x"})}
	if _, _, err := s.call(ctx, "map tag", http.MethodPut, "/"+index+"/_mapping", nil, []byte(`{"properties":{"tag":{"type":"keyword"}}}`)); err != nil {
		t.Fatal(err)
	}
	if err := s.updateState(ctx, s.indices[index], pendingDoc([]string{"tag"})); err != nil {
		t.Fatal(err)
	}
	s.Close(ctx)
	s = openSink(t, s.opts)
	mustWrite(t, s, pipeline.Record{Op: pipeline.OpUpdate, Table: v3, Version: pipeline.Version{0, 100, 0, 4},
		After: []any{int64(2), "c", nil, int64(8), true, nil}})
	expect(t, s, v3, []any{int64(1), "a", nil, nil, false, "x"}, []any{int64(2), "c", nil, int64(8), true, nil})
	s.Close(ctx)
	s = openSink(t, s.opts)
	if st, err := s.indexFor(ctx, &upsert.TableBatch{ID: acct.ID, Target: index, Cols: v3.Columns}); err != nil || len(st.pending) != 0 {
		t.Fatalf("after the fill: pending %v, %v; want none", st, err)
	}
}

// testTombstonePurge drives the sink's clock: tombstones go once older
// than the TTL, but not while the table's snapshot was recently active.
func testTombstonePurge(t *testing.T, n *harness.SearchNode) {
	s := openSink(t, target(n, Options{TombstoneTTL: time.Hour}))
	clock := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	s.now = func() time.Time { return clock }
	index := indexOf(s, acct)
	snap := func(minor uint64, id int64) pipeline.Record {
		r := row(pipeline.OpRead, minor, id, "snap", nil)
		r.Snapshot = true
		return r
	}
	other := &pipeline.Table{ID: pipeline.TableID{Schema: "public", Table: "other"}, Columns: acct.Columns, KeyIdx: []int{0}, Generation: 1}
	otherRow := func(op pipeline.Op, minor uint64, id int64) pipeline.Record {
		r := row(op, minor, id, "o", nil)
		r.Table = other
		return r
	}
	mustWrite(t, s, row(pipeline.OpInsert, 1, 1, "a", nil), row(pipeline.OpInsert, 1, 2, "b", nil),
		otherRow(pipeline.OpInsert, 1, 1))
	mustWrite(t, s, row(pipeline.OpDelete, 2, 1, nil, nil), otherRow(pipeline.OpDelete, 2, 1))
	// acct's snapshot keeps running.
	clock = clock.Add(2 * time.Hour)
	mustWrite(t, s, snap(1, 3))
	if _, _, found := get(t, s, index, "1"); !found {
		t.Fatal("a tombstone was purged while the table's snapshot was active")
	}
	if _, _, found := get(t, s, indexOf(s, other), "1"); found {
		t.Fatal("the expired tombstone of a table without snapshot is still there")
	}
	// The snapshot has been quiet for longer than the TTL.
	clock = clock.Add(90 * time.Minute)
	mustWrite(t, s, row(pipeline.OpUpdate, 3, 2, "b'", nil))
	if _, _, found := get(t, s, index, "1"); found {
		t.Fatal("the expired tombstone is still there")
	}
	expect(t, s, acct, []any{int64(2), "b'", nil}, []any{int64(3), "snap", nil})
}

// testAsyncDurability: an existing index whose acknowledged writes are
// not fsynced is refused.
func testAsyncDurability(t *testing.T, n *harness.SearchNode) {
	s := openSink(t, target(n, Options{}))
	if _, _, err := s.call(ctx, "create", http.MethodPut, "/"+indexOf(s, acct), nil,
		[]byte(`{"settings":{"index":{"translog":{"durability":"async"}}}}`)); err != nil {
		t.Fatal(err)
	}
	if err := s.Write(ctx, []pipeline.Record{row(pipeline.OpInsert, 1, 1, "a", nil)}); !pipeline.IsFatal(err) ||
		!strings.Contains(err.Error(), "durability") {
		t.Fatalf("err = %v, want fatal", err)
	}
}

func testWrongKind(t *testing.T, n *harness.SearchNode) {
	o := target(n, Options{})
	o.Kind = KindElasticsearch
	if n.Engine == harness.Elasticsearch {
		o.Kind = KindOpenSearch
	}
	if err := New(o, nil).Open(ctx); !pipeline.IsFatal(err) {
		t.Fatalf("kind %s on %s: err = %v, want fatal", o.Kind, n.Engine, err)
	}
}

// testUnreachable pauses the node (nothing answers) and kills it
// (connections refused): Write fails as a whole (never nil, never a
// BatchError), and succeeds again once the node is back.
func testUnreachable(t *testing.T, n *harness.SearchNode) {
	s := openSink(t, target(n, Options{Timeout: 2 * time.Second}))
	batch := func(b int) []pipeline.Record {
		recs := make([]pipeline.Record, 200)
		for i := range recs {
			recs[i] = row(pipeline.OpInsert, uint64(b+1), int64(i), fmt.Sprintf("batch %d", b), nil)
		}
		return recs
	}
	mustWrite(t, s, batch(0)...)
	down := []struct {
		name       string
		stop, back func() error
	}{
		{"paused", n.Pause, n.Resume},
		{"killed", func() error { n.Kill(); return nil }, func() error { return n.Restart(ctx) }},
	}
	for b, d := range down {
		if err := d.stop(); err != nil {
			t.Fatal(err)
		}
		err := s.Write(ctx, batch(b+1))
		var be *pipeline.BatchError
		if err == nil || errors.As(err, &be) || pipeline.IsFatal(err) {
			t.Fatalf("%s node: err = %v, want a whole-batch error", d.name, err)
		}
		t.Logf("%s node: %v", d.name, err)
		if err := d.back(); err != nil {
			t.Fatal(err)
		}
		// The runtime retries with backoff; so does this loop.
		deadline := time.Now().Add(60 * time.Second)
		for err = s.Write(ctx, batch(b+1)); err != nil; err = s.Write(ctx, batch(b+1)) {
			if time.Now().After(deadline) {
				t.Fatalf("write after the node came back: %v", err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	got := readMap(t, s, acct)
	if len(got) != 200 {
		t.Fatalf("%d rows, want 200", len(got))
	}
	for _, v := range got {
		if v[1] != "batch 2" {
			t.Fatalf("row %v", v)
		}
	}
}
