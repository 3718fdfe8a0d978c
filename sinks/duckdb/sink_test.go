package duckdb

import (
	"context"
	"database/sql"
	"errors"
	"math"
	"math/big"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/sinks/sinktest"
	"github.com/sluice-cdc/sluice/sinks/upsert"
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

func openSink(t *testing.T, opts Options) *Sink {
	t.Helper()
	if opts.Path == "" {
		opts.Path = filepath.Join(t.TempDir(), "t.duckdb")
	}
	s := New(opts, nil)
	if err := s.Open(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(ctx) })
	return s
}

func mustWrite(t *testing.T, s *Sink, recs ...pipeline.Record) {
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

// stored returns the raw target row of a key: version, deleted flag.
func stored(t *testing.T, s *Sink, id int64) (pipeline.Version, bool, bool) {
	t.Helper()
	var b []byte
	var deleted bool
	err := s.conn.QueryRowContext(ctx, `SELECT _sluice_version, _sluice_deleted FROM main."public_people" WHERE id = ?`, id).Scan(&b, &deleted)
	if err != nil {
		return pipeline.Version{}, false, false
	}
	v, err := pipeline.ParseVersion(string(b))
	if err != nil {
		t.Fatal(err)
	}
	return v, deleted, true
}

func TestCreateUpsertStaleDelete(t *testing.T) {
	s := openSink(t, Options{})
	mustWrite(t, s, change(pipeline.OpInsert, 2, int64(1), "ann", "x"), change(pipeline.OpInsert, 2, int64(2), "bob", "y"),
		pipeline.Record{Op: pipeline.OpHeartbeat, Version: ver(3)})
	types := columnTypes(t, s, "public_people")
	for col, want := range map[string]string{"id": "BIGINT", "name": "VARCHAR", "bio": "VARCHAR",
		"_sluice_version": "BLOB", "_sluice_deleted": "BOOLEAN", "_sluice_updated_at": "TIMESTAMP WITH TIME ZONE"} {
		if types[col] != want {
			t.Errorf("column %s: type %q, want %q", col, types[col], want)
		}
	}
	mustWrite(t, s, change(pipeline.OpUpdate, 1, int64(1), "stale", "s"), change(pipeline.OpUpdate, 4, int64(2), "bobby", "y"))
	expectRows(t, s, people, []any{int64(1), "ann", "x"}, []any{int64(2), "bobby", "y"})
	// Delete leaves a tombstone; a late snapshot row does not resurrect it.
	mustWrite(t, s, del(5, 1))
	mustWrite(t, s, change(pipeline.OpRead, 0, int64(1), "snapshot", "z"))
	expectRows(t, s, people, []any{int64(2), "bobby", "y"})
	if v, deleted, ok := stored(t, s, 1); !ok || !deleted || v != ver(5) {
		t.Fatalf("tombstone: version %v deleted %v present %v", v, deleted, ok)
	}
	// A newer insert revives the key.
	mustWrite(t, s, change(pipeline.OpInsert, 6, int64(1), "ann again", nil))
	expectRows(t, s, people, []any{int64(1), "ann again", nil}, []any{int64(2), "bobby", "y"})
}

func columnTypes(t *testing.T, s *Sink, table string) map[string]string {
	t.Helper()
	rs, err := s.conn.QueryContext(ctx, `SELECT column_name, data_type FROM duckdb_columns() WHERE table_name = ?`, table)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	out := map[string]string{}
	for rs.Next() {
		var c, typ string
		if err := rs.Scan(&c, &typ); err != nil {
			t.Fatal(err)
		}
		out[c] = typ
	}
	return out
}

func TestTruncateBarrierSurvivesRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.duckdb")
	s := openSink(t, Options{Path: path})
	mustWrite(t, s, change(pipeline.OpInsert, 1, int64(1), "a", nil), change(pipeline.OpInsert, 3, int64(2), "b", nil))
	mustWrite(t, s, pipeline.Record{Op: pipeline.OpTruncate, Table: people, Version: ver(5)},
		change(pipeline.OpInsert, 6, int64(3), "c", nil))
	expectRows(t, s, people, []any{int64(3), "c", nil})
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	s = openSink(t, Options{Path: path})
	// Records below the barrier are ignored, even for keys never seen.
	mustWrite(t, s, change(pipeline.OpUpdate, 4, int64(2), "late", nil), change(pipeline.OpRead, 0, int64(9), "snap", nil))
	expectRows(t, s, people, []any{int64(3), "c", nil})
	if v, deleted, ok := stored(t, s, 2); !ok || !deleted || v != ver(5) {
		t.Fatalf("truncated row: version %v deleted %v present %v", v, deleted, ok)
	}
	var n int
	if err := s.conn.QueryRowContext(ctx, `SELECT count(*) FROM main._sluice_barriers WHERE "table" = 'public_people'`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("barrier rows %d, %v", n, err)
	}
}

