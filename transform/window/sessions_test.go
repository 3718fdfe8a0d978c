package window

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/pipeline"
)

// sessionsEngine: count(), sum, min, max and avg of an amount per region,
// sessions closed by a 10 s gap.
func sessionsEngine(lateness int64) *Sessions {
	return NewSessions(EngineOptions{Spec: Session(10 * time.Second), Lateness: lateness, Aggs: []Agg{
		{Func: CountRows}, {Func: Sum}, {Func: Min}, {Func: Max}, {Func: Avg}}})
}

// showSessions renders emissions with both bounds: [start,end) group
// values-or-delete version.
func showSessions(es []Emission) []string {
	var out []string
	for _, e := range es {
		what := "delete"
		if !e.Delete {
			what = fmt.Sprint(e.Values)
		}
		out = append(out, fmt.Sprintf("[%d,%d) %v %s v%d", e.Window.Start/sec, e.Window.End/sec, e.Group, what, e.Version[1]))
	}
	return out
}

func expectSessions(t *testing.T, step string, got []Emission, want ...string) {
	t.Helper()
	expectShown(t, step, showSessions(got), want)
}

func TestSessionsCloseMergeAndSplit(t *testing.T) {
	s := sessionsEngine(100 * sec)
	s.Upsert(order("a", 0, "EU", "1", 1))
	s.Upsert(order("b", 5*sec, "EU", "2", 2))
	s.Upsert(order("c", 14*sec, "EU", "3", 3)) // less than 10 s after b: the session ends at 24
	s.Upsert(order("d", 30*sec, "EU", "4", 4)) // past 24: the next session
	s.Upsert(order("e", 1*sec, "US", "9", 5))
	expectSessions(t, "nothing ends before 11", s.Advance(10*sec))
	expectSessions(t, "US closes", s.Advance(11*sec), "[1,11) [US] [1 9 9 9 9] v1")
	expectSessions(t, "the first EU session closes", s.Advance(24*sec), "[0,24) [EU] [3 6 1 3 2] v4")
	expectSessions(t, "the second", s.Advance(40*sec), "[30,40) [EU] [1 4 4 4 4] v4")
	// A late event at 22 (within the lateness) bridges the two closed
	// sessions: both their rows go, the merged session is written.
	if late := s.Upsert(order("f", 22*sec, "EU", "5", 6)); late != nil {
		t.Fatalf("within the lateness: %+v", late)
	}
	expectSessions(t, "merged", s.Advance(41*sec),
		"[0,40) [EU] [5 15 1 5 3] v5",
		"[0,24) [EU] delete v5",
		"[30,40) [EU] delete v5")
	// Retracting it splits them again, above the deletes' versions.
	s.Delete("f", v(7))
	expectSessions(t, "split", s.Advance(42*sec),
		"[0,24) [EU] [3 6 1 3 2] v6",
		"[30,40) [EU] [1 4 4 4 4] v6",
		"[0,40) [EU] delete v6")
	// Min after retracting the current minimum (a moves away), and an
	// update that moves a row into the second session, growing it into
	// the open.
	s.Upsert(order("c", 14*sec, "EU", "0.5", 8))
	s.Upsert(order("a", 39*sec, "EU", "1", 9))
	expectSessions(t, "the first shrinks; the second is open again", s.Advance(48*sec),
		"[5,24) [EU] [2 2.5 0.5 2 1.25] v10",
		"[0,24) [EU] delete v10",
		"[30,40) [EU] delete v10")
	expectSessions(t, "the grown session closes", s.Advance(49*sec), "[30,49) [EU] [2 5 1 4 2.5] v10")
}

func TestSessionsLateBeyondTheLateness(t *testing.T) {
	s := sessionsEngine(5 * sec)
	s.Upsert(order("a", 0, "EU", "1", 1))
	s.Upsert(order("b", 18*sec, "EU", "2", 2))
	expectSessions(t, "the first session closes", s.Advance(10*sec), "[0,10) [EU] [1 1 1 1 1] v2")
	// At 15 the first session is final (10 + 5 <= 15). An event at 9
	// would open [9,19), still open, but it would join the final session:
	// late. An event at 10 joins b's session (18 < 10 + 10): on time.
	expectSessions(t, "final", s.Advance(15*sec))
	late := s.Upsert(order("c", 9*sec, "EU", "3", 3))
	if late == nil || late.Windows[0] != (Bounds{9 * sec, 19 * sec}) || late.By != 0 {
		t.Fatalf("an event joining a final session: %+v", late)
	}
	if late := s.Upsert(order("d", 10*sec, "EU", "4", 4)); late != nil {
		t.Fatalf("an event after the final session: %+v", late)
	}
	// Retracting a's row, in the final session, changes nothing written.
	s.Delete("a", v(5))
	expectSessions(t, "d and b form one session", s.Advance(30*sec), "[10,28) [EU] [2 6 2 4 3] v3")
	late = s.Upsert(order("e", 1*sec, "EU", "1", 6))
	if late == nil || late.By != 19*sec {
		t.Fatalf("an event whose own session is final: %+v", late)
	}
	if w, g, r := s.Open(); w != 1 || g != 1 || r != 2 {
		t.Fatalf("held: %d results, %d groups, %d rows; want [10,28) with b and d", w, g, r)
	}
	s.Advance(100 * sec)
	if w, g, r := s.Open(); w != 0 || g != 0 || r != 0 {
		t.Fatalf("held after everything is final: %d results, %d groups, %d rows", w, g, r)
	}
}

