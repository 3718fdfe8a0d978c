package binform

import (
	"bytes"
	"errors"
	"math"
	"math/big"
	"reflect"
	"testing"

	"github.com/sluice-cdc/sluice/pipeline"
)

// Every value of the record model comes back as the same Go value.
func TestRoundTrip(t *testing.T) {
	huge, _ := new(big.Int).SetString("-123456789012345678901234567890", 10)
	vals := []any{nil, true, false, int64(math.MinInt64), uint64(math.MaxUint64), math.Inf(-1), math.Copysign(0, -1), "tä\x00xt", []byte{0, 1, 2},
		pipeline.JSON(`{"a":[1]}`), pipeline.Decimal{Unscaled: huge, Scale: 7}, pipeline.Decimal{Special: pipeline.NaN},
		pipeline.UUID{1, 2, 3}, pipeline.Date{Days: -719528}, pipeline.Date{Special: pipeline.PosInfinity}, pipeline.TimeOfDay(86400e6),
		pipeline.TimeTZ{Micros: 5, OffsetSec: -3600}, pipeline.Timestamp{Micros: -1}, pipeline.Interval{Months: -14, Days: 3, Micros: -1500000},
		[]any{int64(1), nil, []any{"x"}}, pipeline.UnchangedValue}
	var b []byte
	for _, v := range vals {
		var err error
		if b, err = Append(b, v); err != nil {
			t.Fatal(err)
		}
	}
	r := NewReader(b)
	for i, want := range vals {
		got := r.Value()
		if f, ok := want.(float64); ok && f == 0 && !math.Signbit(got.(float64)) {
			t.Errorf("value %d: -0 lost its sign", i)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("value %d: got %#v, want %#v", i, got, want)
		}
	}
	if r.Err() != nil || r.Len() != 0 {
		t.Fatalf("after reading: %v, %d bytes left", r.Err(), r.Len())
	}
	if _, err := Append(nil, struct{}{}); err == nil {
		t.Error("a Go type outside the record model was taken")
	}
	r = NewReader(b[:len(b)-3])
	for range vals {
		r.Value()
	}
	if !errors.Is(r.Err(), ErrCorrupt) {
		t.Errorf("truncated bytes: %v", r.Err())
	}
}

// A decimal's magnitude is written as big.Int.Bytes gives it, for values
// of one word and of several, positive and negative.
func TestDecimalMagnitudeIsBigEndianBytes(t *testing.T) {
	for _, s := range []string{"0", "1", "-1", "255", "256", "-65535", "9223372036854775807", "-9223372036854775808",
		"18446744073709551615", "18446744073709551616", "-340282366920938463463374607431768211457", "123456789012345678901234567890"} {
		u, _ := new(big.Int).SetString(s, 10)
		got := appendMagnitude(nil, u)
		want := AppendString(nil, string(u.Bytes()))
		if !bytes.Equal(got, want) {
			t.Errorf("%s: %x, want %x", s, got, want)
		}
	}
	if got := appendMagnitude(nil, nil); !bytes.Equal(got, AppendString(nil, "")) {
		t.Errorf("nil: %x", got)
	}
}
