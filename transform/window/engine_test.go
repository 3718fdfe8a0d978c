package window

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	"github.com/sluice-cdc/sluice/pipeline"
)

const sec = int64(1e6)

func d(s string) pipeline.Decimal {
	x, err := pipeline.ParseDecimal(s)
	if err != nil {
		panic(err)
	}
	return x
}

// orders: count(), sum, min, max and avg of an amount, per region.
func ordersEngine(lateness int64) *Engine {
	return NewEngine(EngineOptions{Spec: Tumbling(time.Minute), Lateness: lateness, Aggs: []Agg{
		{Func: CountRows}, {Func: Sum}, {Func: Min}, {Func: Max}, {Func: Avg}}})
}

var v = func(n uint64) pipeline.Version { return pipeline.Version{0, n, 0, 2} }

func order(row string, t int64, region string, amount string, ver uint64) Input {
	a := d(amount)
	return Input{Row: row, Time: t, Group: []any{region}, Args: []any{true, a, a, a, a}, Version: v(ver)}
}

// show renders emissions as text: window start, group, values or
// "delete", version.
func show(es []Emission) []string {
	var out []string
	for _, e := range es {
		what := "delete"
		if !e.Delete {
			what = fmt.Sprint(e.Values)
		}
		out = append(out, fmt.Sprintf("%d %v %s v%d", e.Window.Start/sec, e.Group, what, e.Version[1]))
	}
	return out
}

func expect(t *testing.T, step string, got []Emission, want ...string) {
	t.Helper()
	expectShown(t, step, show(got), want)
}

// expectShown fails unless the emissions rendered as got are want.
func expectShown(t *testing.T, step string, got, want []string) {
	t.Helper()
	if !reflect.DeepEqual(got, want) && !(len(got) == 0 && len(want) == 0) {
		t.Fatalf("%s:\n got %q\nwant %q", step, got, want)
	}
}

func TestTumblingWithRetractionsAndLateness(t *testing.T) {
	e := ordersEngine(30 * sec)
	e.Upsert(order("o1", 10*sec, "EU", "10.00", 1))
	e.Upsert(order("o2", 20*sec, "EU", "5.50", 2))
	e.Upsert(order("o3", 70*sec, "EU", "7", 3))
	e.Upsert(order("o4", 60*sec, "EU", "3", 4)) // exactly at the first window's end: the next window
	e.Upsert(order("o5", 30*sec, "US", "1.25", 5))
	expect(t, "before the first window's end", e.Advance(59*sec))
	expect(t, "the first window closes", e.Advance(60*sec),
		"0 [EU] [2 15.50 5.50 10.00 7.75] v2",
		"0 [US] [1 1.25 1.25 1.25 1.25] v1")
	// o1 moves to the next window (its event time changed) and grows: a
	// late retraction within the lateness corrects the closed window.
	if late := e.Upsert(order("o1", 65*sec, "EU", "20", 6)); late != nil {
		t.Fatalf("within the lateness: %+v", late)
	}
	expect(t, "the correction", e.Advance(61*sec), "0 [EU] [1 5.50 5.50 5.50 5.50] v3")
	// The last EU row of the window goes: its result is deleted.
	e.Delete("o2", v(7))
	expect(t, "the group retracted to nothing", e.Advance(62*sec), "0 [EU] delete v4")
	// A row comes back to the emptied group: its versions go on.
	e.Upsert(order("o6", 50*sec, "EU", "2", 8))
	// The sum keeps the highest scale it met, as SQL does for a column.
	expect(t, "the group back", e.Advance(63*sec), "0 [EU] [1 2.00 2 2 2.00] v5")
	// Max after retracting the current maximum (o1, 20).
	e.Delete("o1", v(9))
	expect(t, "the second window closes", e.Advance(120*sec), "60 [EU] [2 10 3 7 5] v4")
	// The first window's state is gone (60 + 30 <= 120): a change for it
	// is late, by 60 s past its end.
	late := e.Upsert(order("o7", 30*sec, "US", "9", 10))
	if late == nil || !reflect.DeepEqual(late.Windows, []Bounds{{0, 60 * sec}}) || late.By != 60*sec {
		t.Fatalf("late: %+v", late)
	}
	if w, g, r := e.Open(); w != 1 || g != 1 || r != 3 {
		t.Fatalf("open: %d windows, %d groups, %d rows; want the second window with o3, o4 and o1's tombstone", w, g, r)
	}
	expect(t, "the second window expires", e.Advance(150*sec))
	if w, g, r := e.Open(); w != 0 || g != 0 || r != 0 {
		t.Fatalf("open after every window expired: %d windows, %d groups, %d rows", w, g, r)
	}
}

