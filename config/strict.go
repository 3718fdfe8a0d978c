package config

import (
	"encoding"
	"errors"
	"fmt"
	"math"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"go.yaml.in/yaml/v3"
)

// This file is the schema-independent part of the loader: a strict decoder
// from yaml.Node trees into Go structs, driven by struct tags:
//
//	yaml:"key"        the mapping key; "-" skips the field
//	default:"text"    value used when the key is absent or null, written
//	                  as it would be in YAML (defaults derived from other
//	                  fields are filled in by validate.go)
//	required:"true"   the key must be present, non-null and (strings and
//	                  lists) non-empty
//	min:"x" max:"y"   inclusive bounds: numbers, durations and byte sizes
//	                  compare by value, strings and lists by length
//	enum:"a|b|c"      the allowed values of a string
//	pattern:"re"      a regular expression non-empty strings must match
//	secret:"true"     the value is never quoted in messages
//	doc:"text"        short description used in hints for missing fields
//
// A struct type with an exclusive() method is a choice: exactly one of its
// (pointer) fields must be set. Types implementing encoding.TextUnmarshaler
// decode from scalar text.
//
// Every problem is collected with its position; decoding never stops at the
// first one.

// choice marks struct types whose pointer fields are mutually exclusive
// alternatives.
type choice interface{ exclusive() }

// decoder holds the state of one Parse.
type decoder struct {
	file string
	errs []*Error
	// interp maps scalar nodes whose text came from ${VAR} interpolation to
	// the variables used.
	interp map[*yaml.Node][]string
	// broken holds nodes already reported during interpolation.
	broken map[*yaml.Node]bool
	// at maps field paths to the node holding the value, or for absent
	// fields, the node of the enclosing mapping.
	at map[string]*yaml.Node
	// lines is the file's text, by line; lookupEnv reads the environment.
	lines     []string
	lookupEnv func(string) (string, bool)
	// bad holds field paths with a reported problem.
	bad map[string]bool
}

func newDecoder(file string) *decoder {
	return &decoder{
		file:   file,
		interp: map[*yaml.Node][]string{},
		broken: map[*yaml.Node]bool{},
		at:     map[string]*yaml.Node{},
		bad:    map[string]bool{},
	}
}

// errorf records a problem at node n (nil: unknown position).
func (d *decoder) errorf(n *yaml.Node, path, msg, hint string) {
	e := &Error{File: d.file, Path: path, Msg: msg, Hint: hint}
	if n != nil {
		e.Line, e.Col = n.Line, n.Column
	}
	d.errs = append(d.errs, e)
	d.bad[path] = true
}

// errAt records a problem at the node remembered for path (or the nearest
// enclosing one).
func (d *decoder) errAt(path, msg, hint string) {
	d.errorf(d.node(path), path, msg, hint)
}

// node returns the node remembered for path or its nearest ancestor.
func (d *decoder) node(path string) *yaml.Node {
	for p := path; p != ""; p = parentPath(p) {
		if n, ok := d.at[p]; ok {
			return n
		}
	}
	return d.at[""]
}

// failed reports whether any of paths, or a field below one, has a problem.
func (d *decoder) failed(paths ...string) bool {
	for bad := range d.bad {
		for _, p := range paths {
			if bad == p || strings.HasPrefix(bad, p+".") || strings.HasPrefix(bad, p+"[") {
				return true
			}
		}
	}
	return false
}

