package jsontext

import (
	"encoding/json"
	"testing"
)

func TestAppendStringRoundTrips(t *testing.T) {
	for _, s := range []string{"", "plain", `q"b\s`, "tab\tnl\nrc\r", "\x00\x01\x1f\x7f", "<&>", "ünï€😀", "\u2028\u2029"} {
		b := AppendString([]byte("x"), s)
		if b[0] != 'x' {
			t.Fatalf("%q: prefix lost", s)
		}
		var back string
		if err := json.Unmarshal(b[1:], &back); err != nil || back != s {
			t.Errorf("AppendString(%q) = %s: decodes to %q, %v", s, b[1:], back, err)
		}
	}
	if got := string(AppendString(nil, "<a\x01>")); got != `"<a\u0001>"` {
		t.Errorf("escaping = %s", got)
	}
}
