package eval

import (
	"math/big"
	"math/rand/v2"
	"testing"

	"github.com/sluice-cdc/sluice/pipeline"
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
			if got := Compare(pair[0], pair[1]); got != want {
				t.Fatalf("Compare(%v, %v) = %d, want %d", pair[0], pair[1], got, want)
			}
		}
		if a.Scale == 0 {
			if got := Compare(a.Unscaled.Int64(), b); got != want {
				t.Fatalf("Compare(int64 %v, %v) = %d, want %d", a.Unscaled, b, got, want)
			}
		}
	}
}
