package window

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/pipeline"
)

// guardedSink is a version-guarded upsert sink of the window's results:
// a record lands only above the version its key holds; a delete leaves a
// tombstone.
type guardedSink map[string]sinkRow

type sinkRow struct {
	version pipeline.Version
	values  string
	partial bool
	deleted bool
}

// barrierKey holds the truncate barrier's version.
const barrierKey = "barrier"

func (s guardedSink) write(recs []pipeline.Record) {
	for _, r := range recs {
		if r.Table != nil && r.Table.ID.Table == "revenue_late" {
			// The side output: kept by the order and its amount (a late
			// insert's, or a later change's of the same order).
			s[fmt.Sprint("late ", r.After[0], " ", r.After[2])] = sinkRow{version: r.Version}
			continue
		}
		if r.Table == nil || r.Table.ID.Table != "revenue" {
			continue
		}
		if r.Op == pipeline.OpTruncate {
			// A barrier: the rows below it are gone, and so is any
			// later write below it.
			for k, row := range s {
				if row.version.Less(r.Version) {
					s[k] = sinkRow{version: r.Version, deleted: true}
				}
			}
			s[barrierKey] = sinkRow{version: r.Version, deleted: true}
			continue
		}
		if r.Version.Less(s[barrierKey].version) {
			continue
		}
		img := r.After
		if img == nil {
			img = r.Before
		}
		key := fmt.Sprint(img[0].(pipeline.Timestamp).Micros, " ", img[1].(pipeline.Timestamp).Micros, " ", img[2])
		if have, ok := s[key]; ok && !have.version.Less(r.Version) {
			continue
		}
		row := sinkRow{version: r.Version, deleted: r.Op == pipeline.OpDelete}
		if !row.deleted {
			row.values = fmt.Sprint(img[3], " ", img[4], " ", img[5])
			row.partial = img[6].(bool)
		}
		s[key] = row
	}
}

// A pipeline of the window with early results whose daemon is killed at
// random moments — results handed to the sink but not yet durable, or
// durable but not yet settled, the state written or not since — and that
// resumes from its last checkpoint (or, without one, starts over a
// generation up) leaves the sink holding exactly the source's windows,
// none of them partial. The workload is the integration test's: orders
// inserted out of order within the bound, moved between windows and
// regions, and deleted while their windows take changes, and orders too
// late for their windows, changed again later. A failure prints its seed:
// -crash-seed replays it; -crash-trials runs longer.
//
// It runs over tumbling minutes, hopping windows (each order in three),
// sessions (which merge, split and move under the same changes, each
// result replaced deleted) and, under late: correct, tumbling minutes
// that the late orders and their later changes correct, retracted from
// their before images once the window no longer holds them.
func TestOperatorResultsSurviveCrashes(t *testing.T) {
	for i, c := range []struct {
		name   string
		spec   Spec
		policy LatePolicy
		trials int
	}{
		{"tumbling", Tumbling(time.Minute), LateSideOutput, 20},
		{"hopping", Spec{Size: time.Minute, Advance: 20 * time.Second}, LateSideOutput, 10},
		{"sessions", Session(4 * time.Second), LateSideOutput, 20},
		{"correct", Tumbling(time.Minute), LateCorrect, 10},
		// Half the restarts resume on another server: the replay comes a
		// generation up, with that server's positions, and is known by
		// the source's position order (Options.Covers).
		{"tumbling/failover", Tumbling(time.Minute), LateSideOutput, 20},
		{"sessions/failover", Session(4 * time.Second), LateSideOutput, 20},
		{"correct/failover", Tumbling(time.Minute), LateCorrect, 10},
		// The late changes go to a side output's sink, not the
		// dead-letter queue: a kill can lose them with the results.
		{"tumbling/side", Tumbling(time.Minute), LateSideOutput, 20},
		{"tumbling/side/failover", Tumbling(time.Minute), LateSideOutput, 20},
	} {
		t.Run(c.name, func(t *testing.T) {
			seed := crashSeed()
			rng := rand.New(rand.NewPCG(seed, 42+uint64(i)))
			t.Logf("seed %d", seed)
			for trial := range crashTrials(c.trials) {
				crashAndResume(t, trial, rng, c.spec, c.policy, strings.HasSuffix(c.name, "/failover"), strings.Contains(c.name, "/side"))
			}
		})
	}
}