// Replays (a restart re-reads changes the state already holds) and
// snapshot rows older than a change already applied change nothing.
func TestOlderChangesAreIgnored(t *testing.T) {
	e := ordersEngine(0)
	e.Upsert(order("o1", 10*sec, "EU", "10", 5))
	e.Upsert(order("o1", 10*sec, "EU", "99", 5)) // the same version again
	e.Upsert(order("o1", 10*sec, "EU", "77", 3)) // an older snapshot row
	e.Upsert(order("o2", 20*sec, "EU", "1", 6))
	e.Delete("o2", v(8))
	e.Delete("o2", v(8))                        // a replayed delete
	e.Upsert(order("o2", 20*sec, "EU", "1", 6)) // its replayed insert
	expect(t, "after the replays", e.Advance(60*sec), "0 [EU] [1 10 10 10 10] v3")
}

func TestHoppingCountsAnEventInEveryWindow(t *testing.T) {
	e := NewEngine(EngineOptions{Spec: Spec{Size: 2 * time.Minute, Advance: time.Minute}, Lateness: 60 * sec,
		Aggs: []Agg{{Func: CountRows}, {Func: CountDistinct}}})
	in := func(row string, t int64, user string, ver uint64) Input {
		return Input{Row: row, Time: t, Group: []any{"all"}, Args: []any{true, user}, Version: v(ver)}
	}
	e.Upsert(in("a", 30*sec, "u1", 1))
	e.Upsert(in("b", 90*sec, "u1", 2))
	e.Upsert(in("c", 100*sec, "u2", 3))
	expect(t, "two windows close", e.Advance(120*sec),
		"-60 [all] [1 1] v1",
		"0 [all] [3 2] v3")
	e.Delete("c", v(4))
	expect(t, "a retraction in a closed and an open window", e.Advance(180*sec),
		"0 [all] [2 1] v4",
		"60 [all] [1 1] v3")
}

func TestFirstLastAndIntegerSums(t *testing.T) {
	e := NewEngine(EngineOptions{Spec: Tumbling(time.Minute), Aggs: []Agg{{Func: First}, {Func: Last}, {Func: Sum}, {Func: Sum}, {Func: Count}}})
	in := func(row string, t int64, s string, n int64, f float64, ver uint64) Input {
		return Input{Row: row, Time: t, Group: nil, Args: []any{s, s, n, f, nilIf(s)}, Version: v(ver)}
	}
	e.Upsert(in("a", 20*sec, "mid", 9223372036854775807, 0.1, 1))
	e.Upsert(in("b", 10*sec, "", 1, 0.2, 2))
	e.Upsert(in("c", 50*sec, "end", 0, 0.3, 3))
	e.Delete("c", v(4)) // the last one retracted: the one before is last again
	got := e.Advance(60 * sec)
	// The integer sum is an exact decimal of scale 0 (past int64 here);
	// the float sum is exact, then the nearest float (0.1 + 0.2 is 0.3
	// here).
	want := []any{"", "mid", d("9223372036854775808"), 0.30000000000000004, int64(1)}
	if len(got) != 1 || !reflect.DeepEqual(got[0].Values[:2], want[:2]) || !got[0].Values[2].(pipeline.Decimal).Equal(want[2].(pipeline.Decimal)) ||
		got[0].Values[3] != 0.3 || got[0].Values[4] != int64(1) {
		t.Fatalf("got %v", show(got))
	}
}

