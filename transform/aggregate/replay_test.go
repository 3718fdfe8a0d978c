package aggregate

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/transform/state"
)

// sink is a version-guarded upsert sink of the groups' rows, keyed by
// the group value, with a truncate's barrier.
type sink struct {
	rows    map[string]sinkRow
	barrier pipeline.Version
}

type sinkRow struct {
	v       pipeline.Version
	deleted bool
	img     []any
}

func newSink() *sink { return &sink{rows: map[string]sinkRow{}} }

func (s *sink) write(recs []pipeline.Record) {
	for _, r := range recs {
		if r.Table == nil || r.Table.ID != perCustomer.Output {
			continue
		}
		if r.Op == pipeline.OpTruncate {
			if s.barrier.Less(r.Version) {
				s.barrier = r.Version
				for k, row := range s.rows {
					if row.v.Less(r.Version) {
						delete(s.rows, k)
					}
				}
			}
			continue
		}
		img := r.After
		if img == nil {
			img = r.Before
		}
		k := fmt.Sprint(img[0])
		if old, ok := s.rows[k]; ok && !old.v.Less(r.Version) || r.Version.Less(s.barrier) {
			continue
		}
		s.rows[k] = sinkRow{v: r.Version, deleted: r.Op == pipeline.OpDelete, img: img}
	}
}

// live lists the rows that are not deleted, formatted, sorted.
func (s *sink) live() []string {
	var out []string
	for _, r := range s.rows {
		if !r.deleted {
			out = append(out, fmt.Sprint(r.img))
		}
	}
	slices.Sort(out)
	return out
}

// changeLog is a random change log of orders: a snapshot at one version
// (in batches), then inserts, updates that move rows between customers,
// change amounts and keys or leave the product unchanged, deletes and a
// rare truncate. rows is the table at the end.
func changeLog(rng *rand.Rand) (log []pipeline.Record, rows map[int64][]any) {
	rows = map[int64][]any{}
	snap := pipeline.Version{0, 1, 0, 1}
	log = append(log, pipeline.Record{Op: pipeline.OpTruncate, Table: orders, Version: pipeline.Version{0, 1, 0, 0}, Snapshot: true})
	random := func(id int64) []any {
		var amount any = cents(rng.Int64N(5000))
		if rng.IntN(8) == 0 {
			amount = nil
		}
		return order(id, rng.Int64N(5), amount, fmt.Sprint("p", rng.IntN(4)))
	}
	for id := int64(1); id <= 20; id++ {
		rows[id] = random(id)
		log = append(log, pipeline.Record{Op: pipeline.OpRead, Table: orders, Version: snap, Snapshot: true, After: rows[id]})
	}
	ids := func() []int64 {
		var out []int64
		for id := range rows {
			out = append(out, id)
		}
		slices.Sort(out)
		return out
	}
	next := int64(21)
	for n := uint64(2); n < 300; n++ {
		live := ids()
		switch x := rng.IntN(40); {
		case x < 10 || len(live) == 0:
			rows[next] = random(next)
			log = append(log, ins(n, rows[next]))
			next++
		case x < 25:
			id := live[rng.IntN(len(live))]
			img := random(id)
			after := slices.Clone(img)
			if rng.IntN(4) == 0 {
				img[3], after[3] = rows[id][3], pipeline.UnchangedValue
			}
			rows[id] = img
			log = append(log, upd(n, after))
		case x < 28:
			// A key change: the row leaves its key for a new one.
			id := live[rng.IntN(len(live))]
			img := random(next)
			delete(rows, id)
			rows[next] = img
			r := upd(n, img)
			r.Before = []any{id, nil, nil, nil}
			log = append(log, r)
			next++
		case x < 39:
			id := live[rng.IntN(len(live))]
			delete(rows, id)
			log = append(log, del(n, id))
		default:
			clear(rows)
			log = append(log, pipeline.Record{Op: pipeline.OpTruncate, Table: orders, Version: ver(n)})
		}
	}
	return log, rows
}

