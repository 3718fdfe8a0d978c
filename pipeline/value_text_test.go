package pipeline

import (
	"testing"
	"time"
)

func TestValueTextFormsRoundTrip(t *testing.T) {
	for _, tod := range []TimeOfDay{0, 1, 86399_999999, 86400_000000, 45296_000789} {
		back, err := ParseTimeOfDay(tod.String())
		if err != nil || back != tod {
			t.Errorf("ParseTimeOfDay(%s) = %d, %v", tod, back, err)
		}
	}
	for _, tz := range []TimeTZ{{0, 0}, {45296_000789, 19800}, {1, -12*3600 - 30*60}, {86400_000000, 14*3600 + 59}, {5, -59}} {
		text := FormatTimeTZ(tz)
		back, err := ParseTimeTZ(text)
		if err != nil || back != tz {
			t.Errorf("ParseTimeTZ(%s) = %+v, %v; want %+v", text, back, err, tz)
		}
	}
	if got := FormatTimeTZ(TimeTZ{45296_000789, 19800 + 7}); got != "12:34:56.000789+05:30:07" {
		t.Errorf("FormatTimeTZ = %s", got)
	}
	for _, iv := range []Interval{{}, {-14, 3, -1_500000}, {1, -1, 86400_000001}, {0, 0, -1}, {2147483647, -2147483648, 9223372036854775807}} {
		text := FormatInterval(iv)
		back, err := ParseInterval(text)
		if err != nil || back != iv {
			t.Errorf("ParseInterval(%s) = %+v, %v; want %+v", text, back, err, iv)
		}
	}
	if got := FormatInterval(Interval{-14, 3, -1_500000}); got != "P-14M3DT-1.500000S" {
		t.Errorf("FormatInterval = %s", got)
	}
	u := UUID{0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 0xff}
	if back, err := ParseUUID(u.String()); err != nil || back != u {
		t.Errorf("ParseUUID(%s) = %v, %v", u, back, err)
	}
	for _, sp := range []Special{PosInfinity, NegInfinity, NaN} {
		if back, ok := ParseSpecial(sp.String()); !ok || back != sp {
			t.Errorf("ParseSpecial(%s) = %v, %v", sp, back, ok)
		}
	}
	if _, ok := ParseSpecial("Infinity"); ok {
		t.Error("ParseSpecial accepted Infinity")
	}
}

func TestValueTextFormsRejectOtherText(t *testing.T) {
	for _, s := range []string{"", "1:02:03.000000", "12:60:00.000000", "24:00:00.000001", "12:00:00.00000x", "12:00:00", "+1:00:00.000000"} {
		if v, err := ParseTimeOfDay(s); err == nil {
			t.Errorf("ParseTimeOfDay(%q) = %v", s, v)
		}
	}
	for _, s := range []string{"12:00:00.000000", "12:00:00.000000Z", "12:00:00.000000+5:30", "12:00:00.000000*05:30", "12:00:00.000000+05:30:00:00"} {
		if v, err := ParseTimeTZ(s); err == nil {
			t.Errorf("ParseTimeTZ(%q) = %v", s, v)
		}
	}
	for _, s := range []string{"", "P1M2D", "P1M2DT3S", "P1M2DT3.5S", "PxM2DT3.000000S", "P1M2DT--3.000000S", "1M2DT3.000000S"} {
		if v, err := ParseInterval(s); err == nil {
			t.Errorf("ParseInterval(%q) = %v", s, v)
		}
	}
	for _, s := range []string{"", "deadbeef01020304050607080 90a0bff", "deadbeef-0102-0304-0506-0708090a0bf", "deadbeef0102-0304-0506-0708090a0bff0", "deadbeef-0102-0304-0506-0708090a0bfg"} {
		if v, err := ParseUUID(s); err == nil {
			t.Errorf("ParseUUID(%q) = %v", s, v)
		}
	}
}

func TestParseTimeBeforeTheCommonEra(t *testing.T) {
	for _, want := range []time.Time{
		time.Date(-43, 3, 15, 12, 0, 0, 1000, time.UTC),
		time.Date(-44, 2, 29, 0, 0, 0, 0, time.UTC),
		time.Date(0, 12, 31, 23, 59, 59, 999999000, time.UTC),
		time.Date(2024, 2, 29, 1, 2, 3, 4000, time.UTC),
	} {
		const layout = "2006-01-02T15:04:05.000000Z"
		s := want.Format(layout)
		got, err := ParseTime(layout, s)
		if err != nil || !got.Equal(want) {
			t.Errorf("ParseTime(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
}
