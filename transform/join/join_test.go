package join

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/sluice-cdc/sluice/pipeline"
)

var (
	customers = &pipeline.Table{ID: pipeline.TableID{Database: "shop", Schema: "public", Table: "customers"},
		Columns: []pipeline.Column{
			{Name: "id", Type: pipeline.TypeInt64, Key: true},
			{Name: "name", Type: pipeline.TypeString, Nullable: true},
			{Name: "since", Type: pipeline.TypeTimestampTZ, Nullable: true},
		}, KeyIdx: []int{0}, Generation: 1}
	orders = &pipeline.Table{ID: pipeline.TableID{Database: "shop", Schema: "public", Table: "orders"},
		Columns: []pipeline.Column{
			{Name: "id", Type: pipeline.TypeInt64, Key: true},
			{Name: "customer_id", Type: pipeline.TypeInt64, Nullable: true},
			{Name: "note", Type: pipeline.TypeString, Nullable: true, Comment: "free text", SourceType: "text"},
		}, KeyIdx: []int{0}, Generation: 1}
	other = &pipeline.Table{ID: pipeline.TableID{Schema: "public", Table: "other"},
		Columns: []pipeline.Column{{Name: "id", Type: pipeline.TypeInt64, Key: true}}, KeyIdx: []int{0}}
)

func ver(n uint64) pipeline.Version { return pipeline.Version{0, n, 0, 1} }

func rec(op pipeline.Op, t *pipeline.Table, v pipeline.Version, before, after []any) pipeline.Record {
	return pipeline.Record{Op: op, Table: t, Version: v, Before: before, After: after}
}

func customer(id int64, name string) []any {
	return []any{id, name, pipeline.Timestamp{Micros: 1_700_000_000_000_000 + id}}
}

func order(id, cust int64, note string) []any {
	var c any = cust
	if cust == 0 {
		c = nil
	}
	return []any{id, c, note}
}

var orderDocs = Options{Output: "public.order_docs", From: "public.orders",
	With: []Lookup{{Table: "public.customers", On: []string{"customer_id"}, As: "customer", Columns: []string{"name", "since"}}}}

// open opens the order_docs join in dir for a run without a checkpoint.
func open(t *testing.T, dir string) *Join { return openRun(t, orderDocs, dir, false) }

// reopen opens it for a run that resumes from a checkpoint.
func reopen(t *testing.T, dir string) *Join { return openRun(t, orderDocs, dir, true) }

func openRun(t *testing.T, o Options, dir string, resumed bool) *Join {
	t.Helper()
	o.Dir = dir
	j, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Begin(context.Background(), resumed); err != nil {
		_ = j.Close()
		t.Fatal(err)
	}
	return j
}

