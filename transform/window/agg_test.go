package window

import (
	"math/big"
	"math/rand/v2"
	"testing"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/pipeline/binform"
)

// compare orders integers and decimals by value whichever path it takes:
// the int64 one for the same scale, decimal arithmetic across scales or
// past int64.
func TestCompareOrdersNumbersByValue(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	dec := func(u int64, scale int32) pipeline.Decimal {
		return pipeline.Decimal{Unscaled: big.NewInt(u), Scale: scale}
	}
	wide := func(d pipeline.Decimal) pipeline.Decimal { // the same value past int64
		return pipeline.Decimal{Unscaled: new(big.Int).Mul(d.Unscaled, new(big.Int).Exp(big.NewInt(10), big.NewInt(20), nil)), Scale: d.Scale + 20}
	}
	for range 2000 {
		a, b := dec(rng.Int64N(2001)-1000, int32(rng.IntN(3))), dec(rng.Int64N(2001)-1000, int32(rng.IntN(3)))
		want := new(big.Rat).SetFrac(a.Unscaled, new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(a.Scale)), nil)).Cmp(
			new(big.Rat).SetFrac(b.Unscaled, new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(b.Scale)), nil)))
		for _, pair := range [][2]any{{a, b}, {wide(a), b}, {a, wide(b)}} {
			if got := compare(pair[0], pair[1]); got != want {
				t.Fatalf("compare(%v, %v) = %d, want %d", pair[0], pair[1], got, want)
			}
		}
		if a.Scale == 0 {
			if got := compare(a.Unscaled.Int64(), b); got != want {
				t.Fatalf("compare(int64 %v, %v) = %d, want %d", a.Unscaled, b, got, want)
			}
		}
	}
}

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
					if c := compare(v, want); want == nil || isMax && c > 0 || !isMax && c < 0 {
						want = v
					}
				}
				got := e.result()
				if (got == nil) != (want == nil) || got != nil && compare(got, want) != 0 {
					t.Fatalf("trial %d step %d max=%v: %v, want %v (held %v)", trial, step, isMax, got, want, held)
				}
			}
		}
	}
}
