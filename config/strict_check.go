package config

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Value checks of the strict decoder (enum, pattern, min, max, choices)
// and "did you mean" suggestions for unknown keys.

// checkChoice reports a choice struct with no or several alternatives set.
func (d *decoder) checkChoice(path string, n *yaml.Node, fields []field, set []entry) bool {
	var names []string
	for _, f := range fields {
		names = append(names, f.key)
	}
	list := strings.Join(names, ", ")
	switch {
	case len(set) == 0:
		d.errorf(n, path, "expected exactly one of "+list+", got none", "add one of: "+list)
		return false
	case len(set) > 1:
		for _, e := range set[1:] {
			d.errorf(e.key, path, "only one of "+list+" may be set, but "+set[0].key.Value+" is set too",
				"remove all but one")
		}
		return false
	}
	return true
}

// check applies the enum, pattern and range tags of f to the decoded v.
func (d *decoder) check(path string, n *yaml.Node, v reflect.Value, f *field) bool {
	got := d.describe(n, f)
	if f.required && (v.Kind() == reflect.String || v.Kind() == reflect.Slice) && v.Len() == 0 {
		hint := ""
		if f.doc != "" {
			hint = "set it (" + f.doc + ")"
		}
		d.errorf(n, path, "must not be empty", hint)
		return false
	}
	if v.Kind() == reflect.String {
		s := v.String()
		if f.enum != nil && !contains(f.enum, s) {
			hint := "use one of " + strings.Join(f.enum, ", ")
			if m := suggest(s, f.enum); m != "" && d.interp[n] == nil && !f.secret {
				hint = fmt.Sprintf("did you mean %q? allowed: %s", m, strings.Join(f.enum, ", "))
			}
			d.errorf(n, path, "invalid value "+d.named(n, f), hint)
			return false
		}
		if f.pattern != nil && s != "" && !f.pattern.MatchString(s) {
			d.errorf(n, path, "invalid value "+d.named(n, f), "must match the pattern "+f.pattern.String())
			return false
		}
	}
	if f.min == "" && f.max == "" {
		return true
	}
	measure := func(x reflect.Value) float64 {
		switch x.Kind() {
		case reflect.String, reflect.Slice:
			return float64(x.Len())
		case reflect.Float32, reflect.Float64:
			return x.Float()
		}
		return float64(x.Int())
	}
	bound := func(text, which string) float64 {
		if x := v.Kind(); x == reflect.String || x == reflect.Slice {
			b, err := strconv.Atoi(text)
			if err != nil {
				panic("config: bad " + which + " tag on " + path)
			}
			return float64(b)
		}
		b := reflect.New(v.Type()).Elem()
		d.setTag(b, text, path, which)
		return measure(b)
	}
	x := measure(v)
	low := f.min != "" && x < bound(f.min, "min")
	high := f.max != "" && x > bound(f.max, "max")
	if !low && !high {
		return true
	}
	var msg string
	switch {
	case v.Kind() == reflect.Slice && f.min != "" && f.max == "":
		msg = "must have at least " + f.min + " item(s)"
	case v.Kind() == reflect.Slice:
		msg = "must have between " + f.min + " and " + f.max + " items"
	case f.min != "" && f.max != "":
		msg = "must be between " + f.min + " and " + f.max
	case f.min != "":
		msg = "must be at least " + f.min
	default:
		msg = "must be at most " + f.max
	}
	hint := ""
	if f.hasDef && f.def != "" {
		hint = "the default is " + f.def
	}
	if v.Kind() == reflect.Slice {
		d.errorf(n, path, msg, hint)
	} else {
		d.errorf(n, path, msg+", got "+got, hint)
	}
	return false
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// unknownKey reports key k, unknown in struct type t, with a suggestion.
func (d *decoder) unknownKey(path string, k *yaml.Node, t reflect.Type, fields []field, isChoice bool) {
	var names []string
	for _, f := range fields {
		names = append(names, f.key)
	}
	what, valid := "unknown field", "valid fields are "
	if isChoice {
		what, valid = "unknown kind", "valid kinds are "
	}
	hint := valid + strings.Join(names, ", ")
	if m := suggest(k.Value, names); m != "" {
		hint = fmt.Sprintf("did you mean %q?", m)
	} else if isChoice {
		// A setting written directly where its kind belongs, e.g. "- path: x"
		// instead of "- duckdb: {path: x}".
		for _, f := range fields {
			inner := t.FieldByIndex(f.index).Type
			for inner.Kind() == reflect.Pointer {
				inner = inner.Elem()
			}
			if inner.Kind() != reflect.Struct {
				continue
			}
			for _, g := range fieldsOf(inner) {
				if g.key == k.Value {
					hint = fmt.Sprintf("%q is a setting of %s; put it under %q", k.Value, f.key, f.key+":")
				}
			}
		}
	}
	d.errorf(k, join(path, k.Value), what, hint)
}

// suggest returns the candidate closest to s when it is close enough to be a
// plausible typo, or "".
func suggest(s string, candidates []string) string {
	norm := func(x string) string {
		return strings.NewReplacer("_", "", "-", "").Replace(strings.ToLower(x))
	}
	best, bestD := "", -1
	for _, c := range candidates {
		if norm(c) == norm(s) || len(s) >= 3 && len(c) >= 3 &&
			(strings.HasPrefix(strings.ToLower(s), c) || strings.HasPrefix(c, strings.ToLower(s))) {
			return c
		}
		dist := levenshtein(strings.ToLower(s), c)
		if limit := max(1, min(len(s), len(c))/3); dist <= limit && (bestD < 0 || dist < bestD) {
			best, bestD = c, dist
		}
	}
	return best
}

// levenshtein is the edit distance between a and b (bytes; inputs longer
// than 64 bytes are never close to a field name and short-circuit).
func levenshtein(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 1 << 20
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
