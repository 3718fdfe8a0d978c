package aggregate

import (
	"encoding/binary"
	"fmt"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/pipeline/binform"
	"github.com/sluice-cdc/sluice/transform/eval"
	"github.com/sluice-cdc/sluice/transform/window"
)

// group is one group's entry: its values, row count and aggregates, and
// its outputs' history (A3).
type group struct {
	key     []byte // the group values' key form
	values  []any  // the group values, as the first row of the group had them
	rows    int64
	emitted pipeline.Version // the version of the last output (zero: none)
	live    bool             // the last output was an insert or update
	aggs    []aggState

	// The batch's: the newest change applied to the group and its
	// record (nil for a group written again under A2); changed: it is
	// written after the batch.
	last    pipeline.Version
	rec     *pipeline.Record
	changed bool
}

// aggState is one aggregate of a group: an accumulator (count, sum,
// avg), the extreme of a multiset (min, max) or the number of distinct
// values of one (count_distinct).
type aggState struct {
	acc window.Accumulator
	// best is the extreme while known; unknown after the best value left
	// the multiset, when every value left in it is worse than best
	// (found again by a scan before the group is written).
	best     any
	known    bool
	distinct int64
}

// newGroup returns an empty group.
func (a *Aggregate) newGroup(gk []byte, values []any) (*group, error) {
	g := &group{key: gk, values: values, aggs: make([]aggState, len(a.opts.Aggregates))}
	for i, d := range a.opts.Aggregates {
		if !a.multi[i] {
			var err error
			if g.aggs[i].acc, err = window.NewAccumulator(d.Func); err != nil {
				return nil, err
			}
		}
		g.aggs[i].known = true
	}
	return g, nil
}

// An entry's flags.
const flagLive = 1

func (g *group) encode(a *Aggregate) ([]byte, error) {
	b := binform.AppendVersion(make([]byte, 0, 64), g.emitted)
	flag := byte(0)
	if g.live {
		flag |= flagLive
	}
	b = binary.AppendVarint(append(b, flag), g.rows)
	b = binary.AppendUvarint(b, uint64(len(g.values)))
	var err error
	for _, v := range g.values {
		if b, err = binform.Append(b, v); err != nil {
			return nil, err
		}
	}
	for i, d := range a.opts.Aggregates {
		s := &g.aggs[i]
		switch d.Func {
		case window.Min, window.Max:
			b = append(b, boolByte(s.known))
			if b, err = binform.Append(b, s.best); err != nil {
				return nil, err
			}
		case window.CountDistinct:
			b = binary.AppendVarint(b, s.distinct)
		default:
			if b, err = s.acc.Append(b); err != nil {
				return nil, err
			}
		}
	}
	return b, nil
}

// decodeGroup reads group gk's entry; a nil a reads only the history
// and the row count.
func decodeGroup(gk, v []byte, a *Aggregate) (*group, error) {
	r := binform.NewReader(v)
	g := &group{key: gk, emitted: r.Version()}
	g.live = r.Byte()&flagLive != 0
	g.rows = r.Varint()
	if a == nil {
		return g, r.Err()
	}
	n := r.Uvarint()
	if r.Err() != nil || n > uint64(r.Len()) {
		return nil, binform.ErrCorrupt
	}
	g.values = make([]any, n)
	for i := range g.values {
		g.values[i] = r.Value()
	}
	g.aggs = make([]aggState, len(a.opts.Aggregates))
	for i, d := range a.opts.Aggregates {
		s := &g.aggs[i]
		switch d.Func {
		case window.Min, window.Max:
			s.known = r.Byte() == 1
			s.best = r.Value()
		case window.CountDistinct:
			s.distinct = r.Varint()
			s.known = true
		default:
			var err error
			if s.acc, err = window.ReadAccumulator(r, d.Func); err != nil {
				return nil, fmt.Errorf("group state: %w", err)
			}
			s.known = true
		}
	}
	if r.Err() != nil {
		return nil, fmt.Errorf("group state: %w", r.Err())
	}
	return g, nil
}

func boolByte(b bool) byte {
	if b {
		return 1
	}
	return 0
}

// better reports whether a is a better extreme than b for f (min or max).
func better(f window.Func, a, b any) bool {
	c := eval.Compare(a, b)
	if f == window.Max {
		return c > 0
	}
	return c < 0
}

// result is aggregate i's value in g.
func (g *group) result(i int, f window.Func) any {
	s := &g.aggs[i]
	switch f {
	case window.Min, window.Max:
		return s.best
	case window.CountDistinct:
		return s.distinct
	}
	return s.acc.Result()
}

// contribution is what a source row adds to its group: its group key
// and values, per aggregate its argument (nil for count()), and the
// version of the change that made it (zero when stored before versions
// were: below every truncate, as such a row's change is).
type contribution struct {
	gk      []byte
	groups  []any
	args    []any
	version pipeline.Version
}

func (c *contribution) encode() ([]byte, error) {
	b := make([]byte, 0, 32)
	var err error
	for _, v := range c.groups {
		if b, err = binform.Append(b, v); err != nil {
			return nil, err
		}
	}
	for _, v := range c.args {
		if b, err = binform.Append(b, v); err != nil {
			return nil, err
		}
	}
	return binform.AppendVersion(b, c.version), nil
}

func (a *Aggregate) decodeContribution(v []byte) (*contribution, error) {
	r := binform.NewReader(v)
	c := &contribution{groups: make([]any, len(a.opts.GroupBy)), args: make([]any, len(a.opts.Aggregates))}
	for i := range c.groups {
		c.groups[i] = r.Value()
	}
	for i := range c.args {
		c.args[i] = r.Value()
	}
	if r.Err() == nil && r.Len() > 0 {
		c.version = r.Version()
	}
	if r.Err() != nil {
		return nil, fmt.Errorf("a row's contribution: %w", r.Err())
	}
	var err error
	c.gk, err = groupKey(c.groups)
	return c, err
}

// groupKey is the key form of a group's values: values SQL finds equal
// (5.00 and 5) are one group, as GROUP BY makes them.
func groupKey(values []any) ([]byte, error) {
	var b []byte
	for _, v := range values {
		var err error
		if b, err = binform.AppendKey(b, v); err != nil {
			return nil, err
		}
	}
	return b, nil
}
