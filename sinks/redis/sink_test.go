package redis

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-cdc/sluice/integration/harness"
	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/sinks/sinktest"
)

var formats = []string{"hash", "json"}

func openSink(t testing.TB, addr string, o Options) *Sink {
	t.Helper()
	o.Addr = addr
	s := New(o, nil)
	if err := s.Open(ctx); err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { s.Close(ctx) })
	return s
}

func client(t testing.TB, addr string) *goredis.Client {
	c := goredis.NewClient(&goredis.Options{Addr: addr})
	t.Cleanup(func() { c.Close() })
	return c
}

func mustWrite(t testing.TB, s *Sink, recs ...pipeline.Record) {
	t.Helper()
	if err := s.Write(ctx, recs); err != nil {
		t.Fatalf("write: %v", err)
	}
}

// allTypes has one column of every pipeline.Type (arrays of strings and of
// integers), keyed by a string with the characters {pk} escapes.
var allTypes = func() *pipeline.Table {
	t := &pipeline.Table{ID: pipeline.TableID{Database: "d", Schema: "s", Table: "types"}, KeyIdx: []int{0, 1}, Generation: 1}
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
		pipeline.Column{Name: "c_ts_array", Type: pipeline.TypeArray, Elem: pipeline.TypeTimestampTZ, Nullable: true})
	return t
}()

