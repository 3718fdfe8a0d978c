package pipeline

import (
	"fmt"
	"path"
	"strings"
	"sync"
)

// Route selects what one sink receives: which tables, and which of their
// columns. A nil *Route passes everything.
//
// Table patterns are "schema.table" and column patterns
// "schema.table.column", each part a path.Match glob. A column is kept
// when no include pattern names its table or one of them matches it, and
// no exclude pattern matches it. Key columns are always kept: a sink
// cannot upsert without them (Invariant 4).
type Route struct {
	tables  [][]string
	include [][]string
	exclude [][]string

	mu     sync.Mutex
	shapes map[*Table]*Table // nil value: the table is not routed here
}

// NewRoute compiles the patterns; empty lists select everything. It fails
// on a malformed pattern.
func NewRoute(tables, include, exclude []string) (*Route, error) {
	r := &Route{shapes: map[*Table]*Table{}}
	var err error
	if r.tables, err = splitPatterns(tables, 2); err != nil {
		return nil, err
	}
	if r.include, err = splitPatterns(include, 3); err != nil {
		return nil, err
	}
	if r.exclude, err = splitPatterns(exclude, 3); err != nil {
		return nil, err
	}
	if len(r.tables)+len(r.include)+len(r.exclude) == 0 {
		return nil, nil
	}
	return r, nil
}

func splitPatterns(pats []string, parts int) ([][]string, error) {
	var out [][]string
	for _, p := range pats {
		if err := CheckPattern(p, parts); err != nil {
			return nil, fmt.Errorf("route: %w", err)
		}
		out = append(out, strings.Split(p, "."))
	}
	return out, nil
}

// CheckPattern reports a route pattern that is not parts dot-separated,
// non-empty path.Match globs ("schema.table": 2, "schema.table.column": 3).
func CheckPattern(pat string, parts int) error {
	ps := strings.Split(pat, ".")
	if len(ps) != parts {
		return fmt.Errorf("pattern %q has %d dot-separated parts, want %d", pat, len(ps), parts)
	}
	for _, part := range ps {
		if part == "" {
			return fmt.Errorf("pattern %q has an empty part", pat)
		}
		if _, err := path.Match(part, ""); err != nil {
			return fmt.Errorf("pattern %q: %v", pat, err)
		}
	}
	return nil
}

// match reports whether name parts match the first len(name) parts of pat.
func match(pat, name []string) bool {
	for i, n := range name {
		if ok, _ := path.Match(pat[i], n); !ok {
			return false
		}
	}
	return true
}

// Apply returns the records this route passes, projected onto the kept
// columns. Records without a table (heartbeats) always pass. The input is
// not modified; unprojected records are passed through as they are.
func (r *Route) Apply(recs []Record) []Record {
	if r == nil {
		return recs
	}
	out := make([]Record, 0, len(recs))
	// Consecutive records mostly share their table: look the shape up once
	// per run of them.
	var lastIn, shape *Table
	for i := range recs {
		rec := &recs[i]
		if rec.Table == nil {
			out = append(out, *rec)
			continue
		}
		if rec.Table != lastIn {
			lastIn, shape = rec.Table, r.shape(rec.Table)
		}
		switch {
		case shape == nil:
			continue
		case shape == rec.Table:
			out = append(out, *rec)
		default:
			p := *rec
			p.Table = shape
			p.Before = project(rec.Table, shape, rec.Before)
			p.After = project(rec.Table, shape, rec.After)
			out = append(out, p)
		}
	}
	return out
}

// Shape returns the shape a sink of this route receives for t: t itself
// when every column is kept (and for a nil route), a projection of it, or
// nil when the table is not routed here.
func (r *Route) Shape(t *Table) *Table {
	if r == nil {
		return t
	}
	return r.shape(t)
}

// shape returns the projected shape of t (t itself when every column is
// kept), or nil when the table is not routed here.
func (r *Route) shape(t *Table) *Table {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s, ok := r.shapes[t]; ok {
		return s
	}
	s := r.compute(t)
	r.shapes[t] = s
	return s
}

func (r *Route) compute(t *Table) *Table {
	id := []string{t.ID.Schema, t.ID.Table}
	if len(r.tables) > 0 {
		in := false
		for _, p := range r.tables {
			if match(p, id) {
				in = true
				break
			}
		}
		if !in {
			return nil
		}
	}
	var includes [][]string
	for _, p := range r.include {
		if match(p, id) {
			includes = append(includes, p)
		}
	}
	keep := func(c *Column) bool {
		if c.Key {
			return true
		}
		name := []string{t.ID.Schema, t.ID.Table, c.Name}
		for _, p := range r.exclude {
			if match(p, name) {
				return false
			}
		}
		if len(includes) == 0 {
			return true
		}
		for _, p := range includes {
			if match(p, name) {
				return true
			}
		}
		return false
	}
	s := &Table{ID: t.ID, Generation: t.Generation}
	oldToNew := make([]int, len(t.Columns))
	for i := range t.Columns {
		oldToNew[i] = -1
		if keep(&t.Columns[i]) {
			oldToNew[i] = len(s.Columns)
			s.Columns = append(s.Columns, t.Columns[i])
		}
	}
	if len(s.Columns) == len(t.Columns) {
		return t
	}
	for _, k := range t.KeyIdx {
		s.KeyIdx = append(s.KeyIdx, oldToNew[k])
	}
	return s
}

// project keeps the values of the columns shape kept (images are aligned
// with their table's columns; shape's are a subsequence of from's).
func project(from, shape *Table, vals []any) []any {
	if vals == nil {
		return nil
	}
	out := make([]any, 0, len(shape.Columns))
	j := 0
	for i := range from.Columns {
		if j < len(shape.Columns) && from.Columns[i].Name == shape.Columns[j].Name {
			out = append(out, vals[i])
			j++
		}
	}
	return out
}
