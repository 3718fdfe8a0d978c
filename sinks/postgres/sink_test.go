package postgres

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/sinks/sinktest"
)

func TestCreateUpsertStaleDelete(t *testing.T) {
	s := openSink(t, Options{})
	mustWrite(t, s, change(pipeline.OpInsert, 2, int64(1), "ann", "x"), change(pipeline.OpInsert, 2, int64(2), "bob", "y"),
		pipeline.Record{Op: pipeline.OpHeartbeat, Version: ver(3)})
	types := columnTypes(t, s, "public_people")
	for col, want := range map[string]string{"id": "bigint", "name": "text", "bio": "text",
		"_sluice_version": "bytea", "_sluice_deleted": "boolean", "_sluice_updated_at": "timestamp with time zone"} {
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

// TableTemplate names the target: "{table}" mirrors a source table into a
// schema of its own under its own name, "src_{table}" is the older
// table_prefix "src_".
func TestTableTemplate(t *testing.T) {
	for _, c := range []struct{ template, table string }{{"{table}", "people"}, {"src_{table}", "src_people"}} {
		s := openSink(t, Options{Schema: freshSchema(), TableTemplate: c.template})
		mustWrite(t, s, change(pipeline.OpInsert, 1, int64(1), "a", nil))
		if len(columnTypes(t, s, c.table)) == 0 {
			t.Fatalf("template %s: target table %s not created", c.template, c.table)
		}
		expectRows(t, s, people, []any{int64(1), "a", nil})
	}
}

func TestTruncateBarrierSurvivesRestart(t *testing.T) {
	schema := freshSchema()
	s := openSink(t, Options{Schema: schema})
	mustWrite(t, s, change(pipeline.OpInsert, 1, int64(1), "a", nil), change(pipeline.OpInsert, 3, int64(2), "b", nil))
	mustWrite(t, s, pipeline.Record{Op: pipeline.OpTruncate, Table: people, Version: ver(5)},
		change(pipeline.OpInsert, 6, int64(3), "c", nil))
	expectRows(t, s, people, []any{int64(3), "c", nil})
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	s = openSink(t, Options{Schema: schema})
	// Records below the barrier are ignored, even for keys never seen.
	mustWrite(t, s, change(pipeline.OpUpdate, 4, int64(2), "late", nil), change(pipeline.OpRead, 0, int64(9), "snap", nil))
	expectRows(t, s, people, []any{int64(3), "c", nil})
	if v, deleted, ok := stored(t, s, 2); !ok || !deleted || v != ver(5) {
		t.Fatalf("truncated row: version %v deleted %v present %v", v, deleted, ok)
	}
	var b []byte
	if err := s.conn.QueryRow(ctx, `SELECT version FROM `+s.qualified(barrierTable)+` WHERE target = 'public_people'`).Scan(&b); err != nil {
		t.Fatal(err)
	}
	if v, err := pipeline.ParseVersion(string(b)); err != nil || v != ver(5) {
		t.Fatalf("barrier %v, %v", v, err)
	}
}

func TestUnchangedKeepsStoredValue(t *testing.T) {
	s := openSink(t, Options{})
	mustWrite(t, s, change(pipeline.OpInsert, 1, int64(1), "a", "long text"))
	mustWrite(t, s, change(pipeline.OpUpdate, 2, int64(1), "a2", pipeline.UnchangedValue))
	// A new key whose only change leaves the column Unchanged gets NULL.
	mustWrite(t, s, change(pipeline.OpUpdate, 3, int64(2), "b", pipeline.UnchangedValue))
	// A stale Unchanged update changes nothing.
	mustWrite(t, s, change(pipeline.OpUpdate, 1, int64(1), "stale", pipeline.UnchangedValue))
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
	if typ := columnTypes(t, s, "public_people")["score"]; typ != "numeric(6,1)" {
		t.Fatalf("added column type %q", typ)
	}
}

func TestAddColumnMissingValue(t *testing.T) {
	schema := freshSchema()
	s := openSink(t, Options{Schema: schema})
	mustWrite(t, s, change(pipeline.OpInsert, 1, int64(1), "a", "x"), change(pipeline.OpInsert, 1, int64(4), "gone", nil))
	mustWrite(t, s, del(2, 4))
	gen2 := &pipeline.Table{ID: people.ID, KeyIdx: []int{0}, Generation: 2,
		Columns: append(append([]pipeline.Column{}, people.Columns...),
			pipeline.Column{Name: "score", Type: pipeline.TypeDecimal, Precision: 6, Scale: 1, Missing: dec("12.5")},
			pipeline.Column{Name: "big", Type: pipeline.TypeDecimal, Precision: 30, Scale: 2, Missing: dec("-7")},
			pipeline.Column{Name: "marks", Type: pipeline.TypeArray, Elem: pipeline.TypeDecimal, Precision: 5, Scale: 2,
				Missing: []any{dec("1.5"), nil}},
			pipeline.Column{Name: "since", Type: pipeline.TypeTimestampTZ, Missing: pipeline.Timestamp{Micros: 1}},
			pipeline.Column{Name: "n", Type: pipeline.TypeInt32, Missing: int64(42)},
			pipeline.Column{Name: "plain", Type: pipeline.TypeString})}
	// Key 2 is written with the old shape in the same batch as the new
	// shape: it predates the columns and gets their missing values too.
	mustWrite(t, s, change(pipeline.OpInsert, 2, int64(2), "b", nil),
		pipeline.Record{Op: pipeline.OpInsert, Table: gen2, Version: ver(3),
			After: []any{int64(3), "c", nil, dec("-0.5"), dec("1.25"), []any{dec("2")}, pipeline.Timestamp{Micros: 2}, int64(7), "p"}})
	missing := []any{dec("12.5"), dec("-7.00"), []any{dec("1.50"), nil}, pipeline.Timestamp{Micros: 1}, int64(42), nil}
	expectRows(t, s, gen2,
		append([]any{int64(1), "a", "x"}, missing...),
		append([]any{int64(2), "b", nil}, missing...),
		[]any{int64(3), "c", nil, dec("-0.5"), dec("1.25"), []any{dec("2.00")}, pipeline.Timestamp{Micros: 2}, int64(7), "p"})
	// The tombstone got the missing values as well, and a restart sees the
	// added columns.
	var score string
	if err := s.conn.QueryRow(ctx, `SELECT score::text FROM `+s.qualified("public_people")+` WHERE id = 4`).Scan(&score); err != nil || score != "12.5" {
		t.Fatalf("tombstone score %q, %v", score, err)
	}
	s.Close(ctx)
	s = openSink(t, Options{Schema: schema})
	mustWrite(t, s, pipeline.Record{Op: pipeline.OpUpdate, Table: gen2, Version: ver(4),
		After: []any{int64(1), "a'", pipeline.UnchangedValue, dec("1"), dec("2"), nil, nil, nil, nil}})
	got := rows(t, s, gen2)[sinktest.RowKey(gen2, []any{int64(1)})]
	if !sinktest.Equal(got[2], "x") || !sinktest.Equal(got[3], dec("1")) {
		t.Fatalf("row after restart: %v", got)
	}
}

func TestPermanentFailuresApplyTheRest(t *testing.T) {
	s := openSink(t, Options{})
	money := &pipeline.Table{ID: pipeline.TableID{Schema: "s", Table: "money"}, KeyIdx: []int{0},
		Columns: []pipeline.Column{{Name: "id", Type: pipeline.TypeInt64, Key: true},
			{Name: "amount", Type: pipeline.TypeDecimal, Precision: 10, Scale: 2},
			{Name: "at", Type: pipeline.TypeTimestamp},
			{Name: "note", Type: pipeline.TypeString},
			{Name: "doc", Type: pipeline.TypeJSON},
			{Name: "grid", Type: pipeline.TypeArray, Elem: pipeline.TypeInt32}}}
	rec := func(id int64, amount pipeline.Decimal, at pipeline.Timestamp, extra ...any) pipeline.Record {
		row := []any{id, amount, at, nil, nil, nil}
		copy(row[3:], extra)
		return pipeline.Record{Op: pipeline.OpInsert, Table: money, After: row, Version: ver(uint64(id))}
	}
	err := s.Write(ctx, []pipeline.Record{
		rec(1, dec("1.5"), pipeline.Timestamp{}),
		rec(2, pipeline.Decimal{Special: pipeline.PosInfinity}, pipeline.Timestamp{}),
		rec(3, dec("2"), pipeline.Timestamp{Micros: math.MinInt64}),
		rec(4, dec("123456789.12"), pipeline.Timestamp{}), // 11 digits > 10
		rec(5, dec("3"), pipeline.Timestamp{Special: pipeline.PosInfinity}),
		{Op: pipeline.OpInsert, Version: ver(6)}, // no table
		rec(7, dec("4"), pipeline.Timestamp{}, "nul\x00byte"),
		rec(8, dec("5"), pipeline.Timestamp{}, "bad utf8 \xff"),
		rec(9, dec("6"), pipeline.Timestamp{}, nil, pipeline.JSON(`{"a":`)),
		rec(10, dec("7"), pipeline.Timestamp{}, nil, pipeline.JSON(`{"a":"\u0000"}`)),
		rec(11, dec("8"), pipeline.Timestamp{}, nil, nil, []any{[]any{int64(1)}, []any{int64(1), int64(2)}}),
		rec(12, pipeline.Decimal{Special: pipeline.NaN}, pipeline.Timestamp{}, nil, nil, []any{[]any{int64(1)}, []any{int64(2)}}),
		rec(13, dec("9999999.999"), pipeline.Timestamp{}),  // rounds to 10000000.00: 10 digits
		rec(14, dec("99999999.999"), pipeline.Timestamp{}), // rounds to 100000000.00: 11 digits
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
	want := []int{1, 2, 3, 5, 6, 7, 8, 9, 10, 13}
	for _, i := range want {
		if !failed[i] {
			t.Errorf("record %d not rejected", i)
		}
	}
	if len(failed) != len(want) {
		t.Fatalf("failed %v: %v", failed, err)
	}
	expectRows(t, s, money, []any{int64(1), dec("1.50"), pipeline.Timestamp{}, nil, nil, nil},
		[]any{int64(5), dec("3"), pipeline.Timestamp{Special: pipeline.PosInfinity}, nil, nil, nil},
		[]any{int64(12), pipeline.Decimal{Special: pipeline.NaN}, pipeline.Timestamp{}, nil, nil, []any{[]any{int64(1)}, []any{int64(2)}}},
		[]any{int64(13), dec("10000000.00"), pipeline.Timestamp{}, nil, nil, nil})
}

func TestHardDeletePurgesExpiredTombstones(t *testing.T) {
	s := openSink(t, Options{HardDelete: true, TombstoneTTL: time.Hour})
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	s.now = func() time.Time { return now }
	mustWrite(t, s, change(pipeline.OpInsert, 1, int64(1), "a", nil), change(pipeline.OpInsert, 1, int64(2), "b", nil),
		change(pipeline.OpInsert, 1, int64(3), "c", nil))
	mustWrite(t, s, del(2, 1))
	if _, deleted, ok := stored(t, s, 1); !ok || !deleted {
		t.Fatal("tombstone must be kept until it expires")
	}
	now = now.Add(2 * time.Hour)
	mustWrite(t, s, change(pipeline.OpUpdate, 3, int64(2), "b2", nil))
	if _, _, ok := stored(t, s, 1); ok {
		t.Fatal("expired tombstone not purged")
	}
	expectRows(t, s, people, []any{int64(2), "b2", nil}, []any{int64(3), "c", nil})
	// Truncated rows are tombstones too and go the same way.
	mustWrite(t, s, pipeline.Record{Op: pipeline.OpTruncate, Table: people, Version: ver(4)},
		change(pipeline.OpInsert, 5, int64(4), "d", nil))
	now = now.Add(2 * time.Hour)
	mustWrite(t, s, change(pipeline.OpUpdate, 6, int64(4), "d2", nil))
	if _, _, ok := stored(t, s, 3); ok {
		t.Fatal("expired truncate tombstone not purged")
	}
	expectRows(t, s, people, []any{int64(4), "d2", nil})
}

// In HardDelete mode a tombstone outlives its table's snapshot: none is
// purged while a snapshot record of the table was written within the TTL,
// across a restart (the snapshot time is stored); an hour after the last
// one, expired tombstones go and live rows stay.
func TestTombstonePurgeWaitsForSnapshot(t *testing.T) {
	opts := Options{HardDelete: true, TombstoneTTL: time.Hour}
	opts.Schema = freshSchema()
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
	// The sink still works afterwards.
	mustWrite(t, s, change(pipeline.OpInsert, 1, int64(1), "a", nil))
	expectRows(t, s, people, []any{int64(1), "a", nil})
}

func TestReconnectsAfterLostConnection(t *testing.T) {
	s := openSink(t, Options{})
	mustWrite(t, s, change(pipeline.OpInsert, 1, int64(1), "a", nil))
	var pid int
	if err := s.conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	if err := server(t).Exec(ctx, "postgres", "SELECT pg_terminate_backend("+itoa(pid)+")"); err != nil {
		t.Fatal(err)
	}
	// The first write may fail (retryable); a retry succeeds.
	recs := []pipeline.Record{change(pipeline.OpUpdate, 2, int64(1), "b", nil)}
	if err := s.Write(ctx, recs); err != nil {
		if pipeline.IsFatal(err) {
			t.Fatal(err)
		}
		mustWrite(t, s, recs...)
	}
	expectRows(t, s, people, []any{int64(1), "b", nil})
}

func itoa(n int) string { return big.NewInt(int64(n)).String() }

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
	mustWrite(t, s, rec(pipeline.OpDelete, 3, "a", 1), rec(pipeline.OpInsert, 2, "a", 1), rec(pipeline.OpDelete, 0, "b", 1))
	expectRows(t, s, tags, []any{"a", int64(2)}, []any{"b", int64(1)})
}

// A value the target itself refuses — here a pre-created table with a
// narrower column and a CHECK constraint — fails only its own record,
// permanently, with Postgres's error text; the rest of the batch is applied.
func TestTargetRefusalFailsOnlyItsRecord(t *testing.T) {
	s := openSink(t, Options{})
	if _, err := s.conn.Exec(ctx, `CREATE TABLE `+s.qualified("public_people")+` (id bigint PRIMARY KEY,
		name varchar(10) CHECK (name <> 'forbidden'), bio text, _sluice_version bytea NOT NULL,
		_sluice_deleted boolean NOT NULL DEFAULT false, _sluice_updated_at timestamptz)`); err != nil {
		t.Fatal(err)
	}
	if err := s.load(ctx); err != nil {
		t.Fatal(err)
	}
	var batch []pipeline.Record
	for i := int64(1); i <= 40; i++ {
		name := "n" + string(rune('a'+i%26))
		switch i {
		case 7:
			name = "much too long for ten"
		case 23:
			name = "forbidden"
		}
		batch = append(batch, change(pipeline.OpInsert, uint64(i), i, name, nil))
	}
	err := s.Write(ctx, batch)
	var be *pipeline.BatchError
	if !errors.As(err, &be) || len(be.Failed) != 2 || be.Failed[0].Index != 6 || be.Failed[1].Index != 22 {
		t.Fatalf("want records 6 and 22 refused, got %v", err)
	}
	for _, f := range be.Failed {
		if !f.Permanent {
			t.Errorf("refusal of record %d is not permanent", f.Index)
		}
	}
	if !strings.Contains(be.Failed[0].Err.Error(), "too long") || !strings.Contains(be.Failed[1].Err.Error(), "check constraint") {
		t.Errorf("errors do not carry Postgres's text: %v / %v", be.Failed[0].Err, be.Failed[1].Err)
	}
	got := rows(t, s, people)
	if len(got) != 38 {
		t.Fatalf("%d rows applied, want 38", len(got))
	}
	// The pipeline keeps going: the next batch is applied normally.
	mustWrite(t, s, change(pipeline.OpUpdate, 50, int64(7), "fixed", nil))
	if len(rows(t, s, people)) != 39 {
		t.Fatal("the batch after the refusal was not applied")
	}
}

// Insert-only batches go straight into the target by COPY; a batch whose
// keys exist (a replay, a key re-inserted after its delete) falls back to
// the version-guarded upsert with the same result.
func TestBulkLoadPathAndFallback(t *testing.T) {
	s := openSink(t, Options{})
	var first []pipeline.Record
	for i := int64(1); i <= 100; i++ {
		first = append(first, change(pipeline.OpInsert, 10, i, "v10", nil))
	}
	mustWrite(t, s, first...)
	if st := s.direct["public_people"]; st == nil || st.Off || st.Skip != 0 || st.Penalty != 1 {
		t.Fatalf("bulk-load path not taken: %+v", st)
	}
	// The same keys again, older: the COPY is refused and nothing changes.
	var replay []pipeline.Record
	for i := int64(1); i <= 100; i++ {
		replay = append(replay, change(pipeline.OpRead, 5, i, "old", nil))
	}
	mustWrite(t, s, replay...)
	if st := s.direct["public_people"]; st.Penalty != 2 {
		t.Fatalf("refused bulk load not recorded: %+v", st)
	}
	// New keys stream straight in again, and the refusal is forgotten.
	var more []pipeline.Record
	for i := int64(300); i < 350; i++ {
		more = append(more, change(pipeline.OpInsert, 20, i, "more", nil))
	}
	mustWrite(t, s, more...)
	if st := s.direct["public_people"]; st.Penalty != 1 || st.Skip != 0 {
		t.Fatalf("bulk load after a refusal: %+v", st)
	}
	// Deleted then inserted again, newer: the staged path revives it.
	mustWrite(t, s, del(11, 7))
	mustWrite(t, s, change(pipeline.OpInsert, 12, int64(7), "again", nil), change(pipeline.OpInsert, 12, int64(200), "new", nil))
	mustWrite(t, s, change(pipeline.OpInsert, 13, int64(201), "new", nil))
	got := rows(t, s, people)
	if len(got) != 152 {
		t.Fatalf("%d rows, want 152", len(got))
	}
	want := map[int64]string{1: "v10", 7: "again", 100: "v10", 200: "new", 201: "new", 349: "more"}
	for k, name := range want {
		r, ok := got[sinktest.RowKey(people, []any{k, nil, nil})]
		if !ok || r[1] != name {
			t.Errorf("key %d: %v, want name %q", k, r, name)
		}
	}
}

func TestRefusedShapeChangeIsATableError(t *testing.T) {
	s := openSink(t, Options{})
	sinktest.RefusedShapeChange(t, func(r []pipeline.Record) error { return s.Write(ctx, r) }, people, ver)
}

// A role that may not create the sink's schema gets a fatal error that
// names the GRANT to run, not endless retries; a role that may use an
// existing schema needs no privilege on the database.
func TestMissingPrivilegeSaysWhatToRun(t *testing.T) {
	srv := server(t)
	if err := srv.Exec(ctx, "postgres", `DO $$BEGIN CREATE ROLE nopriv LOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END$$`,
		`CREATE SCHEMA IF NOT EXISTS granted`, `GRANT USAGE, CREATE ON SCHEMA granted TO nopriv`); err != nil {
		t.Fatal(err)
	}
	dsn := srv.UserDSN("nopriv", "x", "postgres")
	s := New(Options{DSN: dsn, Schema: freshSchema()}, nil)
	err := s.Open(ctx)
	if err == nil || !pipeline.IsFatal(err) || !strings.Contains(err.Error(), `GRANT CREATE ON DATABASE "postgres" TO "nopriv";`) {
		t.Fatalf("open without privileges: %v", err)
	}
	s = openSink(t, Options{DSN: dsn, Schema: "granted"})
	mustWrite(t, s, change(pipeline.OpInsert, 1, int64(1), "a", nil))
}

// Rows come back in key order, compared as the key's type: 2 before 10
// (the select list casts every column to text, and an ORDER BY that named
// the output column sorted "10" before "2").
func TestRowsComeInKeyOrder(t *testing.T) {
	s := openSink(t, Options{})
	var recs []pipeline.Record
	for _, id := range []int64{10, 2, 12, 1, 11, 3} {
		recs = append(recs, change(pipeline.OpInsert, 1, id, fmt.Sprint("p", id), nil))
	}
	mustWrite(t, s, recs...)
	got, err := s.Rows(ctx, people)
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for _, r := range got {
		ids = append(ids, r[0].(int64))
	}
	if want := []int64{1, 2, 3, 10, 11, 12}; fmt.Sprint(ids) != fmt.Sprint(want) {
		t.Fatalf("rows in order %v, want %v", ids, want)
	}
}
