// Package reshape holds the transforms that change a table's shape
// column by column: project (keep or drop columns), rename (columns and
// the table), cast (a column to another type); package mask and package
// compute build on its Op.
//
// Each works out, once per table shape, a Plan: the output shape and,
// per output column, the input column it comes from and the conversion
// of its values. Records are then mapped image by image; a value the
// conversion refuses rejects the record under the operator's error
// policy. Unchanged values (unchanged TOAST) stay unchanged: the sink
// keeps the value it stored, which went through the same conversion.
// Versions and positions pass through untouched (Invariants 1, 4), and no
// operator changes a key column silently: dropping, casting, masking or
// computing one is refused when the shape is checked (renaming one is
// allowed: it names the same values).
package reshape

import (
	"context"
	"fmt"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/transform/scope"
)

// Plan maps records of one input shape to the output shape.
type Plan struct {
	Out *pipeline.Table
	// Src is, per output column, the input column it takes its value
	// from; -1 for a column Compute gives.
	Src []int
	// Conv is, per output column, the conversion of its non-NULL,
	// non-unchanged values (nil: as is).
	Conv []func(any) (any, error)
	// Compute gives the value of a column whose Src is -1 for the record's
	// new image (the old image holds NULL there). nil when no column is
	// computed.
	Compute func(r *pipeline.Record, col int) (any, error)
}

// Identity reports whether the plan changes nothing.
func (p *Plan) Identity(in *pipeline.Table) bool { return p.Out == in }

// image maps one image of r (nil stays nil), taking the new image's
// slots from blk.
func (p *Plan) image(r *pipeline.Record, img []any, after bool, blk *block) ([]any, error) {
	if img == nil {
		return nil, nil
	}
	out := blk.take(len(p.Src))
	for i, s := range p.Src {
		if s < 0 {
			if after {
				v, err := p.Compute(r, i)
				if err != nil {
					return nil, err
				}
				out[i] = v
			}
			continue
		}
		v := img[s]
		if v != nil && v != pipeline.UnchangedValue && p.Conv[i] != nil {
			var err error
			if v, err = p.Conv[i](v); err != nil {
				return nil, fmt.Errorf("column %s: %w", r.Table.Columns[s].Name, err)
			}
		}
		out[i] = v
	}
	return out, nil
}

// block hands out image slices from shared arrays, one allocation for
// many records (the records of a batch live and die together).
type block struct{ free []any }

const blockSlots = 4096

func (b *block) take(n int) []any {
	if len(b.free) < n {
		b.free = make([]any, max(blockSlots, n))
	}
	out := b.free[:n:n]
	b.free = b.free[n:]
	return out
}

// Planner works out the plan of an input shape; an error means the
// operator cannot apply to it (a *scope.FieldError naming the field at
// fault).
type Planner func(in *pipeline.Table) (*Plan, error)

// Op is a reshaping operator.
type Op struct {
	tables  scope.Tables
	plan    Planner
	rejects scope.Rejects
	plans   scope.Shapes[*Plan]
}

// New makes an operator named name (for errors and the dead-letter
// queue) applying plan to the records of tables.
func New(name string, tables scope.Tables, policy scope.Policy, plan Planner) *Op {
	return &Op{tables: tables, plan: plan, rejects: scope.Rejects{Op: name, Policy: policy}}
}

func (o *Op) get(t *pipeline.Table) (*Plan, error) {
	return o.plans.Get(t, func(t *pipeline.Table) (*Plan, error) {
		p, err := o.plan(t)
		if err != nil {
			return nil, err
		}
		if p.Out != t {
			p.Out.Generation = t.Generation
			for i, s := range p.Src {
				// Rows that predate a column hold its Missing value: it
				// goes through the same conversion.
				if s >= 0 && p.Conv[i] != nil && p.Out.Columns[i].Missing != nil {
					if p.Out.Columns[i].Missing, err = p.Conv[i](p.Out.Columns[i].Missing); err != nil {
						return nil, &scope.FieldError{Field: "columns", Table: t.ID,
							Err: fmt.Errorf("column %s: its default for existing rows: %w", t.Columns[s].Name, err)}
					}
				}
			}
		}
		return p, nil
	})
}

// Shape returns the output shape of t, or the error its records get.
func (o *Op) Shape(t *pipeline.Table) (*pipeline.Table, error) {
	if !o.tables.Match(t.ID) {
		return t, nil
	}
	p, err := o.get(t)
	if err != nil {
		return nil, err
	}
	return p.Out, nil
}

// Process maps in place: the output reuses in's array.
func (o *Op) Process(_ context.Context, in []pipeline.Record) ([]pipeline.Record, error) {
	out := in[:0]
	var blk block
	for i := range in {
		r := &in[i]
		if r.Table == nil || !r.Op.Shaped() || !o.tables.Match(r.Table.ID) {
			out = scope.Pass(out, in, i)
			continue
		}
		p, err := o.get(r.Table)
		if err == nil && !p.Identity(r.Table) {
			var before, after []any
			before, err = p.image(r, r.Before, false, &blk)
			if err == nil {
				after, err = p.image(r, r.After, true, &blk)
			}
			if err == nil {
				r.Table, r.Before, r.After = p.Out, before, after
			}
		}
		if err != nil {
			if err := o.rejects.Add(r, err); err != nil {
				return nil, err
			}
			continue
		}
		out = scope.Pass(out, in, i)
	}
	return o.rejects.Result(out)
}

// Snapshot: reshaping keeps no state.
func (*Op) Snapshot() ([]byte, error) { return nil, nil }

// Restore: reshaping keeps no state.
func (*Op) Restore([]byte) error { return nil }

// Same returns an identity plan's parts for in: every column from
// itself, no conversion. Planners start from it.
func Same(in *pipeline.Table) ([]pipeline.Column, []int, []func(any) (any, error)) {
	cols := append([]pipeline.Column(nil), in.Columns...)
	src := make([]int, len(cols))
	for i := range src {
		src[i] = i
	}
	return cols, src, make([]func(any) (any, error), len(cols))
}

// Build makes the plan's output table from in and the output columns,
// keys found by the Key flag.
func Build(in *pipeline.Table, id pipeline.TableID, cols []pipeline.Column, src []int, conv []func(any) (any, error)) *Plan {
	out := &pipeline.Table{ID: id, Columns: cols, Generation: in.Generation}
	// Key order follows the input's key order.
	for _, k := range in.KeyIdx {
		for i, s := range src {
			if s == k {
				out.KeyIdx = append(out.KeyIdx, i)
			}
		}
	}
	return &Plan{Out: out, Src: src, Conv: conv}
}