// run applies log in random batches. With crashes, a run stops at random
// after a batch, its outputs written only in part, and resumes from the
// last checkpoint, replaying from there (the state is then ahead of the
// checkpoint).
// With failover, half the resumes come back on another server (onServer).
func run(t *testing.T, rng *rand.Rand, log []pipeline.Record, crashes, failover bool) *sink {
	t.Helper()
	s := newSink()
	dir := t.TempDir()
	o := perCustomer
	if failover {
		o.Covers = coversByN
	}
	a := openRun(t, o, dir, false)
	defer func() { _ = a.Close() }()
	checkpoint, batches, gen := 0, uint64(0), uint64(0)
	for pos := 0; pos < len(log); {
		end := min(len(log), pos+1+rng.IntN(12))
		out, err := a.Process(context.Background(), onServer(log[pos:end], gen))
		if err != nil {
			t.Fatal(err)
		}
		batches++
		if crashes && checkpoint > 0 && rng.IntN(5) == 0 {
			s.write(out[:rng.IntN(len(out)+1)])
			if err := a.Close(); err != nil {
				t.Fatal(err)
			}
			if failover && rng.IntN(2) == 0 {
				gen++
			}
			a = openRun(t, o, dir, true)
			pos, batches = checkpoint, 0
			continue
		}
		s.write(out)
		pos = end
		if rng.IntN(2) == 0 {
			checkpoint = pos
			a.Checkpointed(batches)
		}
	}
	return s
}

// expected is GROUP BY customer_id over rows: count(), count(amount),
// sum, min and max of amount, count(DISTINCT product), formatted as the
// sink holds them (avg is checked against sum / count).
func expected(rows map[int64][]any) map[string][]any {
	out := map[string][]any{}
	for _, r := range rows {
		k := fmt.Sprint(r[1])
		g := out[k]
		if g == nil {
			g = []any{int64(0), int64(0), int64(0), nil, nil, map[string]bool{}}
			out[k] = g
		}
		g[0] = g[0].(int64) + 1
		if a, ok := r[2].(pipeline.Decimal); ok {
			c := a.Unscaled.Int64()
			g[1] = g[1].(int64) + 1
			g[2] = g[2].(int64) + c
			if g[3] == nil || c < g[3].(int64) {
				g[3] = c
			}
			if g[4] == nil || c > g[4].(int64) {
				g[4] = c
			}
		}
		g[5].(map[string]bool)[r[3].(string)] = true
	}
	return out
}

// After any crash, what the aggregate wrote equals what a crash-free run
// writes, and that equals GROUP BY over the final table (effectively
// once, A1–A3).
func TestAggregateReplayAfterCrashesConverges(t *testing.T) {
	for seed := range uint64(*killSeeds) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			log, rows := changeLog(rand.New(rand.NewPCG(seed, 1)))
			clean := run(t, rand.New(rand.NewPCG(seed, 2)), log, false, false)
			for _, failover := range []bool{false, true} {
				crashed := run(t, rand.New(rand.NewPCG(seed, 3)), log, true, failover)
				if got, want := crashed.live(), clean.live(); !slices.Equal(got, want) {
					t.Fatalf("after crashes (failover %v):\n%v\na crash-free run:\n%v", failover, got, want)
				}
			}
			want := expected(rows)
			if len(clean.live()) != len(want) {
				t.Fatalf("%d groups, GROUP BY has %d", len(clean.live()), len(want))
			}
			for k, g := range want {
				r, ok := clean.rows[k]
				if !ok || r.deleted {
					t.Fatalf("group %s missing", k)
				}
				img := r.img
				if img[1] != g[0] || img[2] != g[1] {
					t.Fatalf("group %s: counts %v %v, want %v %v", k, img[1], img[2], g[0], g[1])
				}
				if g[1].(int64) == 0 {
					if img[3] != nil || img[5] != nil || img[6] != nil {
						t.Fatalf("group %s without amounts: %v", k, img)
					}
				} else if fmt.Sprint(img[3]) != decimal(g[2].(int64)) || fmt.Sprint(img[5]) != decimal(g[3].(int64)) || fmt.Sprint(img[6]) != decimal(g[4].(int64)) {
					t.Fatalf("group %s: sum, min, max %v %v %v, want %v %v %v", k, img[3], img[5], img[6], g[2], g[3], g[4])
				}
				if img[7] != int64(len(g[5].(map[string]bool))) {
					t.Fatalf("group %s: %v distinct products, want %d", k, img[7], len(g[5].(map[string]bool)))
				}
			}
		})
	}
}

