package pipeline

import (
	"fmt"
	"math/bits"
)

// The compact text form of a Version is, per component, one length digit n
// (the number of significant hex digits, 0…16, written 0-9 then a-g)
// followed by those n lower-case hex digits, without leading zeros:
// {0, 0x1a2b3c4d, 0, 5} is "0" "81a2b3c4d" "0" "15" = "081a2b3c4d015".
//
// Each component's code is prefix-free and orders like its value (a longer
// number has a greater length digit), so byte order of the whole text is
// version order, like String's, at about a quarter of its 64 bytes for
// typical versions. Sinks that store a version per key (the Redis sink)
// use it to keep the per-key overhead small.
const compactDigits = "0123456789abcdefg"

// AppendCompact appends the compact text form to dst.
func (v Version) AppendCompact(dst []byte) []byte {
	const hexDigits = "0123456789abcdef"
	for _, c := range v {
		n := (bits.Len64(c) + 3) / 4
		dst = append(dst, compactDigits[n])
		for i := n - 1; i >= 0; i-- {
			dst = append(dst, hexDigits[(c>>(4*uint(i)))&0xf])
		}
	}
	return dst
}

// Compact is the compact text form (see AppendCompact).
func (v Version) Compact() string {
	var b [4 * 17]byte
	return string(v.AppendCompact(b[:0]))
}

// ParseCompactVersion reads the compact text form; it rejects any other
// text, including non-canonical forms (leading zeros, upper case), so that
// one version has one text.
func ParseCompactVersion(s string) (Version, error) {
	var v Version
	p := 0
	for i := range v {
		if p >= len(s) {
			return Version{}, fmt.Errorf("version %q: ends after %d of 4 components", s, i)
		}
		n := hexValue(s[p])
		if n < 0 || n > 16 || p+1+n > len(s) {
			return Version{}, fmt.Errorf("version %q: bad length digit %q at %d", s, s[p], p)
		}
		p++
		var c uint64
		for j := 0; j < n; j++ {
			d := hexValue(s[p+j])
			if d < 0 || d > 15 || (j == 0 && d == 0) {
				return Version{}, fmt.Errorf("version %q: bad digit %q at %d", s, s[p+j], p+j)
			}
			c = c<<4 | uint64(d)
		}
		v[i] = c
		p += n
	}
	if p != len(s) {
		return Version{}, fmt.Errorf("version %q: %d trailing bytes", s, len(s)-p)
	}
	return v, nil
}

// hexValue is the value of a compact-form digit (0-9, a-g), or -1.
func hexValue(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'g':
		return int(c-'a') + 10
	}
	return -1
}