func process(t *testing.T, j *Join, in ...pipeline.Record) []pipeline.Record {
	t.Helper()
	out, err := j.Process(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// joined returns the output records (not the passed-through inputs).
func joined(out []pipeline.Record) []pipeline.Record {
	var js []pipeline.Record
	for _, r := range out {
		if r.Table != nil && r.Table.ID.Table == "order_docs" {
			js = append(js, r)
		}
	}
	return js
}

func nested(t *testing.T, r pipeline.Record) map[string]any {
	t.Helper()
	v := r.After[len(r.After)-1]
	if v == nil {
		return nil
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(v.(pipeline.JSON)), &m); err != nil {
		t.Fatalf("nested value %v: %v", v, err)
	}
	return m
}

func TestEnrichesAndFansOut(t *testing.T) {
	j := open(t, t.TempDir())
	defer j.Close()
	out := process(t, j,
		rec(pipeline.OpInsert, customers, ver(1), nil, customer(1, "Ada")),
		rec(pipeline.OpInsert, orders, ver(2), nil, order(10, 1, "first")),
		rec(pipeline.OpInsert, orders, ver(3), nil, order(11, 1, "second")),
		rec(pipeline.OpInsert, other, ver(3), nil, []any{int64(5)}),
	)
	if len(out) != 6 {
		t.Fatalf("want 4 inputs passed through and 2 joined rows, got %d records", len(out))
	}
	js := joined(out)
	if len(js) != 2 || js[0].Op != pipeline.OpInsert || js[0].Version != ver(2) || js[1].Version != ver(3) {
		t.Fatalf("joined rows: %+v", js)
	}
	if m := nested(t, js[0]); m["name"] != "Ada" || m["since"] != "2023-11-14T22:13:20.000001Z" || len(m) != 2 {
		t.Fatalf("nested customer: %v", m)
	}
	if js[0].After[2] != "first" || js[0].Table.Columns[3].Fields[0].Name != "name" {
		t.Fatalf("joined row %v, shape %+v", js[0].After, js[0].Table.Columns)
	}
	js = joined(process(t, j, rec(pipeline.OpUpdate, customers, ver(4), nil, customer(1, "Ada L."))))
	if len(js) != 2 || js[0].Op != pipeline.OpUpdate || js[0].Version != ver(4) {
		t.Fatalf("customer update re-emits both orders at its version: %+v", js)
	}
	for _, r := range js {
		if nested(t, r)["name"] != "Ada L." {
			t.Fatalf("order %v kept the old customer", r.After[0])
		}
	}
}

func TestDeletesMovesAndUnchanged(t *testing.T) {
	j := open(t, t.TempDir())
	defer j.Close()
	process(t, j,
		rec(pipeline.OpInsert, customers, ver(1), nil, customer(1, "Ada")),
		rec(pipeline.OpInsert, customers, ver(1), nil, customer(2, "Bob")),
		rec(pipeline.OpInsert, orders, ver(2), nil, order(10, 1, "n")),
	)
	// The order moves to customer 2 with its note unchanged (TOAST).
	js := joined(process(t, j, rec(pipeline.OpUpdate, orders, ver(3), nil, []any{int64(10), int64(2), pipeline.UnchangedValue})))
	if len(js) != 1 || js[0].After[2] != "n" || nested(t, js[0])["name"] != "Bob" {
		t.Fatalf("moved order: %+v", js)
	}
	if js := joined(process(t, j, rec(pipeline.OpUpdate, customers, ver(4), nil, customer(1, "Ada L.")))); len(js) != 0 {
		t.Fatalf("customer 1 no longer has orders, got %+v", js)
	}
	js = joined(process(t, j, rec(pipeline.OpDelete, customers, ver(5), customer(2, ""), nil)))
	if len(js) != 1 || nested(t, js[0]) != nil || js[0].After[2] != "n" {
		t.Fatalf("deleted customer leaves the order without one: %+v", js)
	}
	js = joined(process(t, j, rec(pipeline.OpDelete, orders, ver(6), order(10, 0, ""), nil)))
	if len(js) != 1 || js[0].Op != pipeline.OpDelete || js[0].Before[0] != int64(10) || js[0].Version != ver(6) {
		t.Fatalf("order delete: %+v", js)
	}
	// A late insert of customer 2 (older than its delete) changes nothing.
	js = joined(process(t, j, rec(pipeline.OpInsert, customers, ver(4), nil, customer(2, "Zombie"))))
	if len(js) != 0 {
		t.Fatalf("stale customer: %+v", js)
	}
}

// Snapshot rows share one version: a joined row emitted again (its
// customer arrived after it) must still be newer than before.
func TestSnapshotRowsWithOneVersion(t *testing.T) {
	j := open(t, t.TempDir())
	defer j.Close()
	s := ver(7)
	read := func(t2 *pipeline.Table, img []any) pipeline.Record {
		r := rec(pipeline.OpRead, t2, s, nil, img)
		r.Snapshot = true
		return r
	}
	a := joined(process(t, j, read(orders, order(10, 1, "n"))))
	b := joined(process(t, j, read(customers, customer(1, "Ada"))))
	if len(a) != 1 || len(b) != 1 || !a[0].Version.Less(b[0].Version) || b[0].Op != pipeline.OpRead || !b[0].Snapshot {
		t.Fatalf("first %+v then %+v", a, b)
	}
	if nested(t, a[0]) != nil || nested(t, b[0])["name"] != "Ada" {
		t.Fatal("wrong nested rows")
	}
	if next := ver(8); !b[0].Version.Less(next) {
		t.Fatalf("raised version %v is not below the next transaction's %v", b[0].Version, next)
	}
}

// An output a snapshot record caused is one too: a repair's delete of a
// looked-up row (or the delete a filter makes of a re-read row) updates
// the rows that refer to it as snapshot records, which the exactly-once
// Kafka sink neither counts in its mark nor skips; a stream change's
// outputs are stream records.
func TestOutputsOfSnapshotRecordsAreSnapshotRecords(t *testing.T) {
	j := open(t, t.TempDir())
	defer j.Close()
	js := joined(process(t, j, rec(pipeline.OpInsert, customers, ver(1), nil, customer(1, "Ada")),
		rec(pipeline.OpInsert, orders, ver(2), nil, order(10, 1, "n"))))
	if len(js) != 1 || js[0].Snapshot {
		t.Fatalf("a stream insert's output: %+v", js)
	}
	gone := rec(pipeline.OpDelete, customers, ver(5), customer(1, "Ada"), nil)
	gone.Snapshot = true
	js = joined(process(t, j, gone))
	if len(js) != 1 || js[0].Op != pipeline.OpUpdate || !js[0].Snapshot || js[0].Origin != ver(5) {
		t.Fatalf("the output of a snapshot delete: %+v", js)
	}
	// A re-snapshot's read (pipeline.Record.Replaces): its output replaces
	// what the sinks hold too, so a filter after the join that excludes
	// it deletes it.
	again := rec(pipeline.OpRead, orders, ver(6), nil, order(10, 1, "n"))
	again.Snapshot, again.Replaces = true, true
	js = joined(process(t, j, again))
	if len(js) != 1 || js[0].Op != pipeline.OpRead || !js[0].Snapshot || !js[0].Replaces {
		t.Fatalf("the output of a re-read: %+v", js)
	}
}

func TestTruncates(t *testing.T) {
	j := open(t, t.TempDir())
	defer j.Close()
	process(t, j,
		rec(pipeline.OpInsert, customers, ver(1), nil, customer(1, "Ada")),
		rec(pipeline.OpInsert, orders, ver(2), nil, order(10, 1, "n")),
	)
	js := joined(process(t, j, rec(pipeline.OpTruncate, customers, ver(3), nil, nil)))
	if len(js) != 1 || nested(t, js[0]) != nil {
		t.Fatalf("customers truncate: %+v", js)
	}
	js = joined(process(t, j, rec(pipeline.OpTruncate, orders, ver(4), nil, nil)))
	if len(js) != 1 || js[0].Op != pipeline.OpTruncate || js[0].Version != ver(4) {
		t.Fatalf("orders truncate: %+v", js)
	}
	if js := joined(process(t, j, rec(pipeline.OpInsert, orders, ver(3), nil, order(10, 1, "late")))); len(js) != 0 {
		t.Fatalf("a change older than the truncate joined: %+v", js)
	}
}

func TestShapeErrors(t *testing.T) {
	j := openRun(t, Options{Output: "public.order_docs", From: "public.orders",
		With: []Lookup{{Table: "public.customers", On: []string{"customer_id", "note"}, As: "customer"}}}, t.TempDir(), false)
	defer j.Close()
	_, err := j.Process(context.Background(), []pipeline.Record{rec(pipeline.OpInsert, customers, ver(1), nil, customer(1, "A"))})
	if err == nil || !strings.Contains(err.Error(), "on lists 2 column(s) but public.customers has a 1-column primary key (id)") {
		t.Fatalf("got %v", err)
	}
}

func TestCodecRoundTrip(t *testing.T) {
	d, _ := pipeline.ParseDecimal("-1234567890123456789012.345")
	vals := []any{nil, true, false, int64(-5), uint64(1 << 63), 3.25, "text", []byte{0, 1}, pipeline.JSON(`{"a":1}`), d,
		pipeline.UUID{1, 2}, pipeline.Date{Days: -3}, pipeline.Date{Special: pipeline.PosInfinity}, pipeline.TimeOfDay(5),
		pipeline.TimeTZ{Micros: 7, OffsetSec: -3600}, pipeline.Timestamp{Micros: -9}, pipeline.Interval{Months: 1, Days: -2, Micros: 3},
		[]any{int64(1), nil, []any{"x"}}, pipeline.UnchangedValue}
	e := &entry{version: ver(3), emitted: ver(4), names: make([]string, len(vals)), values: vals}
	for i := range vals {
		e.names[i] = fmt.Sprint("c", i)
	}
	b, err := e.encode()
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeEntry(b)
	if err != nil {
		t.Fatal(err)
	}
	for i := range vals {
		if dv, ok := vals[i].(pipeline.Decimal); ok {
			if !dv.Equal(got.values[i].(pipeline.Decimal)) {
				t.Fatalf("decimal %v came back as %v", dv, got.values[i])
			}
			continue
		}
		if !reflect.DeepEqual(got.values[i], vals[i]) {
			t.Fatalf("value %d: %#v came back as %#v", i, vals[i], got.values[i])
		}
	}
	if got.version != e.version || got.emitted != e.emitted || got.deleted {
		t.Fatalf("entry header %+v", got)
	}
	if _, err := decodeEntry(b[:len(b)-3]); err == nil {
		t.Fatal("truncated entry decoded")
	}
}

// modelSink applies outputs as every sink does (Invariant 4): newer
// versions win, deletes leave tombstones, a truncate is a barrier.
type modelSink struct {
	rows    map[int64]modelRow
	barrier pipeline.Version
}

type modelRow struct {
	v       pipeline.Version
	deleted bool
	img     []any
}

func (m *modelSink) write(t *testing.T, recs []pipeline.Record) {
	for _, r := range joined(recs) {
		if r.Op == pipeline.OpTruncate {
			if m.barrier.Less(r.Version) {
				m.barrier = r.Version
				for k, row := range m.rows {
					if row.v.Less(r.Version) {
						delete(m.rows, k)
					}
				}
			}
			continue
		}
		img := r.After
		if img == nil {
			img = r.Before
		}
		k := img[0].(int64)
		if old, ok := m.rows[k]; ok && !old.v.Less(r.Version) || r.Version.Less(m.barrier) {
			continue
		}
		m.rows[k] = modelRow{v: r.Version, deleted: r.Op == pipeline.OpDelete, img: img}
	}
}

// A random change log applied in random batches, with crashes that
// restart from an earlier checkpoint and replay from there (the state is
// then ahead of the checkpoint): the sink ends equal to the join of the
// final tables.
func TestReplayAfterCrashesConverges(t *testing.T) {
	for _, failover := range []bool{false, true} {
		for seed := range uint64(seeds(20)) {
			t.Run(fmt.Sprint(variant(failover), "seed", seed), func(t *testing.T) { replayConverges(t, seed, failover) })
		}
	}
}

// positionN reads the replay models' positions, {"N":<change>}.
func positionN(p pipeline.Position) int {
	var v struct{ N int }
	if err := json.Unmarshal(p, &v); err != nil {
		return -1
	}
	return v.N
}

// variant names a replay model's failover variant: half the resumes from
// a checkpoint come back on another server (a MySQL failover), a
// generation up and with that server's own positions (Version[1]); the
// join re-applies what the replay brings, the state having run ahead, and
// keeps the moves it may need by their positions (Options.Covers).
func variant(failover bool) string {
	if failover {
		return "failover/"
	}
	return ""
}

// replaySeeds runs the replay models longer than the suite does.
var replaySeeds = flag.Int("replay-seeds", 0, "seeds per replay model (0: the suite's few)")

func seeds(n int) int {
	if *replaySeeds > 0 {
		return *replaySeeds
	}
	return n
}

// runWithCrashes applies log to a join of o in random batches of up to
// ten records. Their outputs stay in flight until a random prefix of them
// is written to sink (durable), and a checkpoint, now and then, covers
// the durable batches: the replay floor follows it (Checkpointed). Now
// and then it crashes: the state keeps every batch, the sink a random
// prefix of the outputs in flight, and the join starts again from the
// last checkpoint (with none, the state starts over), the state ahead of
// it. It returns the join open last.
func runWithCrashes(t *testing.T, rng *rand.Rand, o Options, log []pipeline.Record, sink *modelSink, failover bool) *Join {
	t.Helper()
	dir := t.TempDir()
	if failover {
		o.Covers = func(pos, mark pipeline.Position) bool { return positionN(pos) <= positionN(mark) }
	}
	j := openRun(t, o, dir, false)
	var (
		pending    [][]pipeline.Record
		ends       []int // the log position after each pending batch
		durable    uint64
		checkpoint int
		gen        uint64 // the server's generation (variant)
	)
	for pos := 0; pos < len(log); {
		end := min(len(log), pos+1+rng.IntN(10))
		in := slices.Clone(log[pos:end])
		for i := range in {
			// What names the change on every server: its position and
			// transaction (one change each).
			in[i].Pos, in[i].TxID = pipeline.Position(fmt.Sprintf(`{"N":%d}`, in[i].Version[1])), in[i].Version[1]
			in[i].Version[0], in[i].Version[1] = gen, in[i].Version[1]+1_000_000*gen
		}
		out := process(t, j, in...)
		pending, ends, pos = append(pending, out), append(ends, end), end
		if n := rng.IntN(len(pending) + 1); n > 0 && rng.IntN(2) == 0 {
			for _, o := range pending[:n] {
				sink.write(t, o)
			}
			last := ends[n-1]
			pending, ends, durable = pending[n:], ends[n:], durable+uint64(n)
			if rng.IntN(2) == 0 {
				checkpoint = last
				j.Checkpointed(durable)
			}
		}
		if rng.IntN(5) == 0 {
			for _, o := range pending[:rng.IntN(len(pending)+1)] {
				sink.write(t, o)
			}
			if err := j.Close(); err != nil {
				t.Fatal(err)
			}
			if failover && checkpoint > 0 && rng.IntN(2) == 0 {
				gen++
			}
			j = openRun(t, o, dir, checkpoint > 0)
			pending, ends, durable, pos = nil, nil, 0, checkpoint
		}
	}
	for _, o := range pending {
		sink.write(t, o)
	}
	return j
}

func replayConverges(t *testing.T, seed uint64, failover bool) {
	rng := rand.New(rand.NewPCG(seed, 7))
	custs := map[int64]string{}
	ords := map[int64][]any{}
	var log []pipeline.Record
	// A snapshot: every row at one version.
	for id := int64(1); id <= 5; id++ {
		custs[id] = fmt.Sprint("c", id)
		log = append(log, rec(pipeline.OpRead, customers, ver(1), nil, customer(id, custs[id])))
	}
	for id := int64(1); id <= 8; id++ {
		ords[id] = order(id, 1+rng.Int64N(6), "o")
		log = append(log, rec(pipeline.OpRead, orders, ver(1), nil, ords[id]))
	}
	rng.Shuffle(len(log), func(a, b int) { log[a], log[b] = log[b], log[a] })
	for n := uint64(2); n < 120; n++ {
		v := ver(n)
		switch x := rng.IntN(10); {
		case x < 3:
			id := 1 + rng.Int64N(7)
			custs[id] = fmt.Sprint("c", id, "@", n)
			log = append(log, rec(pipeline.OpUpdate, customers, v, nil, customer(id, custs[id])))
		case x < 4:
			id := 1 + rng.Int64N(7)
			if _, ok := custs[id]; ok {
				delete(custs, id)
				log = append(log, rec(pipeline.OpDelete, customers, v, customer(id, ""), nil))
			}
		case x < 8:
			id := 1 + rng.Int64N(12)
			ords[id] = order(id, rng.Int64N(8), fmt.Sprint("o@", n))
			log = append(log, rec(pipeline.OpUpdate, orders, v, nil, ords[id]))
		case x < 9:
			id := 1 + rng.Int64N(12)
			if _, ok := ords[id]; ok {
				delete(ords, id)
				log = append(log, rec(pipeline.OpDelete, orders, v, order(id, 0, ""), nil))
			}
		default:
			if rng.IntN(4) == 0 {
				clear(custs)
				log = append(log, rec(pipeline.OpTruncate, customers, v, nil, nil))
			}
		}
	}
	sink := &modelSink{rows: map[int64]modelRow{}}
	j := runWithCrashes(t, rng, orderDocs, log, sink, failover)
	defer j.Close()
	for id, img := range ords {
		row, ok := sink.rows[id]
		if !ok || row.deleted {
			t.Fatalf("order %d missing from the sink", id)
		}
		if !reflect.DeepEqual(row.img[:3], img) {
			t.Fatalf("order %d: sink has %v, source %v", id, row.img[:3], img)
		}
		var want any
		if c, ok := img[1].(int64); ok {
			if name, ok := custs[c]; ok {
				want = name
			}
		}
		var got any
		if row.img[3] != nil {
			var m map[string]any
			if err := json.Unmarshal([]byte(row.img[3].(pipeline.JSON)), &m); err != nil {
				t.Fatal(err)
			}
			got = m["name"]
		}
		if got != want {
			t.Fatalf("order %d: customer %v in the sink, %v in the source", id, got, want)
		}
	}
	for id, row := range sink.rows {
		if _, ok := ords[id]; !ok && !row.deleted {
			t.Fatalf("order %d is gone from the source but live in the sink", id)
		}
	}
}

// A restarted join knows the shapes before the source sends a row of
// every table: a customer change first thing re-emits its orders under
// the same output table (same database, schema and name; members known).
func TestRestartKnowsShapes(t *testing.T) {
	dir := t.TempDir()
	j := open(t, dir)
	first := joined(process(t, j,
		rec(pipeline.OpInsert, customers, ver(1), nil, customer(1, "Ada")),
		rec(pipeline.OpInsert, orders, ver(2), nil, order(10, 1, "n"))))
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	j = reopen(t, dir)
	defer j.Close()
	again := joined(process(t, j, rec(pipeline.OpUpdate, customers, ver(3), nil, customer(1, "Ada L."))))
	if len(first) != 1 || len(again) != 1 {
		t.Fatalf("outputs %d, %d", len(first), len(again))
	}
	a, b := first[0].Table, again[0].Table
	if a.ID != b.ID || b.ID.Database != "shop" || !reflect.DeepEqual(a.Columns, b.Columns) || !reflect.DeepEqual(a.KeyIdx, b.KeyIdx) {
		t.Fatalf("shape before restart %+v, after %+v", a, b)
	}
	if nested(t, again[0])["name"] != "Ada L." || again[0].After[2] != "n" {
		t.Fatalf("after restart: %v", again[0].After)
	}
}

// A first load's truncate barrier of a looked-up table clears nothing and
// changes no output; the same truncate replayed after a crash sends the
// referring rows again (their outputs may not have reached the sinks).
func TestLookupBarrierOfFirstLoad(t *testing.T) {
	j := open(t, t.TempDir())
	defer j.Close()
	process(t, j, rec(pipeline.OpRead, orders, ver(1), nil, order(10, 1, "n")))
	barrier := rec(pipeline.OpTruncate, customers, pipeline.Version{0, 1, 0, 0}, nil, nil)
	barrier.Snapshot = true
	if js := joined(process(t, j, barrier)); len(js) != 0 {
		t.Fatalf("first barrier: %+v", js)
	}
	if js := joined(process(t, j, barrier)); len(js) != 1 || js[0].After[0] != int64(10) {
		t.Fatalf("replayed barrier: %+v", js)
	}
}

// A table joined with itself: employees with their manager embedded. A
// manager's change reaches the employees who report to them, and the
// manager's own row is joined too.
func TestSelfJoin(t *testing.T) {
	emp := &pipeline.Table{ID: pipeline.TableID{Database: "hr", Schema: "public", Table: "employees"},
		Columns: []pipeline.Column{{Name: "id", Type: pipeline.TypeInt64, Key: true},
			{Name: "manager_id", Type: pipeline.TypeInt64, Nullable: true}, {Name: "name", Type: pipeline.TypeString}},
		KeyIdx: []int{0}}
	j := openRun(t, Options{Output: "public.employee_docs", From: "public.employees",
		With: []Lookup{{Table: "public.employees", On: []string{"manager_id"}, As: "manager", Columns: []string{"name"}}}}, t.TempDir(), false)
	defer j.Close()
	docs := func(out []pipeline.Record) map[int64]string {
		m := map[int64]string{}
		for _, r := range out {
			if r.Table.ID.Table != "employee_docs" {
				continue
			}
			if _, twice := m[r.After[0].(int64)]; twice {
				t.Fatalf("employee %v emitted twice for one input: %+v", r.After[0], out)
			}
			name := "-"
			if r.After[3] != nil {
				var x map[string]any
				_ = json.Unmarshal([]byte(r.After[3].(pipeline.JSON)), &x)
				name = x["name"].(string)
			}
			m[r.After[0].(int64)] = name
		}
		return m
	}
	got := docs(process(t, j,
		rec(pipeline.OpInsert, emp, ver(1), nil, []any{int64(1), nil, "boss"}),
		rec(pipeline.OpInsert, emp, ver(2), nil, []any{int64(2), int64(1), "dev"})))
	if got[1] != "-" || got[2] != "boss" {
		t.Fatalf("first: %v", got)
	}
	got = docs(process(t, j, rec(pipeline.OpUpdate, emp, ver(3), nil, []any{int64(1), nil, "chief"})))
	if len(got) != 2 || got[1] != "-" || got[2] != "chief" {
		t.Fatalf("after the manager's rename: %v", got)
	}
	// A row that refers to itself is its own manager: one output, which
	// embeds the row's new values.
	got = docs(process(t, j, rec(pipeline.OpUpdate, emp, ver(4), nil, []any{int64(1), int64(1), "founder"})))
	if len(got) != 2 || got[1] != "founder" || got[2] != "founder" {
		t.Fatalf("after the manager became their own: %v", got)
	}
}

// A state past max_state_bytes stops the pipeline: the batch that takes
// it past returns a fatal error naming the join and the setting, and no
// joined rows.
func TestAStatePastItsCapStopsThePipeline(t *testing.T) {
	o := orderDocs
	o.MaxStateBytes, o.MaxStateSetting = 256<<10, "transforms[0].join.max_state_bytes"
	var told int64
	o.StateSized = func(n int64) { told = n }
	j := openRun(t, o, t.TempDir(), false)
	defer j.Close()
	id := int64(0)
	for batch := range 100 {
		var in []pipeline.Record
		for range 100 {
			id++
			in = append(in, rec(pipeline.OpInsert, orders, ver(uint64(id)), nil, order(id, id%50+1, strings.Repeat("n", 40))))
		}
		out, err := j.Process(context.Background(), in)
		if err == nil {
			continue
		}
		if !pipeline.IsFatal(err) || out != nil || !strings.Contains(err.Error(), "join public.order_docs: its state") ||
			!strings.Contains(err.Error(), "raise transforms[0].join.max_state_bytes") {
			t.Fatalf("batch %d past the cap: %v (fatal: %v, %d rows out)", batch, err, pipeline.IsFatal(err), len(out))
		}
		if told <= 256<<10 {
			t.Fatalf("size told %d", told)
		}
		return
	}
	t.Fatalf("10,000 orders stayed under 256 KiB (%d bytes told)", told)
}