func decimal(c int64) string { return fmt.Sprintf("%d.%02d", c/100, c%100) }

// A3: snapshot rows read again (a resume in the middle of a load)
// raise a group's version above the stream's first changes; the group
// empties and comes back below that version: its outputs still rise, and
// the tombstone that carries the raised version is forgotten once the
// floor passes it.
func TestAggregateTombstoneKeepsVersionsRising(t *testing.T) {
	dir := t.TempDir()
	a := openRun(t, perCustomer, dir, false)
	defer a.Close()
	read := pipeline.Record{Op: pipeline.OpRead, Table: orders, Version: pipeline.Version{0, 10, 0, 1}, Snapshot: true,
		After: order(1, 1, cents(100), "a")}
	s := newSink()
	var last pipeline.Version
	for range 5 {
		out := results(t, a, read)
		if !last.Less(out[0].Version) {
			t.Fatalf("output %v after %v", out[0].Version, last)
		}
		last = out[0].Version
		s.write(out)
	}
	// A transaction committed at the snapshot's point: {0, 10, 0, 2+i},
	// below the group's {0, 10, 0, 5}.
	gone := del(0, 1)
	gone.Version = pipeline.Version{0, 10, 0, 2}
	out := results(t, a, gone)
	check(t, out, []any{"d", 1})
	if !last.Less(out[0].Version) {
		t.Fatalf("the delete at %v is not above %v", out[0].Version, last)
	}
	s.write(out)
	back := ins(0, order(9, 1, cents(700), "b"))
	back.Version = pipeline.Version{0, 10, 0, 3}
	out = results(t, a, back)
	check(t, out, []any{"c", 1, 1, 1, "7.00", "7.00", "7.00", "7.00", 1})
	s.write(out)
	if got := s.live(); len(got) != 1 {
		t.Fatalf("sink %v: the group that came back was dropped as stale", got)
	}
	results(t, a, del(20, 9))
	if n := tombstones(t, a); n != 2 {
		t.Fatalf("%d tombstones, want the two deletes'", n)
	}
	// The floor passes the tombstones: they go.
	results(t, a, ins(1000, order(20, 2, nil, "c")))
	a.Checkpointed(9) // the floor: ver(1000)
	results(t, a, ins(1001, order(21, 2, nil, "c")))
	if n := tombstones(t, a); n != 0 {
		t.Fatalf("%d tombstones kept below the floor", n)
	}
}

