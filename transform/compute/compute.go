// Package compute is the compute transform: a new column whose value an
// expression gives (package eval), with a declared type that flows into
// the output shape, so into the Avro schema and every sink's DDL.
//
// The expression is evaluated over each record's new image (inserts,
// reads, updates); a delete's old image holds NULL in the column, and
// rows that predate the column in a sink keep NULL until they change. The
// expression's type is checked against the declared one when the shape
// is checked; a value that does not fit at run time (an integer out of
// range, a decimal with too many digits) rejects the record under the
// operator's error policy, as does a run-time error of the expression.
package compute

import (
	"fmt"
	"reflect"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/transform/eval"
	"github.com/sluice-cdc/sluice/transform/reshape"
	"github.com/sluice-cdc/sluice/transform/scope"
)

// Options define the column.
type Options struct {
	Column string // its name; no column of the table may have it
	Type   string // its type (eval.ParseType)
	Expr   string
}

// New makes the compute operator. A type eval.ParseType refuses is an
// error here, before any shape is known.
func New(name string, tables scope.Tables, policy scope.Policy, o Options) (*reshape.Op, error) {
	col, err := eval.ParseType(o.Column, o.Type)
	if err != nil {
		return nil, err
	}
	plan := func(in *pipeline.Table) (*reshape.Plan, error) {
		for _, c := range in.Columns {
			if c.Name == o.Column {
				what := "a column"
				if c.Key {
					what = "a primary-key column"
				}
				return nil, &scope.FieldError{Field: "column", Table: in.ID,
					Err: fmt.Errorf("%s is %s of the table; a computed column needs a name of its own", o.Column, what)}
			}
		}
		p, err := eval.Compile(o.Expr, in, func(t reflect.Type) error { return eval.Assignable(t, &col) })
		if err != nil {
			return nil, &scope.FieldError{Field: "expr", Table: in.ID, Err: err}
		}
		cols, src, conv := reshape.Same(in)
		out := col
		plan := reshape.Build(in, in.ID, append(cols, out), append(src, -1), append(conv, nil))
		plan.Compute = func(r *pipeline.Record, _ int) (any, error) {
			v, err := p.Eval(r)
			if err != nil {
				return nil, err
			}
			v, err = eval.FromExpr(&out, v)
			if err != nil {
				return nil, fmt.Errorf("column %s: %w", o.Column, err)
			}
			return v, nil
		}
		return plan, nil
	}
	return reshape.New(name, tables, policy, plan), nil
}
