package window

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"testing"

	"go.etcd.io/bbolt"
)

// A run that crashes at random moments — its state written through after
// every batch, then loaded back, and the changes since an older
// checkpoint replayed — emits the same final results, with the same
// versions, as a run that never stopped.
func TestStateSurvivesCrashesAndReplays(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := range 30 {
		// A log of batches: upserts, moves and deletes over 30 rows, event
		// times increasing slowly, some late within a lateness of 30 s.
		type change struct {
			in  Input
			del bool
		}
		var batches [][]change
		ver, clock := uint64(0), int64(0)
		for range 40 {
			var b []change
			for range 1 + rng.IntN(6) {
				ver++
				clock += int64(rng.IntN(4)) * sec
				tm := clock - int64(rng.IntN(25))*sec
				row := fmt.Sprint("r", rng.IntN(30))
				in := order(row, tm, fmt.Sprint("g", rng.IntN(3)), fmt.Sprint(rng.IntN(1000)), ver)
				b = append(b, change{in: in, del: rng.IntN(5) == 0})
			}
			batches = append(batches, b)
		}
		apply := func(e *Engine, b []change) []Emission {
			maxT := int64(NoWatermark)
			for _, c := range b {
				if c.del {
					e.Delete(c.in.Row, c.in.Version)
				} else {
					e.Upsert(c.in)
				}
				maxT = max(maxT, c.in.Time)
			}
			return e.Advance(maxT - 20*sec)
		}
		final := func(into map[string]string, es []Emission) {
			for _, em := range es {
				into[fmt.Sprint(em.Window, em.Group)] = fmt.Sprint(em.Values, em.Delete, em.Version)
			}
		}
		want := map[string]string{}
		ref := ordersEngine(30 * sec)
		for _, b := range batches {
			final(want, apply(ref, b))
		}
		final(want, ref.Advance(1<<62))

		db, err := bbolt.Open(filepath.Join(t.TempDir(), "w.db"), 0o600, nil)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		e := ordersEngine(30 * sec)
		checkpoint := 0 // batches before it are acknowledged: never read again
		for i := 0; i < len(batches); i++ {
			final(got, apply(e, batches[i]))
			if err := db.Update(e.Flush); err != nil {
				t.Fatal(err)
			}
			if rng.IntN(3) == 0 {
				checkpoint = i + 1 - rng.IntN(min(3, i+1)) // may trail the state
			}
			if rng.IntN(6) == 0 {
				// Crash: load the state back and replay from the checkpoint.
				err = db.View(func(tx *bbolt.Tx) error {
					var err error
					e, err = Load(tx, ref.opts)
					return err
				})
				if err != nil {
					t.Fatal(err)
				}
				i = checkpoint - 1
			}
		}
		final(got, e.Advance(1<<62))
		db.Close()
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("trial %d: results differ\n got %v\nwant %v", trial, got, want)
		}
	}
}
