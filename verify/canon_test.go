package verify

import (
	"fmt"
	"math/big"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/pipeline"
)

// The fast paths of Canon render exactly what the generic form did.
func TestCanonFastPathsMatchTheGenericForm(t *testing.T) {
	for _, v := range []any{int64(-42), int32(7), int16(-3), uint64(1 << 63), uint32(9), true, false,
		time.Date(2026, 12, 3, 1, 2, 3, 456789000, time.UTC), time.Date(1999, 1, 1, 0, 0, 0, 0, time.FixedZone("x", 3600))} {
		if got, want := Canon(v), fmt.Sprintf("%T:%v", v, v); got != want {
			t.Errorf("Canon(%#v) = %q, want %q", v, got, want)
		}
	}
	for _, s := range []string{"", "a\"b", "é\x00\n"} {
		if got, want := Canon(s), fmt.Sprintf("string:%q", s); got != want {
			t.Errorf("Canon(%q) = %q, want %q", s, got, want)
		}
	}
}

// The int64 fast path renders as the big one does.
func TestCanonSmallDecimalMatchesBig(t *testing.T) {
	for _, u := range []int64{0, 1, -1, 10, -10, 100, 123450, -123450, 5, -5, 1 << 62, -1 << 63, 1<<63 - 1, 1000000} {
		for scale := int32(-3); scale <= 22; scale++ {
			d := pipeline.Decimal{Unscaled: big.NewInt(u), Scale: scale}
			// The big path: the same value with an unscaled part past int64.
			wide := pipeline.Decimal{Unscaled: new(big.Int).Mul(big.NewInt(u), new(big.Int).Exp(big.NewInt(10), big.NewInt(20), nil)), Scale: scale + 20}
			if got, want := canonSmallDecimal(d), canonDecimal(wide); got != want {
				t.Fatalf("%d scale %d: fast %q, big %q", u, scale, got, want)
			}
		}
	}
}

// AppendCanon appends exactly Canon's text, fast paths and generic form
// alike.
func TestAppendCanonIsCanon(t *testing.T) {
	vals := []any{nil, int64(-42), int32(7), int16(-3), "a\"b", "", true, 1.5, []byte{1, 2},
		pipeline.Decimal{Unscaled: big.NewInt(-12300), Scale: 2}, pipeline.Decimal{Unscaled: nil, Scale: 3},
		pipeline.Decimal{Unscaled: new(big.Int).Lsh(big.NewInt(1), 80), Scale: 4}, pipeline.Decimal{Special: pipeline.NaN},
		pipeline.JSON(`{"b":1, "a":2}`), []any{int64(1), "x"}}
	for _, v := range vals {
		if got, want := string(AppendCanon([]byte("prefix|"), v)), "prefix|"+Canon(v); got != want {
			t.Errorf("AppendCanon(%#v) = %q, want %q", v, got, want)
		}
	}
}