func parentPath(p string) string {
	i := strings.LastIndexAny(p, ".[")
	if i < 0 {
		return ""
	}
	return p[:i]
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func index(path string, i int) string { return path + "[" + strconv.Itoa(i) + "]" }

// field is the decoded tag set of one struct field.
type field struct {
	index    []int // for reflect.Value.FieldByIndex (inline structs nest)
	key      string
	def      string
	hasDef   bool
	required bool
	min, max string
	enum     []string
	pattern  *regexp.Regexp
	secret   bool
	doc      string
}

var allDigits = regexp.MustCompile(`^[-+]?[0-9_]+$`)

var fieldCache sync.Map // reflect.Type → []field

// fieldsOf returns the decodable fields of struct type t. The fields of an
// embedded struct tagged `yaml:",inline"` are decoded as the parent's own.
func fieldsOf(t reflect.Type) []field {
	if v, ok := fieldCache.Load(t); ok {
		return v.([]field)
	}
	out := collectFields(t, nil)
	fieldCache.Store(t, out)
	return out
}

func collectFields(t reflect.Type, prefix []int) []field {
	var out []field
	for i := 0; i < t.NumField(); i++ {
		sf := t.Field(i)
		tag := strings.Split(sf.Tag.Get("yaml"), ",")
		key := tag[0]
		if key == "-" || !sf.IsExported() {
			continue
		}
		idx := append(append([]int(nil), prefix...), i)
		if sf.Anonymous && len(tag) > 1 && tag[1] == "inline" && sf.Type.Kind() == reflect.Struct {
			out = append(out, collectFields(sf.Type, idx)...)
			continue
		}
		if key == "" {
			panic("config: field " + t.Name() + "." + sf.Name + " has no yaml tag")
		}
		f := field{index: idx, key: key, required: sf.Tag.Get("required") == "true",
			secret: sf.Tag.Get("secret") == "true", doc: sf.Tag.Get("doc"),
			min: sf.Tag.Get("min"), max: sf.Tag.Get("max")}
		f.def, f.hasDef = sf.Tag.Lookup("default")
		if e := sf.Tag.Get("enum"); e != "" {
			f.enum = strings.Split(e, "|")
		}
		if p := sf.Tag.Get("pattern"); p != "" {
			f.pattern = regexp.MustCompile(p)
		}
		out = append(out, f)
	}
	return out
}

// resolve follows aliases.
func (d *decoder) resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode; i++ {
		if i > 100 {
			return nil
		}
		n = n.Alias
	}
	return n
}

func (d *decoder) isNull(n *yaml.Node) bool {
	return n == nil || n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" && d.interp[n] == nil
}

// describe names a value for "got …" in messages without ever quoting
// interpolated or secret text.
func (d *decoder) describe(n *yaml.Node, f *field) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if vars := d.interp[n]; len(vars) > 0 {
			return "value from ${" + strings.Join(vars, "}${") + "}"
		}
		if f != nil && f.secret {
			return "a secret value (not shown)"
		}
		if d.isNull(n) {
			return "null"
		}
		v := n.Value
		if t := n.ShortTag(); t == "!!int" || t == "!!float" || t == "!!bool" {
			return v
		}
		if len(v) > 40 {
			v = v[:40] + "…"
		}
		return strconv.Quote(v)
	}
	return "an unsupported YAML node"
}

// named is describe for messages of the form "invalid value X".
func (d *decoder) named(n *yaml.Node, f *field) string {
	if d.interp[n] != nil {
		return "(" + d.describe(n, f) + ")"
	}
	return d.describe(n, f)
}

// decode decodes n (non-null) into v. It reports problems and returns
// whether v was set.
func (d *decoder) decode(path string, n *yaml.Node, v reflect.Value, f *field) bool {
	n = d.resolve(n)
	if n == nil {
		d.errorf(nil, path, "alias chain too deep", "")
		return false
	}
	d.at[path] = n
	if d.broken[n] {
		d.bad[path] = true
		return false
	}
	var ok bool
	if tu, isText := v.Addr().Interface().(encoding.TextUnmarshaler); isText {
		ok = d.decodeText(path, n, tu, f)
	} else {
		switch v.Kind() {
		case reflect.Pointer:
			// Set even when decoding fails, so later checks see which
			// alternative was chosen.
			p := reflect.New(v.Type().Elem())
			ok = d.decode(path, n, p.Elem(), f)
			v.Set(p)
		case reflect.Struct:
			ok = d.decodeStruct(path, n, v)
		case reflect.Slice:
			ok = d.decodeSlice(path, n, v, f)
		case reflect.String:
			ok = d.decodeString(path, n, v, f)
		case reflect.Bool:
			ok = d.decodeBool(path, n, v, f)
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			ok = d.decodeInt(path, n, v, f)
		case reflect.Float32, reflect.Float64:
			ok = d.decodeFloat(path, n, v, f)
		default:
			panic("config: unsupported field type " + v.Type().String())
		}
	}
	if ok && f != nil {
		ok = d.check(path, n, v, f)
	}
	return ok
}

func (d *decoder) typeErr(path string, n *yaml.Node, want string, f *field) {
	hint := ""
	switch {
	case want == "a list" && n.Kind == yaml.MappingNode:
		hint = "write list items on their own lines starting with \"- \""
	case want == "a list" && n.Kind == yaml.ScalarNode:
		hint = "write a list such as [a, b] or items starting with \"- \""
	case want == "a mapping" && n.Kind == yaml.ScalarNode:
		hint = "write nested \"key: value\" lines indented below this key"
	case n.Kind == yaml.ScalarNode && n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) != 0 && d.interp[n] == nil &&
		(want == "an integer" || want == "a number" || want == "true or false"):
		hint = "remove the quotes"
	}
	d.errorf(n, path, "expected "+want+", got "+d.describe(n, f), hint)
}

