package join

import (
	"bytes"
	"fmt"
	"slices"
	"strings"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/pipeline/binform"
)

// observeShape records a new shape of an input table and rebuilds the
// output shape. It sets ro's refresh and refreshChildren to the lookups
// and children whose embedded columns differ from the previous shape's
// (none for a table seen for the first time).
func (j *Join) observeShape(st joinState, t *pipeline.Table, ro *roles) error {
	name := t.ID.String()
	known := j.shapes[name] == t || len(ro.lookupN) == 0 && len(ro.childN) == 0
	if (!ro.isFrom || j.from == t) && known {
		return nil
	}
	has := func(c string) bool {
		return slices.ContainsFunc(t.Columns, func(x pipeline.Column) bool { return x.Name == c })
	}
	for _, n := range ro.lookupN {
		l := j.opts.With[n]
		if len(t.KeyIdx) != len(l.On) {
			return fmt.Errorf("lookup %s: on lists %d column(s) but %s has a %d-column primary key (%s); list the columns of %s that hold it, in key order",
				l.As, len(l.On), name, len(t.KeyIdx), keyNames(t), j.opts.From)
		}
		for _, c := range l.Columns {
			if !has(c) {
				return fmt.Errorf("lookup %s: %s has no column %q (listed in columns)", l.As, name, c)
			}
		}
	}
	for _, n := range ro.childN {
		c := j.opts.Children[n]
		if len(t.KeyIdx) == 0 {
			return fmt.Errorf("children %s: %s has no primary key: nested rows need one", c.As, name)
		}
		for what, cols := range map[string][]string{"on": c.On, "order_by": c.OrderBy, "columns": c.Columns} {
			for _, col := range cols {
				if !has(col) {
					return fmt.Errorf("children %s: %s has no column %q (listed in %s)", c.As, name, col, what)
				}
			}
		}
		if err := j.checkOn(c, j.from); err != nil {
			return err
		}
	}
	if ro.isFrom {
		if len(t.KeyIdx) == 0 {
			return fmt.Errorf("%s has no primary key: joined rows need one", name)
		}
		for _, l := range j.opts.With {
			if has(l.As) {
				return fmt.Errorf("lookup %s: %s already has a column %q; choose another name for as", l.As, name, l.As)
			}
			for _, c := range l.On {
				if !has(c) {
					return fmt.Errorf("lookup %s: %s has no column %q (listed in on)", l.As, name, c)
				}
			}
		}
		for _, c := range j.opts.Children {
			if has(c.As) {
				return fmt.Errorf("children %s: %s already has a column %q; choose another name for as", c.As, name, c.As)
			}
			if err := j.checkOn(c, t); err != nil {
				return err
			}
		}
	}
	if err := st.putShape(t); err != nil {
		return err
	}
	if prev := j.shapes[name]; prev != nil {
		for _, n := range ro.lookupN {
			if !sameMembers(lookupColumns(prev, j.opts.With[n]), lookupColumns(t, j.opts.With[n])) {
				ro.refresh = append(ro.refresh, n)
			}
		}
		for _, n := range ro.childN {
			if !sameMembers(childColumns(prev, j.opts.Children[n]), childColumns(t, j.opts.Children[n])) {
				ro.refreshChildren = append(ro.refreshChildren, n)
			}
		}
	}
	if ro.isFrom {
		j.from = t
	}
	if len(ro.lookupN) > 0 || len(ro.childN) > 0 {
		j.setShape(name, t)
	}
	j.rebuildOut()
	return nil
}

// setShape records the latest shape of a looked-up or child table, and
// the columns the children of that table are rendered with.
func (j *Join) setShape(name string, t *pipeline.Table) {
	j.shapes[name] = t
	for n, c := range j.opts.Children {
		if c.Table == name {
			j.childFields[n] = childColumns(t, c)
		}
	}
}

// checkOn checks that child c's on columns match the from table's primary
// key (from: its shape, nil while unknown).
func (j *Join) checkOn(c Child, from *pipeline.Table) error {
	if from == nil || len(from.KeyIdx) == len(c.On) {
		return nil
	}
	return fmt.Errorf("children %s: on lists %d column(s) but %s has a %d-column primary key (%s); list the columns of %s that hold it, in key order",
		c.As, len(c.On), j.opts.From, len(from.KeyIdx), keyNames(from), c.Table)
}

// sameMembers reports whether two lookups' embedded columns render the
// same objects: the same names, types and missing values, in order.
func sameMembers(a, b []pipeline.Column) bool {
	return slices.EqualFunc(a, b, func(x, y pipeline.Column) bool {
		if x.Name != y.Name || x.Type != y.Type || x.Elem != y.Elem {
			return false
		}
		mx, errX := binform.Append(nil, x.Missing)
		my, errY := binform.Append(nil, y.Missing)
		return errX == nil && errY == nil && bytes.Equal(mx, my)
	})
}

func keyNames(t *pipeline.Table) string {
	names := make([]string, len(t.KeyIdx))
	for i, k := range t.KeyIdx {
		names[i] = t.Columns[k].Name
	}
	return strings.Join(names, ", ")
}

// rebuildOut derives the output shape: the from table's columns, then one
// JSON column per lookup whose Fields are the looked-up columns, then one
// per child holding an array of objects whose Fields are the child
// columns.
func (j *Join) rebuildOut() {
	if j.from == nil {
		return
	}
	cols := slices.Clone(j.from.Columns)
	for _, l := range j.opts.With {
		c := pipeline.Column{Name: l.As, Type: pipeline.TypeJSON, Nullable: true, SourceType: "join " + l.Table,
			Fields: []pipeline.Column{}}
		if t := j.shapes[l.Table]; t != nil {
			c.Fields = lookupColumns(t, l)
		}
		cols = append(cols, c)
	}
	for _, ch := range j.opts.Children {
		c := pipeline.Column{Name: ch.As, Type: pipeline.TypeJSON, SourceType: "nest " + ch.Table, Fields: []pipeline.Column{}}
		if t := j.shapes[ch.Table]; t != nil {
			c.Fields = childColumns(t, ch)
		}
		cols = append(cols, c)
	}
	j.gen++
	id := pipeline.TableID{Database: j.from.ID.Database, Schema: j.outName[0], Table: j.outName[1]}
	j.out = &pipeline.Table{ID: id, Columns: cols, KeyIdx: slices.Clone(j.from.KeyIdx), Generation: j.gen}
}

// lookupColumns returns l's selected columns of t, as plain (non-key) members.
func lookupColumns(t *pipeline.Table, l Lookup) []pipeline.Column {
	return members(t, l.Columns)
}

// childColumns returns c's selected columns of t, as plain members.
func childColumns(t *pipeline.Table, c Child) []pipeline.Column {
	return members(t, c.Columns)
}

// members returns the columns of t named in sel (empty: all), as plain
// (non-key) members.
func members(t *pipeline.Table, sel []string) []pipeline.Column {
	var cols []pipeline.Column
	for _, c := range t.Columns {
		if len(sel) == 0 || slices.Contains(sel, c.Name) {
			c.Key = false
			cols = append(cols, c)
		}
	}
	return cols
}
