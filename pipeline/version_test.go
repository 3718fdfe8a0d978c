package pipeline

import (
	"encoding/hex"
	"math/rand/v2"
	"strings"
	"testing"
)

func TestVersionTextForms(t *testing.T) {
	vs := []Version{{}, {1, 2, 3, 4}, {0, ^uint64(0), 1 << 63, 42}}
	for _, v := range vs {
		want := hex.EncodeToString(v.Bytes())
		if got := v.String(); got != want {
			t.Errorf("%v.String() = %s, want %s", v, got, want)
		}
		if got := string(v.AppendHex([]byte("x:"))); got != "x:"+want {
			t.Errorf("%v.AppendHex = %s, want x:%s", v, got, want)
		}
		back, err := ParseVersion(v.String())
		if err != nil || back != v {
			t.Errorf("ParseVersion(%s) = %v, %v", v, back, err)
		}
	}
	// String order is version order.
	if !(vs[2].String() < vs[1].String()) || !vs[2].Less(vs[1]) {
		t.Errorf("order: %s vs %s", vs[2], vs[1])
	}
}

func TestVersionCompactForm(t *testing.T) {
	if got := (Version{0, 0x1a2b3c4d, 0, 5}).Compact(); got != "081a2b3c4d015" {
		t.Errorf("Compact = %q", got)
	}
	if got := (Version{}).Compact(); got != "0000" {
		t.Errorf("zero Compact = %q", got)
	}
	max := ^uint64(0)
	if got := (Version{max, 0, 0, 0}).Compact(); got != "gffffffffffffffff000" {
		t.Errorf("max Compact = %q", got)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	comp := func() uint64 {
		// Mostly small numbers and their neighbours, where the length
		// digit changes; sometimes anything.
		switch rng.IntN(4) {
		case 0:
			return 0
		case 1:
			return uint64(1) << rng.IntN(64)
		case 2:
			return uint64(1)<<rng.IntN(64) - 1
		}
		return rng.Uint64()
	}
	for range 20000 {
		a := Version{comp(), comp(), comp(), comp()}
		b := Version{comp(), comp(), comp(), comp()}
		if rng.IntN(3) == 0 {
			b = a
			b[rng.IntN(4)] = comp()
		}
		ac, bc := a.Compact(), b.Compact()
		if got, want := strings.Compare(ac, bc), a.Compare(b); got != want {
			t.Fatalf("%v vs %v: compact %q vs %q compares %d, versions %d", a, b, ac, bc, got, want)
		}
		back, err := ParseCompactVersion(ac)
		if err != nil || back != a {
			t.Fatalf("ParseCompactVersion(%q) = %v, %v; want %v", ac, back, err, a)
		}
	}
	for _, bad := range []string{"", "000", "00000", "1", "2010000", "10000x", "h000", "1A000", "0" + (Version{}).String()} {
		if v, err := ParseCompactVersion(bad); err == nil {
			t.Errorf("ParseCompactVersion(%q) = %v, want an error", bad, v)
		}
	}
}