// scalar returns the text of a scalar node and whether it is plain
// text of the given YAML types (interpolated text counts as any type).
func (d *decoder) scalar(n *yaml.Node, tags ...string) (string, bool) {
	if n.Kind != yaml.ScalarNode {
		return "", false
	}
	if d.interp[n] != nil {
		return n.Value, true
	}
	tag := n.ShortTag()
	for _, t := range tags {
		if t == tag {
			return n.Value, true
		}
	}
	return n.Value, false
}

func (d *decoder) decodeText(path string, n *yaml.Node, tu encoding.TextUnmarshaler, f *field) bool {
	s, ok := d.scalar(n, "!!str", "!!int", "!!float")
	if !ok {
		d.typeErr(path, n, "a scalar value", f)
		return false
	}
	if err := tu.UnmarshalText([]byte(s)); err != nil {
		msg, hint := err.Error(), ""
		var ve *valueError
		if errors.As(err, &ve) {
			msg, hint = ve.msg, ve.hint
		} else if d.interp[n] != nil || f != nil && f.secret {
			msg = "invalid value"
		}
		d.errorf(n, path, msg+", got "+d.describe(n, f), hint)
		return false
	}
	return true
}

func (d *decoder) decodeString(path string, n *yaml.Node, v reflect.Value, f *field) bool {
	s, ok := d.scalar(n, "!!str", "!!int", "!!float", "!!bool", "!!timestamp")
	if !ok {
		d.typeErr(path, n, "a string", f)
		return false
	}
	v.SetString(s)
	return true
}

func (d *decoder) decodeBool(path string, n *yaml.Node, v reflect.Value, f *field) bool {
	s, ok := d.scalar(n, "!!bool")
	if ok {
		switch strings.ToLower(strings.TrimSpace(s)) {
		case "true":
			v.SetBool(true)
			return true
		case "false":
			v.SetBool(false)
			return true
		}
	}
	d.typeErr(path, n, "true or false", f)
	return false
}

func (d *decoder) decodeInt(path string, n *yaml.Node, v reflect.Value, f *field) bool {
	s, ok := d.scalar(n, "!!int")
	if !ok && n.Kind == yaml.ScalarNode && n.ShortTag() == "!!float" && allDigits.MatchString(n.Value) {
		d.errorf(n, path, "integer out of range, got "+d.describe(n, f), "")
		return false
	}
	if !ok {
		d.typeErr(path, n, "an integer", f)
		return false
	}
	i, err := strconv.ParseInt(strings.TrimSpace(s), 0, 64)
	if err != nil && errors.Is(err, strconv.ErrRange) || err == nil && v.OverflowInt(i) {
		d.errorf(n, path, "integer out of range, got "+d.describe(n, f), "")
		return false
	}
	if err != nil {
		d.typeErr(path, n, "an integer", f)
		return false
	}
	v.SetInt(i)
	return true
}

func (d *decoder) decodeFloat(path string, n *yaml.Node, v reflect.Value, f *field) bool {
	s, ok := d.scalar(n, "!!int", "!!float")
	if !ok {
		d.typeErr(path, n, "a number", f)
		return false
	}
	x, err := strconv.ParseFloat(strings.ReplaceAll(strings.TrimSpace(s), "_", ""), 64)
	if err != nil || math.IsNaN(x) || math.IsInf(x, 0) {
		d.typeErr(path, n, "a finite number", f)
		return false
	}
	v.SetFloat(x)
	return true
}

func (d *decoder) decodeSlice(path string, n *yaml.Node, v reflect.Value, f *field) bool {
	if n.Kind != yaml.SequenceNode {
		d.typeErr(path, n, "a list", f)
		return false
	}
	out := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
	ok := true
	for i, item := range n.Content {
		p := index(path, i)
		if r := d.resolve(item); r != nil && d.isNull(r) {
			d.errorf(item, p, "empty list item", "remove the item or give it a value")
			ok = false
			continue
		}
		var itemField *field
		if f != nil && f.secret {
			itemField = &field{secret: true}
		}
		if !d.decode(p, item, out.Index(i), itemField) {
			ok = false
		}
	}
	v.Set(out)
	return ok
}

// entry is one key/value pair of a mapping.
type entry struct{ key, val *yaml.Node }

