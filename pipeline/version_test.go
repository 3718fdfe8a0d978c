package pipeline

import (
	"encoding/hex"
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
