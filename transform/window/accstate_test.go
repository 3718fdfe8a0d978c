package window

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/sluice-cdc/sluice/pipeline/binform"
)

// Every aggregate's state, written and read back, gives the same result
// and retracts as the original does.
func TestAggregateStateRoundTrips(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for _, f := range []Func{CountRows, Count, Sum, Avg, Min, Max, CountDistinct, First, Last} {
		for trial := range 20 {
			a := newAcc(f)
			var added []Input
			for i := range 1 + rng.IntN(20) {
				var x any = d(fmt.Sprintf("%d.%02d", rng.IntN(50), rng.IntN(100)))
				if rng.IntN(6) == 0 {
					x = nil
				}
				in := Input{Time: int64(rng.IntN(60)) * sec, Args: []any{x}, Version: v(uint64(i + 1))}
				a.add(x, in.Time, in.Version)
				added = append(added, in)
			}
			b, err := appendAcc(nil, a)
			if err != nil {
				t.Fatal(err)
			}
			back := newAcc(f)
			if err := readAcc(binform.NewReader(b), back); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if got, want := fmt.Sprint(back.result()), fmt.Sprint(a.result()); got != want {
				t.Fatalf("%s trial %d: read back %s, written %s", f, trial, got, want)
			}
			// Retracting the same rows from both keeps them equal.
			for _, in := range added[:len(added)/2] {
				a.remove(in.Args[0], in.Time, in.Version)
				back.remove(in.Args[0], in.Time, in.Version)
			}
			if got, want := fmt.Sprint(back.result()), fmt.Sprint(a.result()); got != want {
				t.Fatalf("%s trial %d: after retractions %s, want %s", f, trial, got, want)
			}
		}
	}
}
