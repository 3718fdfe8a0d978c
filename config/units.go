package config

import (
	"math"
	"strconv"
	"strings"
	"time"
)

// valueError is a decoding failure of a scalar. Its text never contains the
// value itself: the decoder appends a safe description of the value (or
// none, for interpolated and secret values).
type valueError struct {
	msg  string
	hint string
}

func (e *valueError) Error() string { return e.msg }

// Duration is a time.Duration read from Go duration text such as "10s",
// "1m30s" or "250ms". A bare 0 is accepted; other bare numbers are rejected
// because their unit would be a guess.
type Duration time.Duration

// Std returns the duration as a time.Duration.
func (d Duration) Std() time.Duration { return time.Duration(d) }

// String formats the duration like time.Duration does, e.g. "1m30s".
func (d Duration) String() string { return time.Duration(d).String() }

// MarshalText formats the duration as String does.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText parses Go duration text.
func (d *Duration) UnmarshalText(b []byte) error {
	s := strings.TrimSpace(string(b))
	if s == "" {
		return &valueError{msg: "expected a duration, got an empty value", hint: "write a duration such as 10s, 1m30s or 250ms"}
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		if _, nerr := strconv.ParseFloat(s, 64); nerr == nil {
			return &valueError{msg: "duration has no unit", hint: "add a unit: ns, us, ms, s, m or h, e.g. 10s"}
		}
		if strings.HasSuffix(s, "d") {
			return &valueError{msg: "expected a duration", hint: "days are not a unit; use hours, e.g. 168h"}
		}
		if strings.Contains(err.Error(), "overflow") || strings.Contains(err.Error(), "out of range") {
			return &valueError{msg: "duration is too large", hint: "the maximum is about 2540400h"}
		}
		return &valueError{msg: "expected a duration", hint: "write a duration such as 10s, 1m30s or 250ms"}
	}
	*d = Duration(v)
	return nil
}

// ByteSize is a number of bytes read from text such as "64MiB", "16MB",
// "1.5GiB" or a bare "1024". Units (case-insensitive): B; KB, MB, GB, TB
// (powers of 1000); KiB, MiB, GiB, TiB (powers of 1024).
type ByteSize int64

// Byte size units.
const (
	KiB ByteSize = 1 << 10
	MiB ByteSize = 1 << 20
	GiB ByteSize = 1 << 30
	TiB ByteSize = 1 << 40
)

var byteUnits = map[string]float64{
	"":    1,
	"b":   1,
	"kb":  1e3,
	"mb":  1e6,
	"gb":  1e9,
	"tb":  1e12,
	"kib": 1 << 10,
	"mib": 1 << 20,
	"gib": 1 << 30,
	"tib": 1 << 40,
}

// ParseByteSize parses byte size text as ByteSize.UnmarshalText does. Its
// errors do not repeat s.
func ParseByteSize(s string) (ByteSize, error) {
	s = strings.TrimSpace(s)
	i := 0
	for i < len(s) && (s[i] >= '0' && s[i] <= '9' || s[i] == '.' || s[i] == '_' || s[i] == '+' || s[i] == '-') {
		i++
	}
	num := strings.ReplaceAll(s[:i], "_", "")
	unit := strings.ToLower(strings.TrimSpace(s[i:]))
	hint := "write a size such as 64MiB, 16MB, 1.5GiB or 1024 (bytes)"
	if num == "" {
		return 0, &valueError{msg: "expected a byte size", hint: hint}
	}
	mult, ok := byteUnits[unit]
	if !ok {
		return 0, &valueError{msg: "unknown byte size unit", hint: "use B, KB, MB, GB, TB, KiB, MiB, GiB or TiB"}
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, &valueError{msg: "expected a byte size", hint: hint}
	}
	if f < 0 {
		return 0, &valueError{msg: "byte size must not be negative", hint: hint}
	}
	if !strings.Contains(num, ".") && mult == 1 {
		n, err := strconv.ParseInt(num, 10, 64)
		if err != nil {
			return 0, &valueError{msg: "byte size is too large", hint: "the maximum is 8EiB"}
		}
		return ByteSize(n), nil
	}
	v := f * mult
	if v >= math.MaxInt64 {
		return 0, &valueError{msg: "byte size is too large", hint: "the maximum is 8EiB"}
	}
	if v != math.Trunc(v) {
		return 0, &valueError{msg: "byte size is not a whole number of bytes", hint: "use a smaller unit"}
	}
	return ByteSize(v), nil
}

// Int64 returns the size in bytes.
func (b ByteSize) Int64() int64 { return int64(b) }

// String formats the size with the largest binary unit that divides it
// exactly, e.g. "64MiB", or as plain bytes.
func (b ByteSize) String() string {
	units := []struct {
		size ByteSize
		name string
	}{{TiB, "TiB"}, {GiB, "GiB"}, {MiB, "MiB"}, {KiB, "KiB"}}
	for _, u := range units {
		if b != 0 && b%u.size == 0 {
			return strconv.FormatInt(int64(b/u.size), 10) + u.name
		}
	}
	return strconv.FormatInt(int64(b), 10) + "B"
}

// MarshalText formats the size as String does.
func (b ByteSize) MarshalText() ([]byte, error) { return []byte(b.String()), nil }

// UnmarshalText parses byte size text (see ByteSize).
func (b *ByteSize) UnmarshalText(text []byte) error {
	v, err := ParseByteSize(string(text))
	if err != nil {
		return err
	}
	*b = v
	return nil
}