func TestUnchangedKeepsStoredValue(t *testing.T) {
	s := openSink(t, Options{})
	mustWrite(t, s, change(pipeline.OpInsert, 1, int64(1), "a", "long text"))
	mustWrite(t, s, change(pipeline.OpUpdate, 2, int64(1), "a2", pipeline.UnchangedValue))
	// A new key whose only change leaves the column Unchanged gets NULL.
	mustWrite(t, s, change(pipeline.OpUpdate, 3, int64(2), "b", pipeline.UnchangedValue))
	expectRows(t, s, people, []any{int64(1), "a2", "long text"}, []any{int64(2), "b", nil})
}

func TestAddColumnEvolution(t *testing.T) {
	s := openSink(t, Options{})
	mustWrite(t, s, change(pipeline.OpInsert, 1, int64(1), "a", "x"))
	gen2 := &pipeline.Table{ID: people.ID, KeyIdx: []int{0}, Generation: 2,
		Columns: append(append([]pipeline.Column{}, people.Columns[:2]...), // bio dropped
			pipeline.Column{Name: "score", Type: pipeline.TypeDecimal, Precision: 6, Scale: 1})}
	mustWrite(t, s, pipeline.Record{Op: pipeline.OpInsert, Table: gen2, After: []any{int64(2), "b", dec("12.5")}, Version: ver(2)},
		pipeline.Record{Op: pipeline.OpUpdate, Table: gen2, After: []any{int64(1), "a2", nil}, Version: ver(3)})
	wide := &pipeline.Table{ID: people.ID, KeyIdx: []int{0}, Columns: append(append([]pipeline.Column{}, people.Columns...), gen2.Columns[2])}
	// The dropped column keeps its last value; the new one is added.
	expectRows(t, s, wide, []any{int64(1), "a2", "x", nil}, []any{int64(2), "b", nil, dec("12.5")})
}

