// Package scope holds what the record transforms (filter, project,
// rename, cast, compute, mask, route) share: the tables an operator
// applies to, its run-time error policy, and the cache of what it
// compiled for each table shape.
package scope

import (
	"fmt"
	"path"
	"strings"

	"github.com/sluice-cdc/sluice/pipeline"
)

// Tables is the set of tables an operator applies to: "schema.table"
// patterns, each part a path.Match glob. Empty: every table.
type Tables struct {
	pats [][2]string
}

// NewTables compiles the patterns.
func NewTables(patterns []string) (Tables, error) {
	var t Tables
	for _, p := range patterns {
		if err := pipeline.CheckPattern(p, 2); err != nil {
			return Tables{}, err
		}
		s, tb, _ := strings.Cut(p, ".")
		t.pats = append(t.pats, [2]string{s, tb})
	}
	return t, nil
}

// Match reports whether the operator applies to table id.
func (t Tables) Match(id pipeline.TableID) bool {
	if len(t.pats) == 0 {
		return true
	}
	for _, p := range t.pats {
		if ok, _ := path.Match(p[0], id.Schema); !ok {
			continue
		}
		if ok, _ := path.Match(p[1], id.Table); ok {
			return true
		}
	}
	return false
}

// Policy is what an operator does with a record it cannot transform (a
// run-time error of an expression, a value a cast cannot convert, a shape
// the operator no longer fits).
type Policy string

const (
	// DLQ sends the record to the dead-letter queue with the operator's
	// name and the reason; the pipeline goes on (the default).
	DLQ Policy = "dlq"
	// Fail stops the pipeline with the error; nothing past the record is
	// acknowledged.
	Fail Policy = "fail"
)

// ParsePolicy reads a policy; "" is DLQ.
func ParsePolicy(s string) (Policy, error) {
	switch Policy(s) {
	case "", DLQ:
		return DLQ, nil
	case Fail:
		return Fail, nil
	}
	return "", fmt.Errorf("error policy %q: want dlq or fail", s)
}

// Rejects collects the records a Process call rejects, under a policy.
type Rejects struct {
	Op     string // the operator's name, for messages
	Policy Policy
	list   []pipeline.Rejected
}

// Add rejects r for err: under Fail it returns the error that stops the
// pipeline, under DLQ it keeps r (copied) and returns nil.
func (x *Rejects) Add(r *pipeline.Record, err error) error {
	if x.Policy == Fail {
		return fmt.Errorf("%s: table %s, version %s: %w", x.Op, tableOf(r), r.Version, err)
	}
	x.list = append(x.list, pipeline.Rejected{Record: *r, Err: fmt.Errorf("%s: %w", x.Op, err)})
	return nil
}

// Len is the number of records rejected since the last Result.
func (x *Rejects) Len() int { return len(x.list) }

// Result returns out with the rejected records (a *pipeline.Rejects) or
// a nil error, as Operator.Process does; it resets the collection.
func (x *Rejects) Result(out []pipeline.Record) ([]pipeline.Record, error) {
	if len(x.list) == 0 {
		return out, nil
	}
	rj := &pipeline.Rejects{Records: x.list}
	x.list = nil
	return out, rj
}

func tableOf(r *pipeline.Record) string {
	if r.Table == nil {
		return "-"
	}
	return r.Table.ID.String()
}

// Shapes caches what an operator made of each table shape (shapes are
// immutable, and a schema change brings a new one), with the error when
// the operator cannot apply to the shape: every record of it is then
// rejected with that error. Not safe for concurrent use.
type Shapes[T any] struct {
	m     map[*pipeline.Table]entry[T]
	last  *pipeline.Table
	lastE entry[T]
}

type entry[T any] struct {
	v   T
	err error
}

// Get returns the value for t, made by build the first time t is seen.
func (s *Shapes[T]) Get(t *pipeline.Table, build func(*pipeline.Table) (T, error)) (T, error) {
	if t == s.last && t != nil {
		return s.lastE.v, s.lastE.err
	}
	e, ok := s.m[t]
	if !ok {
		if s.m == nil {
			s.m = map[*pipeline.Table]entry[T]{}
		}
		e.v, e.err = build(t)
		s.m[t] = e
	}
	s.last, s.lastE = t, e
	return e.v, e.err
}

// FieldError is an operator that cannot apply to a table's shape: the
// config field at fault (an expression, a column list), the table, and
// why. Err may be an *eval.Error positioned inside the field's text.
type FieldError struct {
	Field string
	Table pipeline.TableID
	Err   error
}

func (e *FieldError) Error() string { return fmt.Sprintf("%s (table %s): %v", e.Field, e.Table, e.Err) }
func (e *FieldError) Unwrap() error { return e.Err }

// Pass appends in[i] to out, an output built in place over in's array
// (out started as in[:0] and holds records of in[:i]): a record that
// stays where it is is not copied.
func Pass(out, in []pipeline.Record, i int) []pipeline.Record {
	if len(out) == i {
		return out[:i+1]
	}
	return append(out, in[i])
}
