// Package filter is the filter transform: it keeps the records of its
// tables whose new row matches an expression and turns the rest away.
//
// What happens to each operation (the rule: a sink never keeps a row the
// filter excludes now):
//
//	insert, read   kept when the new row matches, else dropped; a read
//	               that re-reads a row the sinks may hold (a re-snapshot
//	               or a repair: Record.Replaces) becomes a delete of the
//	               key at its version instead, so re-snapshotting a table
//	               after a change of where removes the rows it now
//	               excludes (and a repair of one converges)
//	update         kept when the new row matches; else it becomes a delete
//	               of the key at the update's version, so a row that stops
//	               matching leaves the sinks (when the sink never held it,
//	               the delete is a harmless tombstone)
//	delete         always kept: the old image often holds only the key
//	               (REPLICA IDENTITY DEFAULT), so whether the row matched
//	               is unknown, and deleting a row a sink does not hold
//	               changes nothing
//	truncate, heartbeat, shape   always kept
//
// A dropped record is acknowledged with its batch. Versions and positions
// pass through untouched (Invariants 1, 4).
package filter

import (
	"context"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/transform/eval"
	"github.com/sluice-cdc/sluice/transform/scope"
)

// Filter is the operator.
type Filter struct {
	tables  scope.Tables
	where   string
	rejects scope.Rejects
	progs   scope.Shapes[*eval.Program]
}

// New makes a filter named name (for errors and the dead-letter queue)
// keeping the records of tables whose new row makes where true.
func New(name string, tables scope.Tables, where string, policy scope.Policy) *Filter {
	return &Filter{tables: tables, where: where, rejects: scope.Rejects{Op: name, Policy: policy}}
}

func (f *Filter) program(t *pipeline.Table) (*eval.Program, error) {
	return f.progs.Get(t, func(t *pipeline.Table) (*eval.Program, error) {
		return eval.Compile(f.where, t, eval.WantBool)
	})
}

// Shape returns t unchanged, or the error a record of t gets (the
// expression does not compile against it).
func (f *Filter) Shape(t *pipeline.Table) (*pipeline.Table, error) {
	if !f.tables.Match(t.ID) {
		return t, nil
	}
	if _, err := f.program(t); err != nil {
		return nil, &scope.FieldError{Field: "where", Table: t.ID, Err: err}
	}
	return t, nil
}

// Process filters in place: the output reuses in's array.
func (f *Filter) Process(_ context.Context, in []pipeline.Record) ([]pipeline.Record, error) {
	out := in[:0]
	for i := range in {
		r := &in[i]
		keep, err := f.keep(r)
		if err != nil {
			if err := f.rejects.Add(r, err); err != nil {
				return nil, err
			}
			continue
		}
		switch keep {
		case pass:
			out = scope.Pass(out, in, i)
		case remove:
			out = append(out, r.AsDelete())
		}
	}
	return f.rejects.Result(out)
}

type verdict int

const (
	drop verdict = iota
	pass
	remove
)

func (f *Filter) keep(r *pipeline.Record) (verdict, error) {
	if r.Table == nil || !f.tables.Match(r.Table.ID) {
		return pass, nil
	}
	switch r.Op {
	case pipeline.OpInsert, pipeline.OpRead, pipeline.OpUpdate:
	default:
		return pass, nil
	}
	p, err := f.program(r.Table)
	if err != nil {
		return drop, &scope.FieldError{Field: "where", Table: r.Table.ID, Err: err}
	}
	ok, err := p.Bool(r)
	switch {
	case err != nil:
		return drop, err
	case ok:
		return pass, nil
	case r.Op == pipeline.OpUpdate, r.Op == pipeline.OpRead && r.Replaces:
		// A delete at the record's version: every later change of the
		// row sorts above it and brings it back (Invariant 4).
		return remove, nil
	}
	return drop, nil
}

// Snapshot: the filter keeps no state.
func (*Filter) Snapshot() ([]byte, error) { return nil, nil }

// Restore: the filter keeps no state.
func (*Filter) Restore([]byte) error { return nil }
