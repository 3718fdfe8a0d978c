package pipeline

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The text forms below are the ones sinks that store values as text (the
// Redis, search and Bleve sinks) write and read back; each Parse function
// accepts exactly what its Format (or String) function writes.

// ParseSpecial reads Special.String's forms: infinity, -infinity, NaN.
func ParseSpecial(s string) (Special, bool) {
	switch s {
	case "infinity":
		return PosInfinity, true
	case "-infinity":
		return NegInfinity, true
	case "NaN":
		return NaN, true
	}
	return Finite, false
}

// ParseUUID reads UUID.String's 8-4-4-4-12 hex form.
func ParseUUID(s string) (UUID, error) {
	var u UUID
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return u, fmt.Errorf("uuid %q: want 8-4-4-4-12 hex digits", s)
	}
	h := s[:8] + s[9:13] + s[14:18] + s[19:23] + s[24:]
	for i := range u {
		n, err := strconv.ParseUint(h[2*i:2*i+2], 16, 8)
		if err != nil {
			return u, fmt.Errorf("uuid %q: want 8-4-4-4-12 hex digits", s)
		}
		u[i] = byte(n)
	}
	return u, nil
}

// ParseTimeOfDay reads TimeOfDay.String's HH:MM:SS.ffffff (24:00:00.000000
// allowed).
func ParseTimeOfDay(s string) (TimeOfDay, error) {
	bad := fmt.Errorf("time of day %q: want HH:MM:SS.ffffff", s)
	if len(s) != 15 || s[2] != ':' || s[5] != ':' || s[8] != '.' {
		return 0, bad
	}
	var f [4]int64
	for i, part := range [4]string{s[0:2], s[3:5], s[6:8], s[9:15]} {
		n, err := strconv.ParseUint(part, 10, 32)
		if err != nil {
			return 0, bad
		}
		f[i] = int64(n)
	}
	us := f[0]*3600e6 + f[1]*60e6 + f[2]*1e6 + f[3]
	if f[1] > 59 || f[2] > 59 || us > 24*3600e6 {
		return 0, bad
	}
	return TimeOfDay(us), nil
}

// FormatOffset writes a UTC offset in seconds as ±HH:MM, with :SS appended
// when the seconds are not zero.
func FormatOffset(sec int32) string {
	sign := byte('+')
	if sec < 0 {
		sign, sec = '-', -sec
	}
	s := fmt.Sprintf("%c%02d:%02d", sign, sec/3600, sec/60%60)
	if sec%60 != 0 {
		s += fmt.Sprintf(":%02d", sec%60)
	}
	return s
}

// FormatTimeTZ writes HH:MM:SS.ffffff±HH:MM[:SS].
func FormatTimeTZ(t TimeTZ) string { return TimeOfDay(t.Micros).String() + FormatOffset(t.OffsetSec) }

// ParseTimeTZ reads FormatTimeTZ's form.
func ParseTimeTZ(s string) (TimeTZ, error) {
	bad := fmt.Errorf("time with zone %q: want HH:MM:SS.ffffff±HH:MM[:SS]", s)
	if len(s) < 21 {
		return TimeTZ{}, bad
	}
	us, err := ParseTimeOfDay(s[:15])
	if err != nil {
		return TimeTZ{}, err
	}
	var sign int32
	switch s[15] {
	case '+':
		sign = 1
	case '-':
		sign = -1
	default:
		return TimeTZ{}, bad
	}
	parts := strings.Split(s[16:], ":")
	if len(parts) > 3 {
		return TimeTZ{}, bad
	}
	var off int32
	for i, part := range parts {
		n, err := strconv.ParseUint(part, 10, 8)
		if err != nil || len(part) != 2 {
			return TimeTZ{}, bad
		}
		off += int32(n) * [3]int32{3600, 60, 1}[i]
	}
	return TimeTZ{Micros: int64(us), OffsetSec: sign * off}, nil
}

// FormatInterval writes P<months>M<days>DT<seconds>S, the seconds with six
// decimals: P-14M3DT-1.500000S.
func FormatInterval(i Interval) string {
	us, sign := i.Micros, ""
	if us < 0 {
		sign, us = "-", -us
	}
	return fmt.Sprintf("P%dM%dDT%s%d.%06dS", i.Months, i.Days, sign, us/1e6, us%1e6)
}

// ParseInterval reads FormatInterval's form.
func ParseInterval(s string) (Interval, error) {
	bad := fmt.Errorf("interval %q: want P<months>M<days>DT<seconds>S", s)
	if !strings.HasPrefix(s, "P") || !strings.HasSuffix(s, "S") {
		return Interval{}, bad
	}
	body := s[1 : len(s)-1]
	mi := strings.IndexByte(body, 'M')
	di := strings.Index(body, "DT")
	if mi < 0 || di < mi {
		return Interval{}, bad
	}
	months, err1 := strconv.ParseInt(body[:mi], 10, 32)
	days, err2 := strconv.ParseInt(body[mi+1:di], 10, 32)
	secs, neg := strings.CutPrefix(body[di+2:], "-")
	whole, frac, _ := strings.Cut(secs, ".")
	w, err3 := strconv.ParseUint(whole, 10, 63)
	f, err4 := strconv.ParseUint(frac, 10, 32)
	if err := errors.Join(err1, err2, err3, err4); err != nil || len(frac) != 6 {
		return Interval{}, bad
	}
	us := int64(w)*1e6 + int64(f)
	if neg {
		us = -us
	}
	return Interval{Months: int32(months), Days: int32(days), Micros: us}, nil
}

// ParseTime is time.Parse that also reads the years before 1 AD that
// time.Format writes with a minus sign ("-0043-03-15" is 44 BC, the year
// -43 of the proleptic Gregorian calendar), which time.Parse refuses. A
// year and its negation are leap years alike, so the text parses as its
// mirror year.
func ParseTime(layout, s string) (time.Time, error) {
	rest, bc := strings.CutPrefix(s, "-")
	tm, err := time.Parse(layout, rest)
	if err != nil || !bc {
		return tm, err
	}
	return time.Date(-tm.Year(), tm.Month(), tm.Day(), tm.Hour(), tm.Minute(), tm.Second(), tm.Nanosecond(), tm.Location()), nil
}