func typeValues(variant int) [][]any {
	dec, _ := pipeline.ParseDecimal("-12345678901234567890.000123400")
	u := pipeline.UUID{0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
	rows := [][]any{
		{"a:b\\c", int64(1), "text ∂", true, int64(-32768), int64(math.MinInt32), int64(math.MinInt64), uint64(255), uint64(65535),
			uint64(math.MaxUint32), uint64(math.MaxUint64), float64(float32(1.1)), 0.1 + 0.2, dec, "str\n\"q\"",
			[]byte{0, 1, 0xff}, u, pipeline.JSON(`{"a": [1, 2.50, 12345678901234567890], "b": "x/y"}`),
			pipeline.Date{Days: -719162}, pipeline.TimeOfDay(86400e6), pipeline.TimeTZ{Micros: 3723000004, OffsetSec: -(5*3600 + 30*60 + 15)},
			pipeline.Timestamp{Micros: 1_700_000_000_123_456}, pipeline.Timestamp{Micros: -62135596800_000_000 + 1},
			pipeline.Interval{Months: -14, Days: 3, Micros: -1_500_000}, "10.0.0.0/8", "08:00:2b:01:02:03", "happy", "a,b",
			[]byte{0xa5}, []byte{1, 1, 0, 0}, []any{"x", nil, []any{"y:z"}}, []any{int64(math.MaxInt64), nil, int64(-1)},
			[]any{pipeline.Timestamp{Micros: 42}, pipeline.Timestamp{Special: pipeline.PosInfinity}}},
		{"", int64(-2), "", false, int64(0), int64(0), int64(0), uint64(0), uint64(0), uint64(0), uint64(0), math.Inf(-1), math.NaN(),
			pipeline.Decimal{Special: pipeline.NaN}, "", []byte{}, pipeline.UUID{}, pipeline.JSON(`null`),
			pipeline.Date{Special: pipeline.PosInfinity}, pipeline.TimeOfDay(0), pipeline.TimeTZ{Micros: 1, OffsetSec: 14 * 3600},
			pipeline.Timestamp{Special: pipeline.NegInfinity}, pipeline.Timestamp{Special: pipeline.PosInfinity},
			pipeline.Interval{}, "::1", "", "", "", []byte{}, nil, []any{}, []any{}, nil},
	}
	nulls := make([]any, len(allTypes.Columns))
	nulls[0], nulls[1] = "nulls", int64(3)
	rows = append(rows, nulls)
	if variant == 1 { // a finite decimal and infinity special for floats
		rows[1][13] = pipeline.Decimal{Unscaled: big.NewInt(5), Scale: 0}
		rows[1][11] = math.Inf(1)
	}
	return rows
}

func TestTypesRoundTrip(t *testing.T) {
	if len(allTypes.Columns) != 2+int(pipeline.TypeArray)+1+2 {
		t.Fatalf("table has %d columns", len(allTypes.Columns))
	}
	addr := harness.RedisT(t).Addr()
	for db, f := range formats {
		t.Run(f, func(t *testing.T) {
			s := openSink(t, addr, Options{Format: f, DB: db})
			for variant := 0; variant < 2; variant++ {
				want := map[string][]any{}
				var recs []pipeline.Record
				for _, row := range typeValues(variant) {
					recs = append(recs, pipeline.Record{Op: pipeline.OpInsert, Table: allTypes, After: row,
						Version: pipeline.Version{0, uint64(variant + 1), 0, 1}})
					want[sinktest.RowKey(allTypes, row)] = row
				}
				mustWrite(t, s, recs...)
				if diff := sinktest.Diff(allTypes, want, readMap(t, s, allTypes)); diff != "" {
					t.Fatalf("variant %d:\n%s", variant, diff)
				}
			}
			// The key escapes ':' and '\' in key values.
			c := goredis.NewClient(&goredis.Options{Addr: addr, DB: db})
			defer c.Close()
			if got, err := c.Exists(ctx, `s.types:a\:b\\c:1`).Result(); err != nil || got != 1 {
				t.Fatalf("escaped key: exists=%d err=%v", got, err)
			}
		})
	}
}

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

func expect(t *testing.T, s *Sink, want ...[]any) {
	t.Helper()
	m := map[string][]any{}
	for _, r := range want {
		m[sinktest.RowKey(acct, r)] = r
	}
	if diff := sinktest.Diff(acct, m, readMap(t, s, acct)); diff != "" {
		t.Fatal(diff)
	}
}

func eachFormat(t *testing.T, fn func(t *testing.T, s *Sink, c *goredis.Client)) {
	addr := harness.RedisT(t).Addr()
	for db, f := range formats {
		t.Run(f, func(t *testing.T) {
			s := openSink(t, addr, Options{Format: f, DB: db, TombstoneTTL: time.Hour})
			c := goredis.NewClient(&goredis.Options{Addr: addr, DB: db})
			defer c.Close()
			fn(t, s, c)
		})
	}
}

// readKey reads a row key as a consumer does: its version, whether it is
// a tombstone, and its fields or members.
func readKey(t *testing.T, s *Sink, c *goredis.Client, key string) (version string, deleted bool, vals map[string]string) {
	t.Helper()
	var cmd goredis.Cmder = c.HGetAll(ctx, key)
	if s.opts.Format == "json" {
		cmd = c.Get(ctx, key)
	}
	version, deleted, vals, err := stored(cmd)
	if err != nil {
		t.Fatalf("%s: %v", key, err)
	}
	return version, deleted, vals
}

// foreign makes key hold a value of the type the sink's format does not
// write (a string for hash, a hash for json).
func foreign(t *testing.T, s *Sink, c *goredis.Client, key string) {
	t.Helper()
	var err error
	if s.opts.Format == "json" {
		err = c.HSet(ctx, key, "f", "not a string").Err()
	} else {
		err = c.Set(ctx, key, "not a hash", 0).Err()
	}
	if err != nil {
		t.Fatal(err)
	}
}

// TestJSONStoredForm pins the json format's documents: a string whose
// first member is _v, a member per column, the tombstone form, and _v
// still first after the script merged an Unchanged column.
func TestJSONStoredForm(t *testing.T) {
	addr := harness.RedisT(t).Addr()
	s := openSink(t, addr, Options{Format: "json"})
	c := client(t, addr)
	v := func(minor uint64) string { return (pipeline.Version{0, 100, 0, minor}).Compact() }
	mustWrite(t, s, row(pipeline.OpInsert, 1, 1, "a\"q\"\n", nil), row(pipeline.OpInsert, 2, 2, "b", "x"))
	if got, want := c.Get(ctx, "public.acct:1").Val(), `{"_v":"`+v(1)+`","id":"1","name":"a\"q\"\n","note":null}`; got != want {
		t.Fatalf("document = %s, want %s", got, want)
	}
	mustWrite(t, s, row(pipeline.OpDelete, 3, 1, nil, nil), row(pipeline.OpUpdate, 4, 2, pipeline.UnchangedValue, "y"))
	if got, want := c.Get(ctx, "public.acct:1").Val(), `{"_v":"`+v(3)+`","_deleted":true}`; got != want {
		t.Fatalf("tombstone = %s, want %s", got, want)
	}
	merged := c.Get(ctx, "public.acct:2").Val()
	if !strings.HasPrefix(merged, `{"_v":"`+v(4)+`",`) {
		t.Fatalf("merged document = %s: _v is not first", merged)
	}
	var doc map[string]any
	if err := json.Unmarshal([]byte(merged), &doc); err != nil || len(doc) != 4 || doc["name"] != "b" || doc["note"] != "y" || doc["id"] != "2" {
		t.Fatalf("merged document = %s (%v)", merged, err)
	}
	// A value JSON cannot hold is refused, not replaced.
	err := s.Write(ctx, []pipeline.Record{row(pipeline.OpInsert, 5, 3, "bad\xff", nil)})
	var be *pipeline.BatchError
	if !errors.As(err, &be) || len(be.Failed) != 1 || !strings.Contains(be.Failed[0].Err.Error(), "UTF-8") {
		t.Fatalf("invalid UTF-8: err = %v", err)
	}
	// A string key that is not a sluice document is refused too.
	c.Set(ctx, "public.acct:4", "plain", 0)
	err = s.Write(ctx, []pipeline.Record{row(pipeline.OpInsert, 6, 4, "d", nil)})
	if !errors.As(err, &be) || len(be.Failed) != 1 || !strings.Contains(be.Failed[0].Err.Error(), "not a sluice document") {
		t.Fatalf("foreign string: err = %v", err)
	}
}

func TestStaleWriteIgnored(t *testing.T) {
	eachFormat(t, func(t *testing.T, s *Sink, c *goredis.Client) {
		mustWrite(t, s, row(pipeline.OpInsert, 10, 1, "new", "n"))
		mustWrite(t, s, row(pipeline.OpUpdate, 9, 1, "stale", nil), row(pipeline.OpUpdate, 10, 1, "equal", nil))
		expect(t, s, []any{int64(1), "new", "n"})
		if v, _, _ := readKey(t, s, c, "public.acct:1"); v != (pipeline.Version{0, 100, 0, 10}).Compact() {
			t.Fatalf("_v = %q", v)
		}
	})
}

func TestTombstoneBlocksLateSnapshotRow(t *testing.T) {
	eachFormat(t, func(t *testing.T, s *Sink, c *goredis.Client) {
		mustWrite(t, s, row(pipeline.OpInsert, 10, 1, "a", "n"), row(pipeline.OpDelete, 11, 1, nil, nil))
		mustWrite(t, s, row(pipeline.OpRead, 1, 1, "snapshot", nil), row(pipeline.OpInsert, 10, 1, "replay", nil))
		expect(t, s)
		v, deleted, vals := readKey(t, s, c, "public.acct:1")
		if !deleted || v != (pipeline.Version{0, 100, 0, 11}).Compact() || vals["id"] != "" || vals["name"] != "" {
			t.Fatalf("tombstone = %s %v %v", v, deleted, vals)
		}
		if ttl := c.TTL(ctx, "public.acct:1").Val(); ttl <= 0 || ttl > time.Hour {
			t.Fatalf("tombstone TTL = %v", ttl)
		}
		// A newer insert revives the key without the tombstone's TTL.
		mustWrite(t, s, row(pipeline.OpInsert, 12, 1, "back", nil))
		expect(t, s, []any{int64(1), "back", nil})
		if ttl := c.TTL(ctx, "public.acct:1").Val(); ttl != -1 {
			t.Fatalf("live key TTL = %v", ttl)
		}
	})
}

func TestTruncateBarrier(t *testing.T) {
	eachFormat(t, func(t *testing.T, s *Sink, c *goredis.Client) {
		var recs []pipeline.Record
		for i := int64(1); i <= 2500; i++ { // more than one SCAN page
			recs = append(recs, row(pipeline.OpInsert, 10, i, "x", nil))
		}
		recs = append(recs, row(pipeline.OpInsert, 30, 9999, "newer than the truncate", nil))
		mustWrite(t, s, recs...)
		trunc := pipeline.Record{Op: pipeline.OpTruncate, Table: acct, Version: pipeline.Version{0, 100, 0, 20}}
		// In one batch: an older change before the truncate, a newer one after.
		mustWrite(t, s, row(pipeline.OpUpdate, 15, 1, "older", nil), trunc, row(pipeline.OpInsert, 25, 2, "after", nil))
		expect(t, s, []any{int64(2), "after", nil}, []any{int64(9999), "newer than the truncate", nil})
		// Two rows, the barrier, the columns set and the generation
		// record (Invariant 10).
		if n := c.DBSize(ctx).Val(); n != 5 || c.Get(ctx, s.generationKey()).Val() != "0" {
			t.Fatalf("%d keys after truncate (generation %q), want 5 and generation 0", n, c.Get(ctx, s.generationKey()).Val())
		}
		if b := c.Get(ctx, "public.acct#barrier").Val(); b != trunc.Version.Compact() {
			t.Fatalf("barrier = %q", b)
		}
		// Records below the barrier are no-ops, even for absent keys; an
		// older truncate leaves the barrier.
		old := trunc
		old.Version[3] = 5
		mustWrite(t, s, row(pipeline.OpRead, 1, 3, "snapshot", nil), row(pipeline.OpDelete, 19, 2, nil, nil), old)
		expect(t, s, []any{int64(2), "after", nil}, []any{int64(9999), "newer than the truncate", nil})
		if b := c.Get(ctx, "public.acct#barrier").Val(); b != trunc.Version.Compact() {
			t.Fatalf("barrier moved back to %q", b)
		}
	})
}

func TestUnchangedKept(t *testing.T) {
	eachFormat(t, func(t *testing.T, s *Sink, c *goredis.Client) {
		mustWrite(t, s, row(pipeline.OpInsert, 1, 1, "a", "kept"))
		mustWrite(t, s, row(pipeline.OpUpdate, 2, 1, "b", pipeline.UnchangedValue),
			row(pipeline.OpUpdate, 3, 1, pipeline.UnchangedValue, pipeline.UnchangedValue))
		// Unchanged on a key the target does not hold: NULL.
		mustWrite(t, s, row(pipeline.OpUpdate, 3, 2, "c", pipeline.UnchangedValue))
		expect(t, s, []any{int64(1), "b", "kept"}, []any{int64(2), "c", nil})
	})
}

func TestPermanentErrorIsPerRecord(t *testing.T) {
	eachFormat(t, func(t *testing.T, s *Sink, c *goredis.Client) {
		foreign(t, s, c, "public.acct:2")
		err := s.Write(ctx, []pipeline.Record{row(pipeline.OpInsert, 1, 1, "a", nil), row(pipeline.OpInsert, 1, 2, "b", nil),
			{Op: pipeline.OpInsert, Table: acct, After: []any{int64(3), struct{}{}, nil}}})
		var be *pipeline.BatchError
		if !errors.As(err, &be) || len(be.Failed) != 2 || be.Failed[0].Index != 1 || be.Failed[1].Index != 2 ||
			!be.Failed[0].Permanent || !strings.Contains(be.Failed[0].Err.Error(), "WRONGTYPE") {
			t.Fatalf("err = %v", err)
		}
		expect(t, s, []any{int64(1), "a", nil})
	})
}

// TestLargeBatchAcrossTablesAndSegments writes one batch that spans several
// segments and partitions, interleaves two tables (so script calls are cut
// per table), changes the same keys again in later segments, and holds two
// keys of the wrong type: exactly the records of those two keys fail and
// every other key ends at its last change.
func TestLargeBatchAcrossTablesAndSegments(t *testing.T) {
	other := &pipeline.Table{ID: pipeline.TableID{Database: "d", Schema: "public", Table: "other"},
		Columns: acct.Columns, KeyIdx: acct.KeyIdx, Generation: 1}
	const keys = 3000
	eachFormat(t, func(t *testing.T, s *Sink, c *goredis.Client) {
		foreign(t, s, c, "public.acct:17")
		foreign(t, s, c, "public.other:2500")
		var recs []pipeline.Record
		var wantFailed []int
		for pass := uint64(1); pass <= 3; pass++ {
			for id := int64(1); id <= keys; id++ {
				tbl := acct
				if id%2 == 0 {
					tbl = other
				}
				if (tbl == acct && id == 17) || (tbl == other && id == 2500) {
					wantFailed = append(wantFailed, len(recs))
				}
				op := pipeline.OpUpdate
				if pass == 3 && id%5 == 0 {
					op = pipeline.OpDelete
				}
				r := row(op, pass*keys+uint64(id), id, fmt.Sprintf("n%d-%d", id, pass), nil)
				r.Table = tbl
				recs = append(recs, r)
			}
		}
		err := s.Write(ctx, recs)
		var be *pipeline.BatchError
		if !errors.As(err, &be) || len(be.Failed) != len(wantFailed) {
			t.Fatalf("err = %v, want %d failed records", err, len(wantFailed))
		}
		for i, f := range be.Failed {
			if f.Index != wantFailed[i] || !f.Permanent || !strings.Contains(f.Err.Error(), "WRONGTYPE") {
				t.Fatalf("failed[%d] = %+v, want index %d WRONGTYPE", i, f, wantFailed[i])
			}
		}
		want := map[*pipeline.Table]map[string][]any{acct: {}, other: {}}
		for id := int64(1); id <= keys; id++ {
			tbl := acct
			if id%2 == 0 {
				tbl = other
			}
			if id%5 == 0 || (tbl == acct && id == 17) || (tbl == other && id == 2500) {
				continue
			}
			r := []any{id, fmt.Sprintf("n%d-3", id), nil}
			want[tbl][sinktest.RowKey(tbl, r)] = r
		}
		for tbl, w := range want {
			if diff := sinktest.Diff(tbl, w, readMap(t, s, tbl)); diff != "" {
				t.Fatalf("%s:\n%s", tbl.ID, diff)
			}
		}
	})
}

func TestScriptCacheLost(t *testing.T) {
	eachFormat(t, func(t *testing.T, s *Sink, c *goredis.Client) {
		if err := c.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		mustWrite(t, s, row(pipeline.OpInsert, 1, 1, "a", nil), row(pipeline.OpInsert, 1, 2, "b", nil))
		c.ScriptFlush(ctx)
		mustWrite(t, s, pipeline.Record{Op: pipeline.OpTruncate, Table: acct, Version: pipeline.Version{0, 100, 0, 2}})
		expect(t, s)
	})
}

func TestLiveTTL(t *testing.T) {
	addr := harness.RedisT(t).Addr()
	s := openSink(t, addr, Options{TTL: time.Minute})
	mustWrite(t, s, row(pipeline.OpInsert, 1, 1, "a", nil))
	if ttl := client(t, addr).TTL(ctx, "public.acct:1").Val(); ttl <= 0 || ttl > time.Minute {
		t.Fatalf("TTL = %v", ttl)
	}
}

func TestBadOptionsAreFatal(t *testing.T) {
	for _, o := range []Options{{Addr: "x:1", Format: "xml"}, {Addr: "x:1", KeyTemplate: "{pk}:{table}"},
		{Addr: "x:1", KeyTemplate: "{table}#{pk}"}, {}} {
		if err := New(o, nil).Open(ctx); !pipeline.IsFatal(err) {
			t.Errorf("%+v: err = %v, want fatal", o, err)
		}
	}
}

// TestRedisKilledMidWrite kills the server while batches are being
// written: the Write in flight and every later one fail (never nil); after
// a restart the replayed batches succeed and the state is the expected one.
func TestRedisKilledMidWrite(t *testing.T) {
	r := harness.RedisT(t)
	s := openSink(t, r.Addr(), Options{})
	const batches, per = 40, 2000
	batch := func(b int) []pipeline.Record {
		recs := make([]pipeline.Record, per)
		for i := range recs {
			recs[i] = row(pipeline.OpInsert, uint64(b+1), int64(i), fmt.Sprintf("batch %d", b), nil)
		}
		return recs
	}
	var done atomic.Int64
	errc := make(chan error, 1)
	go func() {
		for b := 0; b < batches; b++ {
			if err := s.Write(ctx, batch(b)); err != nil {
				errc <- err
				return
			}
			done.Add(1)
		}
		errc <- nil
	}()
	for done.Load() < 3 {
		time.Sleep(time.Millisecond)
	}
	r.Kill()
	err := <-errc
	if err == nil {
		t.Fatalf("every write succeeded although the server was killed after %d batches", done.Load())
	}
	var be *pipeline.BatchError
	if errors.As(err, &be) {
		t.Fatalf("a lost connection must fail the whole batch, got %v", err)
	}
	t.Logf("write after %d batches failed: %v", done.Load(), err)
	if err := s.Write(ctx, batch(0)); err == nil {
		t.Fatal("write to a dead server returned nil")
	}
	if err := r.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	// go-redis answers new connections with the last dial error for a
	// moment after failed dials, even once the server is back: reads, like
	// writes, are retried.
	deadline := time.Now().Add(20 * time.Second)
	for _, err := s.Rows(ctx, acct); err != nil; _, err = s.Rows(ctx, acct) {
		if time.Now().After(deadline) {
			t.Fatalf("read after restart: %v", err)
		}
		time.Sleep(200 * time.Millisecond) // the client's dial back-off
	}
	// Every batch Write acknowledged survived the kill (appendfsync
	// always): each key holds the last acknowledged batch or a later one.
	acked := int(done.Load())
	survived := readMap(t, s, acct)
	if len(survived) != per {
		t.Fatalf("after the kill: %d rows, want the %d every acknowledged batch wrote", len(survived), per)
	}
	for _, v := range survived {
		var b int
		if _, err := fmt.Sscanf(v[1].(string), "batch %d", &b); err != nil || b < acked-1 {
			t.Fatalf("after the kill: row %v, but batch %d was acknowledged", v, acked-1)
		}
	}
	// The runtime retries from the last acknowledged batch; replay them all.
	for b := 0; b < batches; b++ {
		mustWrite(t, s, batch(b)...)
	}
	got := readMap(t, s, acct)
	if len(got) != per {
		t.Fatalf("%d rows, want %d", len(got), per)
	}
	for _, v := range got {
		if v[1] != fmt.Sprintf("batch %d", batches-1) {
			t.Fatalf("row %v", v)
		}
	}
}
