package config

import (
	"testing"
	"time"
)

func TestByteSize(t *testing.T) {
	tests := []struct {
		in   string
		want ByteSize
		bad  bool
	}{
		{in: "1024", want: 1024},
		{in: "0", want: 0},
		{in: "64MiB", want: 64 << 20},
		{in: "64 mib", want: 64 << 20},
		{in: "16MB", want: 16_000_000},
		{in: "1.5GiB", want: 3 << 29},
		{in: "2KB", want: 2000},
		{in: "1TiB", want: 1 << 40},
		{in: "10B", want: 10},
		{in: "1_000", want: 1000},
		{in: "", bad: true},
		{in: "MiB", bad: true},
		{in: "-1MiB", bad: true},
		{in: "1.5B", bad: true},
		{in: "12XB", bad: true},
		{in: "1.2.3MB", bad: true},
		{in: "99999999999999999999", bad: true},
		{in: "9999999TiB", bad: true},
	}
	for _, tt := range tests {
		got, err := ParseByteSize(tt.in)
		if tt.bad {
			if err == nil {
				t.Errorf("%q: want error, got %d", tt.in, got)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("%q: got %d, %v; want %d", tt.in, got, err, tt.want)
		}
	}
	for b, s := range map[ByteSize]string{64 * MiB: "64MiB", 1536: "1536B", 1024: "1KiB", 0: "0B", 3 * GiB / 2: "1536MiB", 1000: "1000B", 2 * TiB: "2TiB"} {
		if got := b.String(); got != s {
			t.Errorf("%d.String() = %q, want %q", int64(b), got, s)
		}
		var back ByteSize
		if err := back.UnmarshalText([]byte(b.String())); err != nil || back != b {
			t.Errorf("round trip of %d: %d, %v", int64(b), back, err)
		}
	}
}

func TestDuration(t *testing.T) {
	for in, want := range map[string]time.Duration{"10s": 10 * time.Second, "1m30s": 90 * time.Second, "250ms": 250 * time.Millisecond, "0": 0, "168h": 168 * time.Hour} {
		var d Duration
		if err := d.UnmarshalText([]byte(in)); err != nil || d.Std() != want {
			t.Errorf("%q: got %v, %v", in, d, err)
		}
		var back Duration
		text, _ := d.MarshalText()
		if err := back.UnmarshalText(text); err != nil || back != d {
			t.Errorf("round trip of %v: %v, %v", d, back, err)
		}
	}
	for _, in := range []string{"", "10", "7d", "soon", "99999999999h"} {
		var d Duration
		if err := d.UnmarshalText([]byte(in)); err == nil {
			t.Errorf("%q: want error, got %v", in, d)
		}
	}
}

func TestSuggest(t *testing.T) {
	keys := []string{"path", "name", "schema", "hard_delete", "tombstone_ttl"}
	for in, want := range map[string]string{"pathh": "path", "Path": "path", "hardDelete": "hard_delete",
		"hard-delete": "hard_delete", "tombstone": "tombstone_ttl", "nme": "name", "colour": "", "x": ""} {
		if got := suggest(in, keys); got != want {
			t.Errorf("suggest(%q) = %q, want %q", in, got, want)
		}
	}
}