// seedFlag replays a failed run of the crash tests; trialsFlag runs
// them longer than the suite does.
var (
	seedFlag   = flag.Uint64("crash-seed", 0, "the crash tests' random seed (0: from the clock)")
	trialsFlag = flag.Int("crash-trials", 0, "trials per crash test (0: the suite's few)")
)

func crashTrials(n int) int {
	if *trialsFlag > 0 {
		return *trialsFlag
	}
	return n
}

func crashSeed() uint64 {
	if *seedFlag != 0 {
		return *seedFlag
	}
	return uint64(time.Now().UnixNano())
}

// crashAndResume runs one trial over the windows of spec, with late
// changes handled by policy: side_output or correct; with failover, half
// the restarts from a checkpoint resume on another server; with side, the
// late changes go to a side output's sink instead of the dead-letter
// queue.
func crashAndResume(t *testing.T, trial int, rng *rand.Rand, spec Spec, policy LatePolicy, failover, side bool) {
	gap := spec.Gap
	type order struct {
		region string
		cents  int64
		at     time.Duration
	}
	src := map[int64]order{}
	var batches [][]pipeline.Record
	var ver uint64
	var clock time.Duration
	next := int64(0)
	var late []int64 // orders inserted past the lateness: the side output's, never the windows'
	regions := []string{"EU", "US", "APAC"}
	full := *ordersTable
	full.FullBefore = true // REPLICA IDENTITY FULL
	rec := func(op pipeline.Op, id int64, o order) pipeline.Record {
		ver++
		r := ord(op, id, o.region, fmt.Sprintf("%d.%02d", o.cents/100, o.cents%100), o.at, ver)
		r.Table = &full
		// One change per transaction; the position every server shares.
		r.TxID, r.Pos = ver, pipeline.Position(fmt.Sprintf(`{"n":%d}`, ver))
		if prev, ok := src[id]; ok && op == pipeline.OpUpdate {
			// The full before image (late: correct retracts from it).
			r.Before = ord(pipeline.OpDelete, id, prev.region, fmt.Sprintf("%d.%02d", prev.cents/100, prev.cents%100), prev.at, ver).Before
		}
		return r
	}
	for range 90 {
		var b []pipeline.Record
		for range 1 + rng.IntN(8) {
			clock += time.Duration(rng.IntN(3)) * time.Second
			var open []int64 // orders still open to changes: within 20 s of the clock
			for id, o := range src {
				if o.at >= clock-20*time.Second {
					open = append(open, id)
				}
			}
			slices.Sort(open)
			switch k := rng.IntN(10); {
			case k < 5 || len(open) == 0:
				next++
				o := order{regions[rng.IntN(3)], int64(rng.IntN(50000)), clock - time.Duration(rng.IntN(5))*time.Second}
				src[next] = o
				b = append(b, rec(pipeline.OpInsert, next, o))
			case k < 7:
				id := open[rng.IntN(len(open))]
				o := src[id]
				o.cents += 125
				o.at = min(max(o.at+time.Duration(rng.IntN(31)-15)*time.Second, clock-20*time.Second), clock)
				b = append(b, rec(pipeline.OpUpdate, id, o))
				src[id] = o
			case k < 8:
				id := open[rng.IntN(len(open))]
				b = append(b, rec(pipeline.OpDelete, id, src[id]))
				delete(src, id)
			case k < 9 || clock < 3*time.Minute:
				id := open[rng.IntN(len(open))]
				o := src[id]
				o.region = regions[rng.IntN(3)]
				b = append(b, rec(pipeline.OpUpdate, id, o))
				src[id] = o
			case len(late) > 0 && rng.IntN(3) == 0:
				// A late order changed again, later still: its amount,
				// or gone.
				id := late[rng.IntN(len(late))]
				o, ok := src[id]
				if !ok {
					continue
				}
				if rng.IntN(2) == 0 {
					o.cents += 250
					b = append(b, rec(pipeline.OpUpdate, id, o))
					src[id] = o
				} else {
					b = append(b, rec(pipeline.OpDelete, id, o))
					delete(src, id)
				}
			default:
				// Late: three minutes back, past every window's lateness.
				next++
				o := order{"EU", 100, clock - 3*time.Minute}
				src[next] = o
				late = append(late, next)
				b = append(b, rec(pipeline.OpInsert, next, o))
			}
		}
		batches = append(batches, b)
	}
	// An order far ahead closes every window.
	batches = append(batches, []pipeline.Record{rec(pipeline.OpInsert, -1, order{"ZZ", 0, clock + time.Hour})})

	o := revenue(t.TempDir())
	o.Spec, o.Late = spec, policy
	if policy == LateCorrect {
		o.CorrectWithin = 3 * time.Hour // longer than the run's event time
		late = nil                      // every order counts
	}
	o.IdleTimeout = 0
	if side {
		o.SideOutput = "late"
	}
	if failover {
		o.Covers = func(pos, mark pipeline.Position) bool { return positionN(pos) <= positionN(mark) }
	}
	o.Early = time.Hour // written when the test resets lastEarly
	op := openOp(t, o, false)
	defer func() { op.Close() }()
	sink := guardedSink{}
	var pending [][]pipeline.Record // handed to the sink, not yet durable
	durable := 0                    // batches of this run durable, in order
	checkpoint := 0                 // the source batch a restart resumes from
	crashes := 0
	gen := uint64(0) // the run's generation (the versions' first component)
	dead := map[int64]bool{}
	var log []string
	for i := 0; i < len(batches); i++ {
		if rng.IntN(3) == 0 {
			op.lastEarly = time.Time{}
		}
		in := slices.Clone(batches[i])
		for j := range in {
			// Each generation's server numbers its binlog differently.
			in[j].Version[0], in[j].Version[1] = gen, in[j].Version[1]+1_000_000*gen
		}
		out, err := op.Process(context.Background(), in)
		var rj *pipeline.Rejects
		if err != nil && !errors.As(err, &rj) {
			t.Fatal(err)
		}
		if rj != nil {
			for _, r := range rj.Records {
				if !strings.Contains(r.Err.Error(), "late") {
					t.Fatalf("trial %d: a change rejected: %v", trial, r.Err)
				}
				log = append(log, fmt.Sprintf("late: %s %v v%d: %v", r.Record.Op, r.Record.After, r.Record.Version[1], r.Err))
				// The runtime writes dead letters before the batch goes on
				// (Invariant 7): durable at once.
				id := r.Record.After[0].(int64)
				if !slices.Contains(late, id) {
					t.Fatalf("trial %d: order %d judged late, but it is within the lateness: %v\n%s", trial, id, r.Err, strings.Join(log, "\n"))
				}
				if r.Record.Op == pipeline.OpInsert {
					dead[id] = true
				}
			}
		}
		pending = append(pending, out)
		var changes []string
		for _, r := range in {
			img := r.After
			if img == nil {
				img = r.Before
			}
			changes = append(changes, fmt.Sprintf("%s %v %v %v %v v%d", r.Op, img[0], img[1], img[2], img[3].(pipeline.Timestamp).Time().Sub(t0), r.Version[1]))
		}
		log = append(log, fmt.Sprintf("batch %d: %v -> %v", i, changes, results(t, out)))
		// The sink makes a prefix of what it holds durable; the
		// checkpoint goroutine settles it, syncs the state and stores a
		// checkpoint covering it.
		if n := rng.IntN(len(pending) + 1); n > 0 && rng.IntN(2) == 0 {
			for _, recs := range pending[:n] {
				sink.write(recs)
			}
			pending = pending[n:]
			durable += n
			op.Settled(uint64(durable))
			if rng.IntN(2) == 0 {
				if err := op.Sync(context.Background()); err != nil {
					t.Fatal(err)
				}
				checkpoint = i + 1 - len(pending)
			}
		}
		if i < len(batches)-1 && rng.IntN(8) == 0 {
			// Killed: some of what was handed to the sink reached it.
			for _, recs := range pending[:rng.IntN(len(pending)+1)] {
				sink.write(recs)
			}
			crashes++
			log = append(log, fmt.Sprintf("crash; resume at batch %d", checkpoint))
			op.Close()
			// Without a checkpoint the run starts over (Invariant 10): the
			// state is dropped and the versions take a generation above
			// every one the sinks hold.
			if checkpoint == 0 || failover && rng.IntN(2) == 0 {
				gen++
			}
			op = openOp(t, o, checkpoint > 0)
			pending, durable = nil, 0
			i = checkpoint - 1
		}
	}
	for _, recs := range pending {
		sink.write(recs)
	}

	want := map[string]string{}
	type agg struct {
		n, sum, max int64
		end         int64 // a session's: its last order's time plus the gap
	}
	groups := map[string]*agg{}
	var live []order
	for id, o := range src {
		if !slices.Contains(late, id) {
			live = append(live, o)
		}
	}
	// Sessions: each region's orders in time order, a new session where
	// the next is a gap or more after the last.
	slices.SortFunc(live, func(a, b order) int {
		if c := strings.Compare(a.region, b.region); c != 0 {
			return c
		}
		return cmp.Compare(a.at, b.at)
	})
	var start, last time.Duration
	for i, o := range live {
		var in []Bounds
		if gap == 0 {
			// Every window of the spec's size, on multiples of its advance,
			// that holds the order's time.
			at, size, adv := t0.Add(o.at).UnixMicro(), spec.Size.Microseconds(), spec.Advance.Microseconds()
			if adv == 0 {
				adv = size
			}
			for start := at - ((at%adv)+adv)%adv; start > at-size; start -= adv {
				in = append(in, Bounds{start, start + size})
			}
		} else {
			if i == 0 || o.region != live[i-1].region || o.at >= last+gap {
				start = o.at
			}
			last = o.at
			// The session's end is known once its last order is: keyed
			// by the start until then.
			in = []Bounds{{t0.Add(start).UnixMicro(), 0}}
		}
		for _, b := range in {
			k := fmt.Sprint(b.Start, " ", b.End, " ", o.region)
			g := groups[k]
			if g == nil {
				g = &agg{}
				groups[k] = g
			}
			g.n++
			g.sum += o.cents
			g.max = max(g.max, o.cents)
			g.end = t0.Add(o.at + gap).UnixMicro()
		}
	}
	cents := func(c int64) string { return fmt.Sprintf("%d.%02d", c/100, c%100) }
	for k, g := range groups {
		if gap > 0 {
			var start int64
			var region string
			fmt.Sscanf(k, "%d 0 %s", &start, &region)
			k = fmt.Sprint(start, " ", g.end, " ", region)
		}
		want[k] = fmt.Sprint(g.n, " ", cents(g.sum), " ", cents(g.max))
	}
	// The dead-letter queue holds every late insert (sessions: an insert
	// whose session would be final; the workload's late ones are).
	var missing []int64
	for _, id := range late {
		if side {
			// Its side output row as inserted (1.00; a later change adds
			// to the amount).
			_, dead[id] = sink[fmt.Sprint("late ", id, " 1.00")]
		}
		if !dead[id] {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		t.Fatalf("trial %d (%d crashes): late inserts %v are neither dead letters nor side output rows (%d of %d are)\n%s", trial, crashes, missing,
			len(late)-len(missing), len(late), strings.Join(log, "\n"))
	}
	have := map[string]string{}
	var partial []string
	for k, r := range sink {
		if r.deleted || strings.HasSuffix(k, " ZZ") || strings.HasPrefix(k, "late ") {
			continue
		}
		have[k] = r.values
		if r.partial {
			partial = append(partial, fmt.Sprintf("%s %s v%v", k, r.values, r.version))
		}
	}
	if !maps.Equal(have, want) || len(partial) > 0 {
		var diffs []string
		for k, w := range want {
			if have[k] != w {
				diffs = append(diffs, fmt.Sprintf("%s: source %q, sink %q %+v", k, w, have[k], sink[k]))
			}
		}
		for k, h := range have {
			if _, ok := want[k]; !ok {
				diffs = append(diffs, fmt.Sprintf("%s: no source rows, sink %q %+v", k, h, sink[k]))
			}
		}
		slices.Sort(diffs)
		t.Fatalf("trial %d (%d crashes): %d windows differ, partial rows %v:\n%s\n\n%s", trial, crashes, len(diffs), partial,
			strings.Join(diffs, "\n"), strings.Join(log, "\n"))
	}
}

// positionN reads the crash model's positions, {"n":<change>}.
func positionN(p pipeline.Position) int {
	var v struct{ N int }
	if err := json.Unmarshal(p, &v); err != nil {
		return -1
	}
	return v.N
}
