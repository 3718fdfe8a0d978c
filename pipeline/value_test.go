package pipeline

import (
	"math"
	"math/big"
	"testing"
	"time"
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

// The plain-number fast path agrees with the general parser.
func TestParseDecimalFastPath(t *testing.T) {
	for _, s := range []string{"0", "-0", "1.", ".5", "-.25", "+7.10", "123456789012345678", "-999999999999999999.5",
		"1234567890123456789", "12.345678901234567890", "1e3", "-2.5E-2", "00012.3400"} {
		got, err := ParseDecimal(s)
		if err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		want, ok := new(big.Rat).SetString(s)
		if !ok {
			t.Fatalf("%s: not a rational", s)
		}
		r := new(big.Rat).SetFrac(got.Unscaled, new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(got.Scale)), nil))
		if r.Cmp(want) != 0 {
			t.Errorf("%s parsed as %s", s, got)
		}
	}
	for _, s := range []string{"", "-", ".", "1.2.3", "1-2", "abc"} {
		if _, err := ParseDecimal(s); err == nil {
			t.Errorf("%q parsed", s)
		}
	}
}

// CivilDays agrees with time.Date over years 0 to 9999, every month, and
// days 1 to 31 (those past a month's end count on into the next, as
// MySQL's ALLOW_INVALID_DATES stores them and time.Date normalizes them).
func TestCivilDaysAgreesWithTimeDate(t *testing.T) {
	for y := 0; y <= 9999; y++ {
		for m := 1; m <= 12; m++ {
			for d := 1; d <= 31; d++ {
				want := time.Date(y, time.Month(m), d, 0, 0, 0, 0, time.UTC).Unix() / 86400
				if got := CivilDays(int64(y), int64(m), int64(d)); got != want {
					t.Fatalf("CivilDays(%d, %d, %d) = %d, want %d", y, m, d, got, want)
				}
			}
		}
	}
}

func TestSmallIntIsBigNewInt(t *testing.T) {
	for _, n := range []int64{0, 1, -1, 42, -1234567890123, 999999999999999999, -999999999999999999, math.MaxInt64, math.MinInt64} {
		got, want := smallInt(n), big.NewInt(n)
		if got.Cmp(want) != 0 || got.String() != want.String() {
			t.Errorf("smallInt(%d) = %s", n, got)
		}
		// It is an Int like any other: arithmetic on it works.
		if sum := new(big.Int).Add(got, want); sum.Cmp(new(big.Int).Mul(want, big.NewInt(2))) != 0 {
			t.Errorf("smallInt(%d) + itself = %s", n, sum)
		}
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = ParseDecimal("-12345.67") }); n != 1 {
		t.Errorf("ParseDecimal allocates %v times, want 1 (the Int with its words)", n)
	}
}
