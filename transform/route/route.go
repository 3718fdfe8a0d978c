// Package route is the route transform: it sends each record of its
// tables to the sinks of the first rule whose expression (package eval)
// holds for the record's new image, and the records no rule takes to the
// otherwise list (default: every sink). A rule may also name the topic
// Kafka sinks write its records to.
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
//
// Topics follow the same rule inside a Kafka sink: when rules name
// topics, an update or read written to one topic is a delete of its key
// in the route's other topics (the sink's own topic among them), and a
// delete or truncate goes to every topic of the route.
package route

import (
	"context"
	"fmt"
	"slices"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/transform/eval"
	"github.com/sluice-cdc/sluice/transform/scope"
)

// Rule sends the records When holds for to Sinks (empty: every sink),
// and Kafka sinks write them to Topic (a topic template with {prefix},
// {database}, {schema}, {table}; empty: the sink's own).
type Rule struct {
	When  string
	Sinks []string
	Topic string
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
	// gone is the Dest of a delete or truncate: every sink, and when a
	// rule names a topic, every topic of the route; nil otherwise.
	gone *pipeline.Dest
}

// New makes the operator; every sink a rule names must be one of
// o.Sinks.
func New(name string, tables scope.Tables, policy scope.Policy, o Options) (*Route, error) {
	r := &Route{tables: tables, opts: o, rejects: scope.Rejects{Op: name, Policy: policy}}
	targets := make([]Rule, 0, len(o.Rules)+1)
	targets = append(targets, o.Rules...)
	targets = append(targets, Rule{Sinks: o.Otherwise}) // the records no rule takes
	// Every topic the route writes to ("" is a Kafka sink's own), when a
	// rule names one.
	var topics []string
	for _, t := range targets {
		if t.Topic != "" && !slices.Contains(topics, t.Topic) {
			topics = append(topics, t.Topic)
		}
	}
	if len(topics) > 0 {
		// A delete is written to the sinks' own topic and to every
		// topic of a rule.
		r.gone = &pipeline.Dest{To: o.Sinks, AwayTopics: slices.Clone(topics)}
		topics = append(topics, "")
	}
	for _, t := range targets {
		to := t.Sinks
		if len(to) == 0 {
			to = o.Sinks
		}
		for _, s := range to {
			if !slices.Contains(o.Sinks, s) {
				return nil, fmt.Errorf("no sink is named %s; the sinks: %v", s, o.Sinks)
			}
		}
		var away, awayTopics []string
		for _, s := range o.Sinks {
			if !slices.Contains(to, s) {
				away = append(away, s)
			}
		}
		for _, tp := range topics {
			if tp != t.Topic {
				awayTopics = append(awayTopics, tp)
			}
		}
		r.insert = append(r.insert, &pipeline.Dest{To: to, Topic: t.Topic})
		r.other = append(r.other, &pipeline.Dest{To: to, Away: away, Topic: t.Topic, AwayTopics: awayTopics})
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
		rec := &in[i]
		if rec.Table != nil && r.tables.Match(rec.Table.ID) {
			dest, err := r.dest(rec)
			if err != nil {
				if err := r.rejects.Add(rec, err); err != nil {
					return nil, err
				}
				continue
			}
			rec.Dest = dest
		}
		out = scope.Pass(out, in, i)
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
	case pipeline.OpDelete, pipeline.OpTruncate:
		return r.gone, nil // every sink, every topic
	default:
		return nil, nil // shapes go to every sink
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
