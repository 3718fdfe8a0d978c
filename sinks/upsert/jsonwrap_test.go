package upsert

import "testing"

func TestWrapJSON(t *testing.T) {
	for _, c := range []struct{ in, stored string }{
		{`null`, `{"$sluice_json":null}`},
		{`{"$sluice_json":1}`, `{"$sluice_json":{"$sluice_json":1}}`},
		{`{"$sluice_json":1,"b":2}`, `{"$sluice_json":1,"b":2}`},
		{`{}`, `{}`},
		{`"null"`, `"null"`},
		{`[null]`, `[null]`},
		{`{"a":"$sluice_json"}`, `{"a":"$sluice_json"}`},
	} {
		got := string(WrapJSON([]byte(c.in)))
		if got != c.stored {
			t.Errorf("WrapJSON(%s) = %s, want %s", c.in, got, c.stored)
		}
		if back := string(UnwrapJSON([]byte(got))); back != c.in {
			t.Errorf("UnwrapJSON(%s) = %s, want %s", got, back, c.in)
		}
	}
}
