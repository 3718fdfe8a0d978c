package pipeline

import (
	"math/big"
	"testing"
)

func TestDecimalString(t *testing.T) {
	for _, c := range []struct {
		d    Decimal
		want string
	}{
		{Decimal{Unscaled: big.NewInt(1250), Scale: 2}, "12.50"},
		{Decimal{Unscaled: big.NewInt(-5), Scale: 3}, "-0.005"},
		{Decimal{Unscaled: big.NewInt(12), Scale: -2}, "1200"},
		{Decimal{Unscaled: big.NewInt(-12), Scale: -1}, "-120"},
		{Decimal{Unscaled: big.NewInt(0), Scale: -3}, "0"},
		{Decimal{}, "0"},
		{Decimal{Special: NaN}, NaN.String()},
	} {
		if got := c.d.String(); got != c.want {
			t.Errorf("%+v: %q, want %q", c.d, got, c.want)
		}
	}
}