func nilIf(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// Property: any order of the changes in which no change is later than the
// out-of-orderness bound (each arrives before the watermark, max event
// time seen minus the bound, passes its time) gives the same results.
func TestAnyOrderWithinTheBoundGivesTheSameResults(t *testing.T) {
	const bound = 20 * sec
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 200 {
		type change struct {
			in  Input
			del bool
		}
		var log []change
		ver := uint64(0)
		for row := range 40 {
			// A row's changes share its event time (moves between windows
			// are TestTumblingWithRetractionsAndLateness's).
			tm := int64(rng.IntN(600)) * sec
			n := 1 + rng.IntN(3)
			for k := range n {
				ver++
				in := order(fmt.Sprint("r", row), tm, fmt.Sprint("g", rng.IntN(3)), fmt.Sprintf("%d.%02d", rng.IntN(100), rng.IntN(100)), ver)
				log = append(log, change{in: in, del: k == n-1 && rng.IntN(4) == 0})
			}
		}
		run := func(order []change) map[string][]string {
			e := ordersEngine(0)
			final := map[string][]string{}
			maxSeen := int64(NoWatermark)
			for _, c := range order {
				if c.del {
					e.Delete(c.in.Row, c.in.Version)
				} else if late := e.Upsert(c.in); late != nil {
					t.Fatalf("trial %d: a change within the bound was late: %+v", trial, late)
				}
				maxSeen = max(maxSeen, c.in.Time)
				for _, em := range e.Advance(maxSeen - bound) {
					final[fmt.Sprint(em.Window.Start, em.Group)] = show([]Emission{em})
				}
			}
			for _, em := range e.Advance(1 << 62) {
				final[fmt.Sprint(em.Window.Start, em.Group)] = show([]Emission{em})
			}
			return final
		}
		// In time order (each row's changes in their order), then moved
		// by random swaps of neighbours from different rows, each kept
		// only when no change arrives after the watermark (the highest
		// event time before it, minus the bound) passed its time.
		slices.SortStableFunc(log, func(a, b change) int { return cmp.Compare(a.in.Time, b.in.Time) })
		want := run(log)
		shuffled := slices.Clone(log)
		within := func(cs []change) bool {
			seen := int64(NoWatermark)
			for _, c := range cs {
				if seen != NoWatermark && c.in.Time < seen-bound {
					return false
				}
				seen = max(seen, c.in.Time)
			}
			return true
		}
		moved := 0
		for range 20 * len(shuffled) {
			i := rng.IntN(len(shuffled) - 1)
			if shuffled[i].in.Row == shuffled[i+1].in.Row {
				continue
			}
			shuffled[i], shuffled[i+1] = shuffled[i+1], shuffled[i]
			if within(shuffled) {
				moved++
			} else {
				shuffled[i], shuffled[i+1] = shuffled[i+1], shuffled[i]
			}
		}
		if moved == 0 {
			t.Fatalf("trial %d: nothing moved", trial)
		}
		if got := run(shuffled); !reflect.DeepEqual(got, want) {
			t.Fatalf("trial %d: results differ\n got %v\nwant %v", trial, got, want)
		}
	}
}

// showEarly renders emissions as show does, with "partial" or "final"
// and the version's final word.
func showEarly(es []Emission) []string {
	out := show(es)
	for i, e := range es {
		kind := "final"
		if e.Partial {
			kind = "partial"
		}
		out[i] += fmt.Sprintf(".%d %s", e.Version[2], kind)
	}
	return out
}

func TestEarlyResultsArePartialThenFinal(t *testing.T) {
	e := ordersEngine(0)
	check := func(step string, got []Emission, want ...string) {
		t.Helper()
		expectShown(t, step, showEarly(got), want)
	}
	e.Upsert(order("o1", 10*sec, "EU", "10", 1))
	e.Upsert(order("o2", 30*sec, "US", "1", 2))
	check("a partial result per group", e.Early(), "0 [EU] [1 10 10 10 10] v1.0 partial", "0 [US] [1 1 1 1 1] v1.0 partial")
	check("nothing changed since", e.Early())
	e.Upsert(order("o3", 20*sec, "EU", "5", 3))
	e.Delete("o2", v(4))
	check("a grown group, an emptied one", e.Early(), "0 [EU] [2 15 5 10 7.5] v2.0 partial", "0 [US] delete v2.0 final")
	// The close writes the final result of the same changes above the
	// partial one; the emptied group, deleted already, writes nothing.
	check("the close", e.Advance(60*sec), "0 [EU] [2 15 5 10 7.5] v2.1 final")
	check("a closed window gets no partial result", e.Early())
}

// late: correct. Past the lateness a window keeps its groups' aggregates
// (not its rows) for Retain: a late order adds to them, a row no longer
// held is retracted from its before image, a snapshot row is late, and
// past the retention everything is.
func TestRetainedWindowsTakeCorrections(t *testing.T) {
	opts := EngineOptions{Spec: Tumbling(time.Minute), Retain: 600 * sec, Aggs: []Agg{
		{Func: CountRows}, {Func: Sum}, {Func: Min}, {Func: Max}, {Func: Avg}}}
	e := NewEngine(opts)
	e.Upsert(order("o1", 10*sec, "EU", "10", 1))
	e.Upsert(order("o2", 20*sec, "EU", "5", 2))
	e.Upsert(order("o9", 70*sec, "EU", "1", 3)) // holds the next window open
	expect(t, "the close", e.Advance(60*sec), "0 [EU] [2 15 5 10 7.5] v2")
	if w, g, r := e.Open(); w != 2 || g != 2 || r != 1 {
		t.Fatalf("after the close (lateness 0): %d windows, %d groups, %d rows; want the retained window and the next, o9 alone held", w, g, r)
	}
	late := e.Upsert(order("o3", 30*sec, "EU", "15", 4))
	if late == nil || len(late.Windows) != 0 || !reflect.DeepEqual(late.Corrected, []Bounds{{0, 60 * sec}}) {
		t.Fatalf("a late order within the retention: %+v", late)
	}
	expect(t, "corrected", e.Advance(61*sec), "0 [EU] [3 30 5 15 10] v3")

	// Through the state file: the retained aggregates come back as they were.
	db, err := bbolt.Open(filepath.Join(t.TempDir(), "w.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(e.Flush); err != nil {
		t.Fatal(err)
	}
	if err := db.View(func(tx *bbolt.Tx) error { e, err = Load(tx, opts); return err }); err != nil {
		t.Fatal(err)
	}
	// o1 is not held: its delete is retracted from its before image; the
	// maximum (o3, not held either) likewise, the next one showing.
	e.RetractPrior(order("o1", 10*sec, "EU", "10", 1), v(5))
	e.RetractPrior(order("o3", 30*sec, "EU", "15", 4), v(6))
	expect(t, "retracted", e.Advance(62*sec), "0 [EU] [1 5 5 5 5] v5")
	// A snapshot row may be counted already: late.
	snap := order("o4", 40*sec, "EU", "7", 7)
	snap.Strict = true
	if late := e.Upsert(snap); late == nil || !reflect.DeepEqual(late.Windows, []Bounds{{0, 60 * sec}}) {
		t.Fatalf("a snapshot row past the lateness: %+v", late)
	}
	// Past the retention (60 + 600 s) the window is gone.
	e.Advance(660 * sec)
	if late := e.Upsert(order("o5", 40*sec, "EU", "7", 8)); late == nil || len(late.Corrected) != 0 {
		t.Fatalf("past the retention: %+v", late)
	}
	if w, _, _ := e.Open(); w != 1 {
		t.Fatalf("%d windows after the retention; want the second, retained", w)
	}
}
