package mysql

import (
	"bytes"
	"testing"
)

// TestGeometryKeepsSRID converts MySQL's stored geometry (SRID, then WKB)
// of either byte order: WKB as is for SRID 0, EWKB with the SRID otherwise.
func TestGeometryKeepsSRID(t *testing.T) {
	coords := []byte{0, 0, 0, 0, 0, 0, 0xf0, 0x3f, 0, 0, 0, 0, 0, 0, 0, 0x40}
	le := append([]byte{1, 1, 0, 0, 0}, coords...)
	be := append([]byte{0, 0, 0, 0, 1}, coords...)
	for _, tc := range []struct {
		name     string
		in, want []byte
	}{
		{"srid 0", append([]byte{0, 0, 0, 0}, le...), le},
		{"little endian", append([]byte{0xe6, 0x10, 0, 0}, le...), append([]byte{1, 1, 0, 0, 0x20, 0xe6, 0x10, 0, 0}, coords...)},
		{"big endian", append([]byte{0xe6, 0x10, 0, 0}, be...), append([]byte{0, 0x20, 0, 0, 1, 0, 0, 0x10, 0xe6}, coords...)},
	} {
		got, err := geometry(tc.in)
		if err != nil || !bytes.Equal(got, tc.want) {
			t.Errorf("%s: geometry = % x, %v; want % x", tc.name, got, err, tc.want)
		}
	}
	for _, bad := range [][]byte{nil, {1, 0, 0, 0, 1, 1, 0, 0}, {1, 0, 0, 0, 7, 1, 0, 0, 0}} {
		if g, err := geometry(bad); err == nil {
			t.Errorf("geometry(% x) = % x, want an error", bad, g)
		}
	}
}