func TestPermanentFailuresApplyTheRest(t *testing.T) {
	s := openSink(t, Options{})
	money := &pipeline.Table{ID: pipeline.TableID{Schema: "s", Table: "money"}, KeyIdx: []int{0},
		Columns: []pipeline.Column{{Name: "id", Type: pipeline.TypeInt64, Key: true},
			{Name: "amount", Type: pipeline.TypeDecimal, Precision: 10, Scale: 2},
			{Name: "at", Type: pipeline.TypeTimestamp}}}
	rec := func(id int64, amount pipeline.Decimal, at pipeline.Timestamp) pipeline.Record {
		return pipeline.Record{Op: pipeline.OpInsert, Table: money, After: []any{id, amount, at}, Version: ver(uint64(id))}
	}
	err := s.Write(ctx, []pipeline.Record{
		rec(1, dec("1.5"), pipeline.Timestamp{}),
		rec(2, pipeline.Decimal{Special: pipeline.NaN}, pipeline.Timestamp{}),
		rec(3, dec("2"), pipeline.Timestamp{Micros: math.MinInt64}),
		rec(4, dec("123456789.12"), pipeline.Timestamp{}), // 11 digits > 10
		rec(5, dec("3"), pipeline.Timestamp{Special: pipeline.PosInfinity}),
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
	// The NaN (record 2) lands in its companion column (companion.go).
	if len(failed) != 3 || !failed[2] || !failed[3] || !failed[5] {
		t.Fatalf("failed %v: %v", failed, err)
	}
	expectRows(t, s, money, []any{int64(1), dec("1.50"), pipeline.Timestamp{}},
		[]any{int64(2), pipeline.Decimal{Special: pipeline.NaN}, pipeline.Timestamp{}},
		[]any{int64(5), dec("3"), pipeline.Timestamp{Special: pipeline.PosInfinity}})
}

func TestHardDeletePurgesExpiredTombstones(t *testing.T) {
	s := openSink(t, Options{HardDelete: true, TombstoneTTL: time.Hour})
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	s.now = func() time.Time { return now }
	mustWrite(t, s, change(pipeline.OpInsert, 1, int64(1), "a", nil), change(pipeline.OpInsert, 1, int64(2), "b", nil))
	mustWrite(t, s, del(2, 1))
	if _, deleted, ok := stored(t, s, 1); !ok || !deleted {
		t.Fatal("tombstone must be kept until it expires")
	}
	now = now.Add(2 * time.Hour)
	mustWrite(t, s, change(pipeline.OpUpdate, 3, int64(2), "b2", nil))
	if _, _, ok := stored(t, s, 1); ok {
		t.Fatal("expired tombstone not purged")
	}
	expectRows(t, s, people, []any{int64(2), "b2", nil})
}

// In HardDelete mode a tombstone outlives its table's snapshot: none is
// purged while a snapshot record of the table was written within the TTL,
// across a restart (the snapshot time is stored); an hour after the last
// one, expired tombstones go and live rows stay.
func TestTombstonePurgeWaitsForSnapshot(t *testing.T) {
	opts := Options{HardDelete: true, TombstoneTTL: time.Hour}
	opts.Path = filepath.Join(t.TempDir(), "t.duckdb")
	s := openSink(t, opts)
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
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	s = openSink(t, opts)
	s.now = func() time.Time { return now }
	now = now.Add(20 * time.Minute)
	mustWrite(t, s, del(3, 2))
	if _, deleted, ok := stored(t, s, 1); !ok || !deleted {
		t.Fatal("tombstone purged while its table's snapshot ran within the TTL")
	}
	now = now.Add(62 * time.Minute) // past an hour after the last snapshot record
	mustWrite(t, s, change(pipeline.OpUpdate, 4, int64(3), "c", nil))
	for _, id := range []int64{1, 2} {
		if _, _, ok := stored(t, s, id); ok {
			t.Fatalf("expired tombstone %d not purged", id)
		}
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
}

// TestScanStops checks that Scan returns its callback's error and a
// cancelled ctx's error at once, and that the sink is usable after.
func TestScanStops(t *testing.T) {
	s := openSink(t, Options{})
	var recs []pipeline.Record
	for i := range 10 {
		recs = append(recs, change(pipeline.OpInsert, uint64(i+1), int64(i), "n", nil))
	}
	mustWrite(t, s, recs...)
	stop := errors.New("stop")
	c, cancel := context.WithCancel(ctx)
	defer cancel()
	for _, tc := range []struct {
		ctx  context.Context
		at3  func() error
		want error
	}{
		{ctx, func() error { return stop }, stop},
		{c, func() error { cancel(); return nil }, context.Canceled},
	} {
		n := 0
		err := s.Scan(tc.ctx, people, func([]any) error {
			if n++; n == 3 {
				return tc.at3()
			}
			return nil
		})
		if !errors.Is(err, tc.want) || n != 3 {
			t.Fatalf("scan: %v after %d rows, want %v after 3", err, n, tc.want)
		}
	}
	mustWrite(t, s, del(11, 0)) // the scans released the lock
	n := 0
	if err := s.Scan(ctx, people, func([]any) error { n++; return nil }); err != nil || n != 9 {
		t.Fatalf("scan: %v, %d rows, want 9", err, n)
	}
}

func TestTypesRoundTrip(t *testing.T) {
	cols := []pipeline.Column{
		{Name: "k", Type: pipeline.TypeUUID, Key: true},
		{Name: "b", Type: pipeline.TypeBool},
		{Name: "i16", Type: pipeline.TypeInt16},
		{Name: "i32", Type: pipeline.TypeInt32},
		{Name: "i64", Type: pipeline.TypeInt64},
		{Name: "u8", Type: pipeline.TypeUint8},
		{Name: "u64", Type: pipeline.TypeUint64},
		{Name: "f32", Type: pipeline.TypeFloat32},
		{Name: "f64", Type: pipeline.TypeFloat64},
		{Name: "d38", Type: pipeline.TypeDecimal, Precision: 38, Scale: 10},
		{Name: "dbig", Type: pipeline.TypeDecimal, Precision: 60, Scale: 20},
		{Name: "dfree", Type: pipeline.TypeDecimal, Scale: -1},
		{Name: "s", Type: pipeline.TypeString},
		{Name: "blob", Type: pipeline.TypeBytes},
		{Name: "j", Type: pipeline.TypeJSON},
		{Name: "d", Type: pipeline.TypeDate},
		{Name: "tod", Type: pipeline.TypeTime},
		{Name: "ttz", Type: pipeline.TypeTimeTZ},
		{Name: "ts", Type: pipeline.TypeTimestamp},
		{Name: "tstz", Type: pipeline.TypeTimestampTZ},
		{Name: "iv", Type: pipeline.TypeInterval},
		{Name: "inet", Type: pipeline.TypeInet},
		{Name: "mood", Type: pipeline.TypeEnum, Enum: []string{"ok", "sad"}},
		{Name: "ints", Type: pipeline.TypeArray, Elem: pipeline.TypeInt32},
		{Name: "decs", Type: pipeline.TypeArray, Elem: pipeline.TypeDecimal, Precision: 5, Scale: 2},
		{Name: "days", Type: pipeline.TypeArray, Elem: pipeline.TypeDate},
		{Name: "stamps", Type: pipeline.TypeArray, Elem: pipeline.TypeTimestampTZ},
	}
	table := &pipeline.Table{ID: pipeline.TableID{Schema: "s", Table: "all_types"}, Columns: cols, KeyIdx: []int{0}}
	big38, _ := new(big.Int).SetString("1234567890123456789012345678", 10)
	rowA := []any{pipeline.UUID{0xde, 0xad, 0xbe, 0xef, 15: 1}, true, int64(-32768), int64(math.MaxInt32), int64(math.MinInt64),
		uint64(255), uint64(math.MaxUint64), float64(float32(1.25)), math.Inf(-1),
		pipeline.Decimal{Unscaled: big38, Scale: 10},
		dec("-12345678901234567890123456789012345678.12345678901234567890"),
		dec("1.50000000000000000000000000000000000000000000001"),
		"héllo \"quoted\"", []byte{0, 1, 0xff}, pipeline.JSON(`{"a": [1, 2.5, null], "b": "x"}`),
		pipeline.Date{Days: -719528}, pipeline.TimeOfDay(86400_000_000), pipeline.TimeTZ{Micros: 45296_789012, OffsetSec: -(3*3600 + 30*60)},
		pipeline.Timestamp{Micros: -62135596800_000_000}, pipeline.Timestamp{Micros: 1700000000_123456},
		pipeline.Interval{Months: -14, Days: -3, Micros: -4_000_005}, "10.0.0.0/8", "sad",
		[]any{int64(1), nil, int64(-3)}, []any{dec("1.5"), nil}, []any{pipeline.Date{Special: pipeline.PosInfinity}, pipeline.Date{Days: 1}},
		[]any{pipeline.Timestamp{Special: pipeline.NegInfinity}, pipeline.Timestamp{Micros: 1}}}
	rowB := make([]any, len(cols))
	rowB[0] = pipeline.UUID{1}
	rowB[11] = pipeline.Decimal{Special: pipeline.NaN} // exact text keeps NaN
	rowB[15] = pipeline.Date{Special: pipeline.NegInfinity}
	rowB[18] = pipeline.Timestamp{Special: pipeline.PosInfinity}
	rowB[19] = pipeline.Timestamp{Special: pipeline.NegInfinity}
	rowB[23] = []any{}
	path := filepath.Join(t.TempDir(), "t.duckdb")
	s := openSink(t, Options{Path: path, Schema: "analytics"})
	mustWrite(t, s, pipeline.Record{Op: pipeline.OpInsert, Table: table, After: rowA, Version: ver(1)},
		pipeline.Record{Op: pipeline.OpRead, Table: table, After: rowB, Version: ver(1)})
	s.Close(ctx)
	s = openSink(t, Options{Path: path, Schema: "analytics"}) // restart keeps state
	expectRows(t, s, table, rowA, rowB)
	types := columnTypes(t, s, "s_all_types")
	for col, want := range map[string]string{"k": "UUID", "i16": "SMALLINT", "u64": "UBIGINT", "d38": "DECIMAL(38,10)",
		"dbig": "VARCHAR", "dfree": "VARCHAR", "j": "JSON", "d": "DATE", "tod": "TIME", "ttz": "TIME WITH TIME ZONE",
		"ts": "TIMESTAMP", "tstz": "TIMESTAMP WITH TIME ZONE", "iv": "INTERVAL", "blob": "BLOB", "mood": "VARCHAR",
		"ints": "INTEGER[]", "decs": "DECIMAL(5,2)[]", "stamps": "TIMESTAMP WITH TIME ZONE[]"} {
		if types[col] != want {
			t.Errorf("column %s: type %q, want %q", col, types[col], want)
		}
	}
	got := rows(t, s, table)[sinktest.RowKey(table, rowA)]
	if got[9].(pipeline.Decimal).Scale != 10 || got[10].(pipeline.Decimal).String() != rowA[10].(pipeline.Decimal).String() {
		t.Fatalf("decimals lost their exact form: %v %v", got[9], got[10])
	}
}

func TestAddColumnMissingValue(t *testing.T) {
	s := openSink(t, Options{})
	mustWrite(t, s, change(pipeline.OpInsert, 1, int64(1), "a", "x"))
	gen2 := &pipeline.Table{ID: people.ID, KeyIdx: []int{0}, Generation: 2,
		Columns: append(append([]pipeline.Column{}, people.Columns...),
			pipeline.Column{Name: "score", Type: pipeline.TypeDecimal, Precision: 6, Scale: 1, Missing: dec("12.5")},
			pipeline.Column{Name: "big", Type: pipeline.TypeDecimal, Precision: 30, Scale: 2, Missing: dec("-7")},
			pipeline.Column{Name: "marks", Type: pipeline.TypeArray, Elem: pipeline.TypeDecimal, Precision: 5, Scale: 2,
				Missing: []any{dec("1.5"), nil}})}
	// Key 2 is written with the old shape in the same batch as the new
	// shape: it predates the columns and gets their missing values too.
	mustWrite(t, s, change(pipeline.OpInsert, 2, int64(2), "b", nil),
		pipeline.Record{Op: pipeline.OpInsert, Table: gen2, Version: ver(3),
			After: []any{int64(3), "c", nil, dec("-0.5"), dec("1.25"), []any{dec("2")}}})
	expectRows(t, s, gen2,
		[]any{int64(1), "a", "x", dec("12.5"), dec("-7.00"), []any{dec("1.50"), nil}},
		[]any{int64(2), "b", nil, dec("12.5"), dec("-7.00"), []any{dec("1.50"), nil}},
		[]any{int64(3), "c", nil, dec("-0.5"), dec("1.25"), []any{dec("2.00")}})
}

func TestDecimalScaledInt(t *testing.T) {
	c := &pipeline.Column{Name: "x", Type: pipeline.TypeDecimal, Precision: 12, Scale: 2}
	for in, want := range map[string]int64{"0": 0, "1.5": 150, "-1.5": -150, "9999999999.99": 999999999999,
		"-9999999999.99": -999999999999, "1.2300000000000000000000": 123, "12e3": 1200000} {
		got, err := decimalInt(c, dec(in))
		if err != nil || got != want {
			t.Errorf("%s: got %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"10000000000", "-10000000000.00", "1.234", "NaN", "-Infinity",
		"-9223372036854775808", "92233720368547758070", "1e30"} {
		if got, err := decimalInt(c, dec(in)); err == nil {
			t.Errorf("%s: got %d, want an error", in, got)
		}
	}
	wide := &pipeline.Column{Name: "w", Type: pipeline.TypeDecimal, Precision: 18, Scale: 0}
	if got, err := decimalInt(wide, dec("999999999999999999")); err != nil || got != 999999999999999999 {
		t.Errorf("18 digits: %d, %v", got, err)
	}
	if _, err := decimalInt(wide, dec("1000000000000000000")); err == nil {
		t.Error("19 digits fit DECIMAL(18,0)")
	}
}

// TestKeyOnlyTableDelete covers the lean staging form with deletes: a
// table without non-key columns keeps no column on delete.
func TestKeyOnlyTableDelete(t *testing.T) {
	s := openSink(t, Options{})
	tags := &pipeline.Table{ID: pipeline.TableID{Schema: "s", Table: "tags"}, KeyIdx: []int{0, 1},
		Columns: []pipeline.Column{{Name: "name", Type: pipeline.TypeString, Key: true},
			{Name: "n", Type: pipeline.TypeInt32, Key: true}}}
	rec := func(op pipeline.Op, v uint64, name string, n int64) pipeline.Record {
		r := pipeline.Record{Op: op, Table: tags, Version: ver(v)}
		if op == pipeline.OpDelete {
			r.Before = []any{name, n}
		} else {
			r.After = []any{name, n}
		}
		return r
	}
	mustWrite(t, s, rec(pipeline.OpInsert, 1, "a", 1), rec(pipeline.OpInsert, 1, "a", 2), rec(pipeline.OpInsert, 1, "b", 1))
	// In one batch: a newer delete, an older insert of the same key after
	// it, and a delete older than the stored row.
	mustWrite(t, s, rec(pipeline.OpDelete, 3, "a", 1), rec(pipeline.OpInsert, 2, "a", 1), rec(pipeline.OpDelete, 0, "b", 1))
	expectRows(t, s, tags, []any{"a", int64(2)}, []any{"b", int64(1)})
}

// Insert-only Writes go straight into the target; a key that exists or
// repeats makes DuckDB refuse them, and the MERGE path then applies the
// Write with its version guard, as if the fast path did not exist.
func TestBulkLoadPathFallsBackToMerge(t *testing.T) {
	s := openSink(t, Options{})
	mustWrite(t, s, change(pipeline.OpInsert, 1, int64(1), "create", nil)) // creates the table (MERGE path)
	mustWrite(t, s, change(pipeline.OpInsert, 2, int64(2), "b", nil), change(pipeline.OpRead, 2, int64(3), "c", nil))
	st := s.direct["public_people"]
	if st == nil || st.Skip != 0 || st.Penalty != 1 || st.Off {
		t.Fatalf("fast path state after a clean insert: %+v", st)
	}
	// A key repeated in one Write: the newest change wins.
	mustWrite(t, s, change(pipeline.OpInsert, 3, int64(4), "old", nil), change(pipeline.OpInsert, 4, int64(4), "new", nil))
	if st.Skip != 1 || st.Penalty != 2 {
		t.Fatalf("a refused attempt should skip the next Write: %+v", st)
	}
	// Replays of stored keys with older versions change nothing.
	mustWrite(t, s, change(pipeline.OpInsert, 1, int64(2), "stale", nil))
	mustWrite(t, s, change(pipeline.OpInsert, 1, int64(3), "stale", nil), change(pipeline.OpInsert, 5, int64(5), "e", nil))
	// A stored key is refused at the appender's close, in other words
	// than a key repeated in the Write: still a refusal that passes, not
	// a reason to give the path up for good (a snapshot resumed after a
	// crash writes rows the sink already holds, and the rest of its
	// table would crawl through MERGE).
	if st.Off || st.Penalty < 2 {
		t.Fatalf("a stored key should skip the path for a while, not turn it off: %+v", st)
	}
	expectRows(t, s, people, []any{int64(1), "create", nil}, []any{int64(2), "b", nil}, []any{int64(3), "c", nil},
		[]any{int64(4), "new", nil}, []any{int64(5), "e", nil})
	// Below a truncate barrier, inserts of new keys are dropped, never appended.
	mustWrite(t, s, pipeline.Record{Op: pipeline.OpTruncate, Table: people, Version: ver(10)})
	mustWrite(t, s, change(pipeline.OpInsert, 9, int64(6), "below", nil))
	mustWrite(t, s, change(pipeline.OpInsert, 11, int64(7), "above", nil))
	expectRows(t, s, people, []any{int64(7), "above", nil})
}

// An insert-only Write some of whose keys the target holds (the rows an
// incremental snapshot's chunk shares with the stream changes before its
// window) is split after one probe of its keys: the new keys are appended,
// only the held ones take the version-guarded MERGE — a newer snapshot row
// replaces its row, an older one changes nothing, and neither resurrects a
// tombstone above it.
func TestBulkLoadProbeAppendsNewKeysAndMergesHeldOnes(t *testing.T) {
	s := openSink(t, Options{})
	mustWrite(t, s, change(pipeline.OpInsert, 5, int64(1), "stream", nil), change(pipeline.OpInsert, 5, int64(2), "stream", nil),
		change(pipeline.OpInsert, 5, int64(3), "stream", nil))
	mustWrite(t, s, del(6, 3))
	var chunk []pipeline.Record
	for id := int64(1); id <= 1000; id++ {
		v := uint64(7)
		if id == 2 {
			v = 4 // below the stream's row
		}
		chunk = append(chunk, change(pipeline.OpRead, v, id, "read "+strconv.FormatInt(id, 10), nil))
	}
	chunk[2].Version = ver(5) // id 3: below its tombstone
	mustWrite(t, s, chunk...)
	if got := s.probedIn; got != 997 {
		t.Fatalf("%d records appended after the probe, want 997 (1,000 less the 3 held keys)", got)
	}
	if st := s.direct["public_people"]; st == nil || st.Off || st.Penalty < 2 {
		t.Fatalf("fast path after a refusal: %+v", st)
	}
	want := [][]any{{int64(1), "read 1", nil}, {int64(2), "stream", nil}}
	for id := int64(4); id <= 1000; id++ {
		want = append(want, []any{id, "read " + strconv.FormatInt(id, 10), nil})
	}
	expectRows(t, s, people, want...)
	// The next chunk is probed at once, without a refused attempt first.
	before := s.probedIn
	mustWrite(t, s, change(pipeline.OpRead, 8, int64(1001), "read 1001", nil), change(pipeline.OpRead, 8, int64(1), "again", nil))
	if got := s.probedIn - before; got != 1 {
		t.Fatalf("%d records appended after the second probe, want 1", got)
	}
	if st := s.direct["public_people"]; st.Skip != 0 || st.Penalty != 2 {
		t.Fatalf("the second chunk should have skipped the attempt (not met a refusal): %+v", st)
	}
}

// A small merge names its keys in an IN list (the target's rows of them
// are read through the index): text keys with quotes, and integer keys,
// update and delete exactly their rows; a composite key or a large batch
// keeps the join.
func TestSmallMergeNamesItsKeys(t *testing.T) {
	s := openSink(t, Options{})
	tags := &pipeline.Table{ID: pipeline.TableID{Schema: "s", Table: "names"}, KeyIdx: []int{0},
		Columns: []pipeline.Column{{Name: "name", Type: pipeline.TypeString, Key: true}, {Name: "n", Type: pipeline.TypeInt32}}}
	rec := func(op pipeline.Op, v uint64, name string, n int64) pipeline.Record {
		r := pipeline.Record{Op: op, Table: tags, Version: ver(v), After: []any{name, n}}
		if op == pipeline.OpDelete {
			r.Before, r.After = []any{name, nil}, nil
		}
		return r
	}
	mustWrite(t, s, rec(pipeline.OpInsert, 1, "o'neil", 1), rec(pipeline.OpInsert, 1, "a', 'b", 2), rec(pipeline.OpInsert, 1, "plain", 3))
	mustWrite(t, s, rec(pipeline.OpUpdate, 2, "o'neil", 10), rec(pipeline.OpDelete, 2, "a', 'b", 0), rec(pipeline.OpUpdate, 0, "plain", 99))
	expectRows(t, s, tags, []any{"o'neil", int64(10)}, []any{"plain", int64(3)})

	tb := &upsert.TableBatch{Cols: tags.Columns, Keys: []int{0}}
	rows := []upsert.Row{{Vals: []any{"o'neil", int32(1)}}, {Vals: []any{"x", int32(2)}}}
	if got, want := keyList(tb, rows), `"name" IN ('o''neil', 'x')`; got != want {
		t.Errorf("keyList = %s, want %s", got, want)
	}
	if got := keyList(&upsert.TableBatch{Cols: tags.Columns, Keys: []int{0, 1}}, rows); got != "" {
		t.Errorf("composite key: %s", got)
	}
	for _, odd := range []string{"nul\x00", "\xff\xfe"} {
		if got := keyList(tb, []upsert.Row{{Vals: []any{odd, int64(1)}}}); got != "" {
			t.Errorf("key %q: %s", odd, got)
		}
	}
	if got := keyList(tb, make([]upsert.Row, inListMax+1)); got != "" {
		t.Errorf("%d rows: %s", inListMax+1, got)
	}
}

func TestRefusedShapeChangeIsATableError(t *testing.T) {
	s := openSink(t, Options{})
	sinktest.RefusedShapeChange(t, func(r []pipeline.Record) error { return s.Write(ctx, r) }, people, ver)
}

// DuckDB running out of its memory_limit is not the batch's fault: the
// sink reports it as pipeline.Overloaded, so the runtime writes smaller
// pieces and retries one record with backoff, never quarantining the
// table or dead-lettering the rows.
func TestOutOfMemoryIsOverloaded(t *testing.T) {
	db, err := sql.Open("duckdb", "")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec("SET memory_limit = '2MB'"); err != nil {
		t.Fatal(err)
	}
	_, err = db.Exec("CREATE TABLE big AS SELECT range AS id, repeat('x', 1000) AS v FROM range(200000) ORDER BY random()")
	if err == nil || !outOfMemory(err) {
		t.Fatalf("a query over DuckDB's memory limit: %v; want an out-of-memory error", err)
	}
	// The appender's flattened forms, seen with memory_limit 100MiB.
	for _, msg := range []string{
		"could not close appender: Failed to append: failed to allocate data of size 4.0 MiB (99.6 MiB/100.0 MiB used)",
		"could not close appender: Failed to append: failed to pin block of size 256.0 KiB (99.8 MiB/100.0 MiB used)",
	} {
		if !outOfMemory(errors.New(msg)) {
			t.Errorf("%q is out of memory", msg)
		}
	}
	if outOfMemory(errors.New("Constraint Error: duplicate key")) {
		t.Fatal("a constraint error is not out of memory")
	}
	s := openSink(t, Options{MemoryLimit: 2 << 20})
	var recs []pipeline.Record
	for i := range 20000 {
		recs = append(recs, change(pipeline.OpInsert, uint64(i+1), int64(i), strings.Repeat("n", 2000), nil))
	}
	err = s.Write(ctx, recs)
	var te *pipeline.TableError
	if err == nil || !pipeline.IsOverloaded(err) || errors.As(err, &te) {
		t.Fatalf("a batch over DuckDB's memory limit: %v; want pipeline.Overloaded", err)
	}
}

// TableTemplate names the target: "{table}" in a schema of the source's
// name mirrors public.people as public.people; both the bulk path (a
// batch of inserts) and the MERGE path (an update) write it, and the
// sink finds it again after a restart.
func TestTableTemplate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.duckdb")
	opts := Options{Path: path, Schema: "public", TableTemplate: "{table}"}
	s := openSink(t, opts)
	mustWrite(t, s, change(pipeline.OpInsert, 1, int64(1), "a", nil), change(pipeline.OpInsert, 2, int64(2), "b", nil))
	mustWrite(t, s, change(pipeline.OpUpdate, 3, int64(1), "a2", "x"))
	var n int
	if err := s.conn.QueryRowContext(ctx, `SELECT count(*) FROM public.people`).Scan(&n); err != nil || n != 2 {
		t.Fatalf("public.people holds %d rows (%v); want 2", n, err)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	s = openSink(t, opts)
	mustWrite(t, s, change(pipeline.OpUpdate, 4, int64(2), "b2", nil))
	expectRows(t, s, people, []any{int64(1), "a2", "x"}, []any{int64(2), "b2", nil})
}
