package eval

import (
	"fmt"
	"strings"
	"testing"

	"github.com/sluice-cdc/sluice/pipeline"
)

// split(s, sep)[i], rewritten to __split_part, gives what indexing the
// split gives — for positive and negative indexes, separators longer
// than a byte, empty parts and an empty separator — and the same error
// for an index out of range.
func TestSplitPartIsSplitIndexed(t *testing.T) {
	inputs := []string{"", "a", "a@b", "@", "@@", "a@@b@", "user@mail.example.com", "x::y::z", "::", "héllo", "naïve@ü"}
	seps := []string{"@", "::", ".", "", "ü"}
	for _, s := range inputs {
		for _, sep := range seps {
			parts := strings.Split(s, sep)
			for i := -len(parts) - 1; i <= len(parts); i++ {
				got, err := splitPart(s, sep, i)
				j := i
				if j < 0 {
					j += len(parts)
				}
				if j < 0 || j >= len(parts) {
					want := fmt.Sprintf("index out of range: %d (array length is %d)", j, len(parts))
					if err == nil || err.Error() != want {
						t.Errorf("splitPart(%q, %q, %d) = %q, %v; want error %q", s, sep, i, got, err, want)
					}
					continue
				}
				if err != nil || got != parts[j] {
					t.Errorf("splitPart(%q, %q, %d) = %q, %v; want %q", s, sep, i, got, err, parts[j])
				}
			}
		}
	}
}

// In an expression the idiom evaluates as written: the domain of an
// e-mail, the last part, and a run-time error naming the index when the
// part does not exist; split indexed by a variable is left alone.
func TestSplitIndexInExpressions(t *testing.T) {
	tb := table()
	r := record(t, pipeline.OpInsert, []any{int64(7), "Ann@Mail.Example", nil, nil, "a,b,c", true})
	for src, want := range map[string]any{
		`lower(split(after.email ?? "@", "@")[1])`: "mail.example",
		`split(after.notes, ",")[-1]`:              "c",
		`split(after.notes, ",")[after.id - 6]`:    "b",
		`split(after.notes, ",", 2)[1]`:            "b,c",
	} {
		got, err := compile(t, src, tb, nil).Eval(r)
		if err != nil || got != want {
			t.Errorf("%s = %v, %v; want %v", src, got, err, want)
		}
	}
	_, err := compile(t, `split(after.email, "@")[2]`, tb, nil).Eval(r)
	if err == nil || !strings.Contains(err.Error(), "index out of range: 2 (array length is 2)") {
		t.Errorf("out of range: %v", err)
	}
	if _, err := Compile(`split(after.email, "@")[1] + 1`, tb, nil); err == nil {
		t.Error("a part is a string: adding 1 should not type-check")
	}
}