// Property: any order of the changes within the out-of-orderness bound
// gives the same final sessions, with the same values.
func TestSessionsAnyOrderWithinTheBound(t *testing.T) {
	const bound = 20 * sec
	rng := rand.New(rand.NewPCG(5, 6))
	for trial := range 200 {
		var log []Input
		for row := range 40 {
			log = append(log, order(fmt.Sprint("r", row), int64(rng.IntN(400))*sec, fmt.Sprint("g", rng.IntN(3)),
				fmt.Sprint(rng.IntN(100)), uint64(row+1)))
		}
		run := func(ins []Input) map[string]string {
			s := sessionsEngine(0)
			final := map[string]string{}
			seen := int64(NoWatermark)
			keep := func(es []Emission) {
				for _, e := range es {
					k := fmt.Sprint(e.Window, e.Group)
					if e.Delete {
						delete(final, k)
					} else {
						final[k] = fmt.Sprint(e.Values)
					}
				}
			}
			for _, in := range ins {
				if late := s.Upsert(in); late != nil {
					t.Fatalf("trial %d: within the bound but late: %+v", trial, late)
				}
				seen = max(seen, in.Time)
				keep(s.Advance(seen - bound))
			}
			keep(s.Advance(1 << 62))
			return final
		}
		slices.SortStableFunc(log, func(a, b Input) int { return cmp.Compare(a.Time, b.Time) })
		want := run(log)
		shuffled := slices.Clone(log)
		for range 20 * len(shuffled) {
			i := rng.IntN(len(shuffled) - 1)
			shuffled[i], shuffled[i+1] = shuffled[i+1], shuffled[i]
			seen, ok := int64(NoWatermark), true
			for _, in := range shuffled {
				// An event must come before the watermark passes its time.
				ok = ok && (seen == NoWatermark || in.Time >= seen-bound)
				seen = max(seen, in.Time)
			}
			if !ok {
				shuffled[i], shuffled[i+1] = shuffled[i+1], shuffled[i]
			}
		}
		if got := run(shuffled); !reflect.DeepEqual(got, want) {
			t.Fatalf("trial %d: results differ\n got %v\nwant %v", trial, got, want)
		}
	}
}

func TestSessionsEarlyResults(t *testing.T) {
	s := sessionsEngine(0)
	check := func(step string, got []Emission, want ...string) {
		t.Helper()
		g := showSessions(got)
		for i, e := range got {
			g[i] += fmt.Sprintf(".%d", e.Version[2])
			if e.Partial {
				g[i] += " partial"
			}
		}
		expectShown(t, step, g, want)
	}
	s.Upsert(order("a", 0, "EU", "1", 1))
	check("an open session, partial", s.Early(), "[0,10) [EU] [1 1 1 1 1] v1.0 partial")
	// The session grows: its partial row under the old bounds goes at
	// once, the grown one is written by the next Early.
	s.Upsert(order("b", 5*sec, "EU", "2", 2))
	check("the old bounds deleted", s.Advance(1*sec), "[0,10) [EU] delete v2.1")
	check("the grown session", s.Early(), "[0,15) [EU] [2 3 1 2 1.5] v2.0 partial")
	check("the close: the same rows, final", s.Advance(15*sec), "[0,15) [EU] [2 3 1 2 1.5] v2.1")
	check("nothing open", s.Early())
}

// A session's stamp changes when its rows change alike: two rows updated
// by one later transaction (their versions moved by the same amount), the
// case a sum of per-entry hashes let cancel out.
func TestSessionStampsTellChangesApart(t *testing.T) {
	at := int64(1767269155000000)
	before := []sentry{{t: at, row: "int64:192", ver: pipeline.Version{0, 355, 0, 2}}, {t: at, row: "int64:193", ver: pipeline.Version{0, 356, 0, 2}}}
	after := []sentry{{t: at, row: "int64:192", ver: pipeline.Version{0, 371, 0, 2}}, {t: at, row: "int64:193", ver: pipeline.Version{0, 372, 0, 2}}}
	if stampOf(before) == stampOf(after) {
		t.Fatal("two rows updated alike leave the session's stamp as it was")
	}
	// Every pair of sessions of up to four rows, moved alike by one of
	// many deltas, is told apart.
	rng := rand.New(rand.NewPCG(5, 6))
	seen := map[uint64]string{}
	for range 50_000 {
		n := 1 + rng.IntN(4)
		es := make([]sentry, n)
		for i := range es {
			es[i] = sentry{t: at + int64(i)*1e6, row: fmt.Sprintf("int64:%d", rng.IntN(1000)), ver: pipeline.Version{0, rng.Uint64N(1 << 20), 0, 2 + rng.Uint64N(4)}}
		}
		key := fmt.Sprint(es)
		st := stampOf(es)
		if k, ok := seen[st]; ok && k != key {
			t.Fatalf("sessions %s and %s share stamp %d", k, key, st)
		}
		seen[st] = key
	}
}