func tombstones(t *testing.T, a *Aggregate) int {
	t.Helper()
	n := 0
	err := a.st.View(time.Time{}, func(tx *state.Tx) error {
		s, err := open(tx)
		if err != nil {
			return err
		}
		return s.tombs.Scan(nil, func(_, _ []byte) error { n++; return nil })
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// A2: the outputs of the batches after the checkpoint are lost in a
// crash; the replayed changes change nothing in the state (A1), and the
// resumed run writes each group again when its replay reaches the batch
// that wrote it, with that batch's Origin, never one ahead of the replay
// (the exactly-once Kafka sink would skip the replayed records after it).
func TestAggregateResumeWritesAgainWhatMayBeLost(t *testing.T) {
	dir := t.TempDir()
	a := openRun(t, perCustomer, dir, false)
	results(t, a, ins(1, order(1, 1, cents(100), "a")))
	a.Checkpointed(1)
	results(t, a, ins(2, order(2, 1, cents(200), "a"))) // its output is lost
	results(t, a, ins(3, order(3, 2, cents(300), "a"))) // and this one's
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	a = openRun(t, perCustomer, dir, true)
	defer a.Close()
	out := results(t, a, ins(2, order(2, 1, cents(200), "a")))
	check(t, out, []any{"u", 1, 2, 2, "3.00", "1.50", "1.00", "2.00", 1})
	if out[0].Origin != ver(2) {
		t.Fatalf("written again with Origin %v, ahead of the replay at %v", out[0].Origin, ver(2))
	}
	// The replay reaches the second batch: its group, with the next
	// change counted once (the replay itself changed nothing).
	out = results(t, a, ins(3, order(3, 2, cents(300), "a")), ins(4, order(4, 2, cents(100), "b")))
	check(t, out, []any{"u", 2, 2, 2, "4.00", "2.00", "1.00", "3.00", 2})
	if out[0].Origin != ver(4) {
		t.Fatalf("Origin %v, want the batch's newest %v", out[0].Origin, ver(4))
	}
}

// A3 and A2 together: a delete lost in a crash is written again just
// above its last version, which lies below the replay. A checkpoint whose
// floor passes that version, but not the batch that wrote it again, must
// keep the group's tombstone: a second crash loses that batch's outputs
// too, and the next run has to write the delete once more.
func TestAggregateDeleteLostTwiceIsWrittenAgain(t *testing.T) {
	dir := t.TempDir()
	a := openRun(t, perCustomer, dir, false)
	results(t, a, ins(1, order(1, 1, cents(100), "a")))
	a.Checkpointed(1)
	// Group 1 empties at ver(2) in a batch whose newest change is ver(5);
	// the outputs are lost.
	check(t, results(t, a, del(2, 1), ins(3, order(3, 3, cents(300), "a")), ins(5, order(5, 2, cents(500), "a"))),
		[]any{"d", 1}, []any{"c", 3, 1, 1, "3.00", "3.00", "3.00", "3.00", 1}, []any{"c", 2, 1, 1, "5.00", "5.00", "5.00", "5.00", 1})
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	a = openRun(t, perCustomer, dir, true)
	results(t, a, del(2, 1))
	results(t, a, ins(3, order(3, 3, cents(300), "a")))
	a.Checkpointed(2) // the floor: ver(3), above the delete's ver(2)
	out := results(t, a, ins(5, order(5, 2, cents(500), "a")))
	if len(out) == 0 || row(out[0])[0] != "d" || !ver(2).Less(out[0].Version) || !out[0].Version.Less(ver(3)) {
		t.Fatalf("outputs %v: want group 1's delete again just above ver(2)", out)
	}
	if err := a.Close(); err != nil { // and lost again
		t.Fatal(err)
	}
	a = openRun(t, perCustomer, dir, true)
	defer a.Close()
	out = results(t, a, ins(5, order(5, 2, cents(500), "a")))
	if len(out) == 0 || row(out[0])[0] != "d" || fmt.Sprint(row(out[0])[1]) != "1" {
		t.Fatalf("outputs %v: group 1's delete is not written again", out)
	}
}

// A lost truncate: the resumed run deletes every group it had cleared,
// and the truncate's version is above every group's last output (the
// sinks' barrier clears rows below it only).
func TestAggregateTruncateLostInACrash(t *testing.T) {
	dir := t.TempDir()
	a := openRun(t, perCustomer, dir, false)
	read := pipeline.Record{Op: pipeline.OpRead, Table: orders, Version: pipeline.Version{0, 10, 0, 1}, Snapshot: true,
		After: order(1, 1, cents(100), "a")}
	other := read
	other.After = order(2, 2, cents(100), "a")
	for range 5 { // read again: the group's version rises to {0, 10, 0, 5}
		results(t, a, read, other)
	}
	// A change of another table; a checkpoint covers it, so the reads'
	// records are forgotten.
	customers := &pipeline.Table{ID: pipeline.TableID{Schema: "public", Table: "customers"}}
	results(t, a, pipeline.Record{Op: pipeline.OpInsert, Table: customers, Version: pipeline.Version{0, 10, 0, 2}})
	a.Checkpointed(6)
	truncate := pipeline.Record{Op: pipeline.OpTruncate, Table: orders, Version: pipeline.Version{0, 10, 0, 3}}
	out := results(t, a, truncate)
	if len(out) != 1 || out[0].Op != pipeline.OpTruncate || !(pipeline.Version{0, 10, 0, 5}).Less(out[0].Version) {
		t.Fatalf("outputs %v: want a truncate above {0, 10, 0, 5}", out)
	}
	if err := a.Close(); err != nil { // the truncate never reached a sink
		t.Fatal(err)
	}
	a = openRun(t, perCustomer, dir, true)
	defer a.Close()
	s := newSink()
	s.rows["1"] = sinkRow{v: pipeline.Version{0, 10, 0, 5}, img: []any{int64(1)}}
	s.rows["2"] = sinkRow{v: pipeline.Version{0, 10, 0, 5}, img: []any{int64(2)}}
	s.write(results(t, a, truncate))
	if got := s.live(); len(got) != 0 {
		t.Fatalf("after the replay the sink holds %v", got)
	}
}

// A kill can lose the outputs of several batches, not only the last: the
// runtime keeps batches in flight to the sinks, and a checkpoint covers
// only those durable. Killed at random with a random prefix of the
// batches in flight written, resumed from the last checkpoint (or,
// before the first, started over a generation up), the aggregate leaves
// the sink as a crash-free run does. In the failover variant half the
// resumes from a checkpoint come back on another server: a generation
// up, with that server's own positions (Version[1]), the changes known
// by their Pos and TxID (Options.Covers).
func TestAggregateSurvivesKillsWithBatchesInFlight(t *testing.T) {
	for _, failover := range []bool{false, true} {
		for seed := range uint64(*killSeeds) {
			name := fmt.Sprint(seed)
			if failover {
				name = "failover/" + name
			}
			t.Run(name, func(t *testing.T) { killsWithBatchesInFlight(t, seed, failover) })
		}
	}
}

var killSeeds = flag.Int("kill-seeds", 30, "seeds of the aggregate's replay models (TestAggregateReplayAfterCrashesConverges, TestAggregateSurvivesKillsWithBatchesInFlight)")

// onServer returns a copy of log's changes as the server of generation
// gen sends them: each server numbers its log differently (Version[1]),
// and a change's Pos (its index in the log, as a GTID names a
// transaction on every server) and TxID are the same on all.
func onServer(log []pipeline.Record, gen uint64) []pipeline.Record {
	in := slices.Clone(log)
	for i := range in {
		if !in[i].Snapshot {
			in[i].Pos, in[i].TxID = pipeline.Position(fmt.Sprintf(`{"N":%d}`, in[i].Version[1])), in[i].Version[1]
		}
		in[i].Version[0], in[i].Version[1] = gen, in[i].Version[1]+1_000_000*gen
	}
	return in
}

// coversByN is onServer's position order (Options.Covers).
func coversByN(pos, mark pipeline.Position) bool { return positionN(pos) <= positionN(mark) }

func positionN(p pipeline.Position) int {
	var v struct{ N int }
	if err := json.Unmarshal(p, &v); err != nil {
		return -1
	}
	return v.N
}

func killsWithBatchesInFlight(t *testing.T, seed uint64, failover bool) {
	log, _ := changeLog(rand.New(rand.NewPCG(seed, 1)))
	clean := run(t, rand.New(rand.NewPCG(seed, 2)), log, false, false)
	rng := rand.New(rand.NewPCG(seed, 4))
	s := newSink()
	dir := t.TempDir()
	o := perCustomer
	if failover {
		o.Covers = coversByN
	}
	a := openRun(t, o, dir, false)
	defer func() { _ = a.Close() }()
	var (
		gen        uint64 // the run's generation: up one when it starts over
		pending    [][]pipeline.Record
		ends       []int // the log position after each pending batch
		durable    uint64
		checkpoint int
		kills      int
	)
	for pos := 0; pos < len(log); {
		end := min(len(log), pos+1+rng.IntN(12))
		out, err := a.Process(context.Background(), onServer(log[pos:end], gen))
		if err != nil {
			t.Fatal(err)
		}
		pending, ends, pos = append(pending, out), append(ends, end), end
		if n := rng.IntN(len(pending) + 1); n > 0 && rng.IntN(2) == 0 {
			for _, o := range pending[:n] {
				s.write(o)
			}
			last := ends[n-1]
			pending, ends, durable = pending[n:], ends[n:], durable+uint64(n)
			if rng.IntN(2) == 0 {
				checkpoint = last
				a.Checkpointed(durable)
			}
		}
		if pos < len(log) && rng.IntN(6) == 0 {
			for _, o := range pending[:rng.IntN(len(pending)+1)] {
				s.write(o)
			}
			if err := a.Close(); err != nil {
				t.Fatal(err)
			}
			if checkpoint == 0 || failover && rng.IntN(2) == 0 {
				gen++
			}
			a = openRun(t, o, dir, checkpoint > 0)
			pending, ends, durable, pos = nil, nil, 0, checkpoint
			kills++
		}
	}
	for _, o := range pending {
		s.write(o)
	}
	if got, want := s.live(), clean.live(); !slices.Equal(got, want) {
		t.Fatalf("after %d kills:\n%v\na crash-free run:\n%v", kills, got, want)
	}
}
