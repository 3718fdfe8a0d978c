// Package route is the route transform: it sends each record of its
// tables to the sinks of the first rule whose expression (package eval)
// holds for the record's new image, and the records no rule takes to the
// otherwise list (default: every sink).
//
// A row must not stay in a sink it no longer goes to: an update or a
// snapshot read routed to some sinks is a delete of its key, at its
// version, in every other sink (pipeline.Dest.Away); a later change that
// routes the row back sorts above that tombstone (Invariant 4). An insert
// needs no such delete (a key that existed before was deleted everywhere:
// deletes and truncates always go to every sink), and neither do deletes
// and truncates, which go to every sink. Changing the rules and replaying
// changes a sink already holds can leave such a row behind; re-snapshot
// the tables after a change of the rules.
package route

import (
	"context"
	"fmt"
	"slices"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/transform/eval"
	"github.com/sluice-cdc/sluice/transform/scope"
)

// Rule sends the records When holds for to Sinks.
type Rule struct {
	When  string
	Sinks []string
}

// Options define the routing.
type Options struct {
	Rules []Rule
	// Otherwise takes the records no rule takes; empty: every sink.
	Otherwise []string
	// Sinks lists every sink of the pipeline.
	Sinks []string
}

// Route is the operator.
type Route struct {
	tables  scope.Tables
	opts    Options
	rejects scope.Rejects
	progs   scope.Shapes[[]*eval.Program]
	// Per rule, then otherwise (last): the Dest of an insert and of an
	// update or read.
	insert, other []*pipeline.Dest
}

// New makes the operator; every sink a rule names must be one of
// o.Sinks.
func New(name string, tables scope.Tables, policy scope.Policy, o Options) (*Route, error) {
	r := &Route{tables: tables, opts: o, rejects: scope.Rejects{Op: name, Policy: policy}}
	lists := make([][]string, 0, len(o.Rules)+1)
	for _, rule := range o.Rules {
		lists = append(lists, rule.Sinks)
	}
	otherwise := o.Otherwise
	if len(otherwise) == 0 {
		otherwise = o.Sinks
	}
	lists = append(lists, otherwise)
	for _, to := range lists {
		for _, s := range to {
			if !slices.Contains(o.Sinks, s) {
				return nil, fmt.Errorf("no sink is named %s; the sinks: %v", s, o.Sinks)
			}
		}
		var away []string
		for _, s := range o.Sinks {
			if !slices.Contains(to, s) {
				away = append(away, s)
			}
		}
		r.insert = append(r.insert, &pipeline.Dest{To: to})
		r.other = append(r.other, &pipeline.Dest{To: to, Away: away})
	}
	return r, nil
}

func (r *Route) programs(t *pipeline.Table) ([]*eval.Program, error) {
	return r.progs.Get(t, func(t *pipeline.Table) ([]*eval.Program, error) {
		ps := make([]*eval.Program, len(r.opts.Rules))
		for i, rule := range r.opts.Rules {
			p, err := eval.Compile(rule.When, t, eval.WantBool)
			if err != nil {
				return nil, &scope.FieldError{Field: fmt.Sprintf("rules[%d].when", i), Table: t.ID, Err: err}
			}
			ps[i] = p
		}
		return ps, nil
	})
}

// Shape returns t unchanged, or the error its records get.
func (r *Route) Shape(t *pipeline.Table) (*pipeline.Table, error) {
	if !r.tables.Match(t.ID) {
		return t, nil
	}
	if _, err := r.programs(t); err != nil {
		return nil, err
	}
	return t, nil
}

// Process sets each record's Dest, in place.
func (r *Route) Process(_ context.Context, in []pipeline.Record) ([]pipeline.Record, error) {
	out := in[:0]
	for i := range in {
		rec := in[i]
		if rec.Table != nil && r.tables.Match(rec.Table.ID) {
			var err error
			if rec.Dest, err = r.dest(&rec); err != nil {
				if err := r.rejects.Add(&in[i], err); err != nil {
					return nil, err
				}
				continue
			}
		}
		out = append(out, rec)
	}
	return r.rejects.Result(out)
}

func (r *Route) dest(rec *pipeline.Record) (*pipeline.Dest, error) {
	var dests []*pipeline.Dest
	switch rec.Op {
	case pipeline.OpInsert:
		dests = r.insert
	case pipeline.OpUpdate, pipeline.OpRead:
		dests = r.other
	default:
		return nil, nil // deletes, truncates and shapes go to every sink
	}
	ps, err := r.programs(rec.Table)
	if err != nil {
		return nil, err
	}
	for i, p := range ps {
		ok, err := p.Bool(rec)
		if err != nil {
			return nil, fmt.Errorf("rules[%d].when: %w", i, err)
		}
		if ok {
			return dests[i], nil
		}
	}
	return dests[len(dests)-1], nil
}

// Snapshot: routing keeps no state.
func (*Route) Snapshot() ([]byte, error) { return nil, nil }

// Restore: routing keeps no state.
func (*Route) Restore([]byte) error { return nil }
