package verify

import (
	"fmt"
	"testing"
	"time"
)

// The fast paths of Canon render exactly what the generic form did.
func TestCanonFastPathsMatchTheGenericForm(t *testing.T) {
	for _, v := range []any{int64(-42), int32(7), int16(-3), uint64(1 << 63), uint32(9), true, false,
		time.Date(2026, 12, 3, 1, 2, 3, 456789000, time.UTC), time.Date(1999, 1, 1, 0, 0, 0, 0, time.FixedZone("x", 3600))} {
		if got, want := Canon(v), fmt.Sprintf("%T:%v", v, v); got != want {
			t.Errorf("Canon(%#v) = %q, want %q", v, got, want)
		}
	}
	for _, s := range []string{"", "a\"b", "é\x00\n"} {
		if got, want := Canon(s), fmt.Sprintf("string:%q", s); got != want {
			t.Errorf("Canon(%q) = %q, want %q", s, got, want)
		}
	}
}
