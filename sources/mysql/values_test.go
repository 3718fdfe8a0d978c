package mysql

import (
	"bytes"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/pipeline"
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

// A read's timestamps, including an invalid day and the fraction's
// digits, come out as time.Date would make them.
func TestTimestampText(t *testing.T) {
	cv := converter{}
	for s, want := range map[string]time.Time{
		"1970-01-01 00:00:00":        time.Unix(0, 0),
		"0001-01-01 00:00:00.000001": time.Date(1, 1, 1, 0, 0, 0, 1000, time.UTC),
		"2020-02-31 23:59:59.5":      time.Date(2020, 2, 31, 23, 59, 59, 5e8, time.UTC),
		"9999-12-31 23:59:59.999999": time.Date(9999, 12, 31, 23, 59, 59, 999999000, time.UTC),
		"1969-12-31 23:59:59.123":    time.Date(1969, 12, 31, 23, 59, 59, 123e6, time.UTC),
	} {
		got, err := cv.timestamp(s)
		if err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		if got != (pipeline.Timestamp{Micros: want.UnixMicro()}) {
			t.Errorf("%s: %v, want %d", s, got, want.UnixMicro())
		}
	}
}
