package window

import (
	"math/big"
	"math/rand/v2"
	"testing"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/pipeline/binform"
	"github.com/sluice-cdc/sluice/transform/eval"
)

// min and max follow their multiset through adds and retractions, with
// values counted by integer (one scale of decimals) and by text (other
// scales, other kinds, past int64) mixed, and through a store and load of
// their state.
func TestExtremesFollowTheirMultiset(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	huge := new(big.Int).Lsh(big.NewInt(1), 70)
	pool := []any{int64(-5), int64(0), int64(12), int64(7)}
	for _, u := range []int64{-150, 0, 5, 125, 999, 1000} {
		pool = append(pool, pipeline.Decimal{Unscaled: big.NewInt(u), Scale: 2}, pipeline.Decimal{Unscaled: big.NewInt(u / 10), Scale: 1})
	}
	pool = append(pool, pipeline.Decimal{Unscaled: huge, Scale: 2}, pipeline.Decimal{Unscaled: new(big.Int).Neg(huge), Scale: 2})
	for trial := range 200 {
		for _, isMax := range []bool{false, true} {
			e := &extreme{max: isMax}
			var held []any
			for step := range 60 {
				if len(held) > 0 && rng.IntN(3) == 0 {
					i := rng.IntN(len(held))
					e.remove(held[i], 0, pipeline.Version{})
					held = append(held[:i], held[i+1:]...)
				} else {
					v := pool[rng.IntN(len(pool))]
					if trial%2 == 0 { // integers and decimals apart: a column has one kind
						for _, ok := v.(int64); ok; _, ok = v.(int64) {
							v = pool[rng.IntN(len(pool))]
						}
					}
					e.add(v, 0, pipeline.Version{})
					held = append(held, v)
				}
				if step%20 == 19 { // stored and loaded, as a retained window's group
					b, err := appendAcc(nil, e)
					if err != nil {
						t.Fatal(err)
					}
					loaded := &extreme{max: isMax}
					if err := readAcc(binform.NewReader(b), loaded); err != nil {
						t.Fatal(err)
					}
					e = loaded
				}
				var want any
				for _, v := range held {
					if c := eval.Compare(v, want); want == nil || isMax && c > 0 || !isMax && c < 0 {
						want = v
					}
				}
				got := e.result()
				if (got == nil) != (want == nil) || got != nil && eval.Compare(got, want) != 0 {
					t.Fatalf("trial %d step %d max=%v: %v, want %v (held %v)", trial, step, isMax, got, want, held)
				}
			}
		}
	}
}