// entries lists the pairs of mapping n, expanding YAML merge keys (<<) and
// reporting duplicate and non-string keys. Each mapping is merged at most
// once (visited), which bounds the work for nested and repeated merges.
func (d *decoder) entries(path string, n *yaml.Node, visited map[*yaml.Node]bool) []entry {
	if visited == nil {
		visited = map[*yaml.Node]bool{}
	}
	visited[n] = true
	var out, merged []entry
	seen := map[string]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		if k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge" {
			src := d.resolve(val)
			srcs := []*yaml.Node{val}
			if src != nil && src.Kind == yaml.SequenceNode {
				srcs = src.Content
			}
			for _, s := range srcs {
				s = d.resolve(s)
				switch {
				case s == nil || s.Kind != yaml.MappingNode:
					d.errorf(k, path, "merge key (<<) needs a mapping or a list of mappings", "")
				case !visited[s]:
					merged = append(merged, d.entries(path, s, visited)...)
				}
			}
			continue
		}
		if k.Kind != yaml.ScalarNode || d.isNull(k) {
			d.errorf(k, path, "keys must be plain strings", "")
			continue
		}
		if first, dup := seen[k.Value]; dup {
			d.errorf(k, join(path, k.Value), fmt.Sprintf("duplicate key (first set at line %d)", first.Line), "remove one of them")
			continue
		}
		seen[k.Value] = k
		out = append(out, entry{k, val})
	}
	for _, e := range merged {
		if _, dup := seen[e.key.Value]; !dup {
			seen[e.key.Value] = e.key
			out = append(out, e)
		}
	}
	return out
}

func (d *decoder) decodeStruct(path string, n *yaml.Node, v reflect.Value) bool {
	if n.Kind != yaml.MappingNode {
		d.typeErr(path, n, "a mapping", nil)
		return false
	}
	fields := fieldsOf(v.Type())
	_, isChoice := v.Addr().Interface().(choice)
	given := map[string]entry{}
	ok, unknown := true, false
	for _, e := range d.entries(path, n, nil) {
		known := false
		for _, f := range fields {
			if f.key == e.key.Value {
				known = true
				break
			}
		}
		if !known {
			d.unknownKey(path, e.key, v.Type(), fields, isChoice)
			ok, unknown = false, true
			continue
		}
		given[e.key.Value] = e
	}
	var set []entry
	for i := range fields {
		f := &fields[i]
		p := join(path, f.key)
		fv := v.FieldByIndex(f.index)
		e, present := given[f.key]
		val := d.resolve(e.val)
		switch {
		case present && !d.isNull(val):
			if !d.decode(p, e.val, fv, f) {
				ok = false
			}
		case present && fv.Kind() == reflect.Pointer && fv.Type().Elem().Kind() == reflect.Struct:
			// "kind:" with no settings: the alternative with its defaults.
			d.at[p] = e.key
			fv.Set(reflect.New(fv.Type().Elem()))
			if !d.absent(p, e.key, fv.Elem(), nil) {
				ok = false
			}
		default:
			pos := n
			if present {
				pos = e.key
			}
			if !d.absent(p, pos, fv, f) {
				ok = false
			}
		}
		if isChoice && present {
			set = append(set, e)
		}
	}
	if isChoice && !(unknown && len(set) == 0) {
		ok = d.checkChoice(path, n, fields, set) && ok
	}
	return ok
}

// absent handles a field whose key is missing or null: required fields are
// reported at pos, others get their default (nested structs field by field).
func (d *decoder) absent(path string, pos *yaml.Node, v reflect.Value, f *field) bool {
	if _, seen := d.at[path]; !seen {
		d.at[path] = pos
	}
	switch {
	case f != nil && f.required:
		hint := "add \"" + f.key + ":\""
		if f.doc != "" {
			hint += " (" + f.doc + ")"
		}
		d.errorf(pos, path, "missing required field", hint)
		return false
	case f != nil && f.hasDef:
		d.setTag(v, f.def, path, "default")
		return true
	case v.Kind() == reflect.Struct && !v.Addr().Type().Implements(reflect.TypeFor[encoding.TextUnmarshaler]()):
		ok := true
		fields := fieldsOf(v.Type())
		for i := range fields {
			if !d.absent(join(path, fields[i].key), pos, v.FieldByIndex(fields[i].index), &fields[i]) {
				ok = false
			}
		}
		return ok
	}
	return true
}

// setTag decodes tag text (a default or a bound) into v; bad tag text is a
// programming error.
func (d *decoder) setTag(v reflect.Value, text, path, tag string) {
	if text == "" {
		v.SetZero()
		return
	}
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(text), &doc); err != nil || len(doc.Content) != 1 {
		panic(fmt.Sprintf("config: bad %s tag %q on %s", tag, text, path))
	}
	sub := newDecoder("tag")
	if !sub.decode(path, doc.Content[0], v, nil) {
		panic(fmt.Sprintf("config: bad %s tag %q on %s: %v", tag, text, path, finish("tag", sub.errs)))
	}
}
