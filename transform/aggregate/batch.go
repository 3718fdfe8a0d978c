package aggregate

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/pipeline/binform"
	"github.com/sluice-cdc/sluice/transform/window"
)

// batch applies one batch in one transaction: the rows, groups and
// multiset values it reads are decoded once and written once, when the
// batch's groups are written (emit).
type batch struct {
	a      *Aggregate
	s      *store
	origin pipeline.Version // the Origin of the batch's outputs
	rows   map[string]*cachedRow
	groups map[string]*group
	vals   map[string]*cachedVal
	order  []*group // the groups changed, in the order they first changed
}

type cachedRow struct {
	c     *contribution // nil: none
	dirty bool
}

type cachedVal struct {
	n     int64
	v     any
	dirty bool
}

func newBatch(a *Aggregate, s *store, origin pipeline.Version) *batch {
	return &batch{a: a, s: s, origin: origin, rows: map[string]*cachedRow{}, groups: map[string]*group{}, vals: map[string]*cachedVal{}}
}

// row returns row key's contribution, nil when it has none.
func (b *batch) row(key []byte) (*contribution, error) {
	if c, ok := b.rows[string(key)]; ok {
		return c.c, nil
	}
	var c *contribution
	if v := b.s.rows.Get(key); v != nil {
		var err error
		if c, err = b.a.decodeContribution(v); err != nil {
			return nil, err
		}
	}
	b.rows[string(key)] = &cachedRow{c: c}
	return c, nil
}

func (b *batch) setRow(key []byte, c *contribution) {
	b.rows[string(key)] = &cachedRow{c: c, dirty: true}
}

// group returns group gk, loaded or made empty with values.
func (b *batch) group(gk []byte, values []any) (*group, error) {
	if g, ok := b.groups[string(gk)]; ok {
		return g, nil
	}
	var g *group
	var err error
	if v := b.s.groups.Get(gk); v != nil {
		g, err = decodeGroup(gk, v, b.a)
	} else {
		g, err = b.a.newGroup(gk, values)
	}
	if err != nil {
		return nil, err
	}
	if g.rows == 0 && values != nil {
		g.values = values // a group that comes back takes its new row's values
	}
	b.groups[string(gk)] = g
	return g, nil
}

// touch marks g changed by r.
func (b *batch) touch(g *group, r *pipeline.Record) {
	if !g.changed {
		g.changed = true
		b.order = append(b.order, g)
	}
	if r != nil {
		if g.last.Less(r.Version) {
			g.last = r.Version
		}
		g.rec = r
	}
}

// rewrite marks group gk to be written again (A2).
func (b *batch) rewrite(gk []byte) error {
	if b.s.groups.Get(gk) == nil {
		return nil // a tombstone forgotten: its delete is durable
	}
	g, err := b.group(gk, nil)
	if err != nil {
		return err
	}
	if g.rows == 0 {
		g.live = true // its delete may be lost: written again
	}
	b.touch(g, nil)
	return nil
}

// apply applies an insert, update, read or delete. What the record
// itself may lack (a key, a value the change does not carry, a column of
// its shape) is read before the state changes: such a record is rejected
// and changes nothing (Invariant 7: it goes to the dead-letter queue and
// the batch goes on). A failure of the state itself (a stored entry that
// does not decode) is fatal: the transaction is not committed.
func (b *batch) apply(r *pipeline.Record) error {
	p, err := b.a.plans.Get(r.Table, b.a.plan)
	if err != nil {
		return err
	}
	if r.Op == pipeline.OpDelete {
		key, err := binform.RowKey(r.Table, r.Before)
		if err != nil {
			return err
		}
		old, err := b.row(key)
		if err != nil || old == nil {
			return fatal(err)
		}
		if err := b.retract(old, r); err != nil {
			return fatal(err)
		}
		b.setRow(key, nil)
		return nil
	}
	key, err := binform.RowKey(r.Table, r.After)
	if err != nil {
		return err
	}
	var moved []byte // the old key of an update that changed the key
	if r.Before != nil {
		if bk, err := binform.RowKey(r.Table, r.Before); err == nil && !bytes.Equal(bk, key) {
			moved = bk
		}
	}
	old, err := b.row(key)
	if err != nil {
		return fatal(err)
	}
	// The row's earlier values (for those the change does not carry): at
	// its old key when the update moved it.
	prior := old
	var left *contribution
	if moved != nil {
		if left, err = b.row(moved); err != nil {
			return fatal(err)
		}
		prior = left
	}
	c, err := b.a.contribution(r, p, prior)
	if err != nil {
		return err
	}
	c.version = r.Version
	if left != nil {
		if err := b.retract(left, r); err != nil {
			return fatal(err)
		}
		b.setRow(moved, nil)
	}
	if old != nil {
		if err := b.retract(old, r); err != nil {
			return fatal(err)
		}
	}
	if err := b.add(c, r); err != nil {
		return fatal(err)
	}
	b.setRow(key, c)
	return nil
}

// fatal marks a failure of the state as fatal (nil stays nil).
func fatal(err error) error {
	if err == nil {
		return nil
	}
	return pipeline.Fatal(err)
}

// contribution reads what r's new row contributes; a value the change
// does not carry (an unchanged TOAST value) is prior's.
func (a *Aggregate) contribution(r *pipeline.Record, p *plan, prior *contribution) (*contribution, error) {
	c := &contribution{groups: make([]any, len(p.groups)), args: make([]any, len(p.args))}
	value := func(col int, held func() any) (any, error) {
		v := r.After[col]
		if v != pipeline.UnchangedValue {
			return v, nil
		}
		if prior == nil {
			return nil, fmt.Errorf("column %s of %s: the change does not carry its value and the aggregate holds no earlier one (%s)",
				r.Table.Columns[col].Name, r.Table.ID, pipeline.NotCarried)
		}
		return held(), nil
	}
	var err error
	for i, col := range p.groups {
		if c.groups[i], err = value(col, func() any { return prior.groups[i] }); err != nil {
			return nil, err
		}
	}
	for i, col := range p.args {
		if col < 0 {
			continue // count()
		}
		if c.args[i], err = value(col, func() any { return prior.args[i] }); err != nil {
			return nil, err
		}
	}
	if c.gk, err = groupKey(c.groups); err != nil {
		return nil, err
	}
	return c, nil
}

// add counts c in its group.
func (b *batch) add(c *contribution, r *pipeline.Record) error {
	g, err := b.group(c.gk, c.groups)
	if err != nil {
		return err
	}
	b.touch(g, r)
	g.rows++
	for i, d := range b.a.opts.Aggregates {
		v := c.args[i]
		if !b.a.multi[i] {
			g.aggs[i].acc.Add(v)
			continue
		}
		if v == nil {
			continue
		}
		n, err := b.count(i, g.key, v, 1)
		if err != nil {
			return err
		}
		s := &g.aggs[i]
		switch d.Func {
		case window.CountDistinct:
			if n == 1 {
				s.distinct++
			}
		default:
			// Unknown, every value left is worse than best: v at least
			// as good is the extreme.
			if s.best == nil || better(d.Func, v, s.best) || !s.known && !better(d.Func, s.best, v) {
				s.best, s.known = v, true
			}
		}
	}
	return nil
}

// retract takes c out of its group.
func (b *batch) retract(c *contribution, r *pipeline.Record) error {
	g, err := b.group(c.gk, nil)
	if err != nil {
		return err
	}
	b.touch(g, r)
	g.rows--
	for i, d := range b.a.opts.Aggregates {
		v := c.args[i]
		if !b.a.multi[i] {
			g.aggs[i].acc.Remove(v)
			continue
		}
		if v == nil {
			continue
		}
		n, err := b.count(i, g.key, v, -1)
		if err != nil {
			return err
		}
		s := &g.aggs[i]
		switch {
		case n > 0:
		case d.Func == window.CountDistinct:
			s.distinct--
		case s.known && s.best != nil && !better(d.Func, s.best, v):
			s.known = false // the extreme left: found again before the group is written
		}
	}
	return nil
}

// count adds delta to value v's multiplicity in aggregate n's multiset
// of group gk and returns the new one.
func (b *batch) count(n int, gk []byte, v any, delta int64) (int64, error) {
	vk, err := binform.AppendKey(nil, v)
	if err != nil {
		return 0, err
	}
	k := valKey(n, gk, vk)
	cv, ok := b.vals[string(k)]
	if !ok {
		cv = &cachedVal{}
		if stored := b.s.vals.Get(k); stored != nil {
			if cv.n, cv.v, err = decodeVal(stored); err != nil {
				return 0, err
			}
		}
		b.vals[string(k)] = cv
	}
	if cv.n == 0 {
		cv.v = v
	}
	cv.n += delta
	cv.dirty = true
	return cv.n, nil
}

func decodeVal(b []byte) (int64, any, error) {
	r := binform.NewReader(b)
	n := int64(r.Uvarint())
	v := r.Value()
	return n, v, r.Err()
}

// extreme finds aggregate n's extreme in group g by a scan of its
// multiset (written before: flushVals).
func (b *batch) extreme(n int, f window.Func, g *group) error {
	s := &g.aggs[n]
	s.best, s.known = nil, true
	prefix := valKey(n, g.key, nil)
	return b.s.vals.Scan(prefix, func(_, val []byte) error {
		c, v, err := decodeVal(val)
		if err != nil {
			return err
		}
		if c > 0 && (s.best == nil || better(f, v, s.best)) {
			s.best = v
		}
		return nil
	})
}

// flushVals writes the multiset values the batch changed.
func (b *batch) flushVals() error {
	for k, cv := range b.vals {
		if !cv.dirty {
			continue
		}
		cv.dirty = false
		if cv.n <= 0 {
			if err := b.s.vals.Delete([]byte(k)); err != nil {
				return err
			}
			continue
		}
		v, err := binform.Append(binary.AppendUvarint(nil, uint64(cv.n)), cv.v)
		if err != nil {
			return err
		}
		if err := b.s.vals.Put([]byte(k), v); err != nil {
			return err
		}
	}
	return nil
}

// flushRows writes the contributions the batch changed.
func (b *batch) flushRows() error {
	for k, c := range b.rows {
		if !c.dirty {
			continue
		}
		c.dirty = false
		if c.c == nil {
			if err := b.s.rows.Delete([]byte(k)); err != nil {
				return err
			}
			continue
		}
		v, err := c.c.encode()
		if err != nil {
			return err
		}
		if err := b.s.rows.Put([]byte(k), v); err != nil {
			return err
		}
	}
	return nil
}

// emit writes the rows, the multisets and the groups the batch changed,
// and appends the groups' outputs (A2, A3).
func (b *batch) emit(out []pipeline.Record) ([]pipeline.Record, error) {
	if err := b.flushRows(); err != nil {
		return out, err
	}
	if err := b.flushVals(); err != nil {
		return out, err
	}
	for _, g := range b.order {
		var err error
		if out, err = b.write(g, out); err != nil {
			return out, err
		}
	}
	b.order = b.order[:0]
	return out, nil
}

// write stores group g after the batch changed it and appends its
// output: the group's row while it has rows, a delete when its last row
// left (nothing when it never had an output).
func (b *batch) write(g *group, out []pipeline.Record) ([]pipeline.Record, error) {
	g.changed = false
	a := b.a
	for i, d := range a.opts.Aggregates {
		if a.multi[i] && !g.aggs[i].known {
			if err := b.extreme(i, d.Func, g); err != nil {
				return out, err
			}
		}
	}
	if g.rows == 0 && !g.live {
		// Nothing of it is in the sinks: its tombstone, if any, stays.
		if g.emitted == (pipeline.Version{}) {
			return out, b.s.groups.Delete(g.key)
		}
		return out, b.put(g)
	}
	if a.out == nil {
		return out, fmt.Errorf("groups to write but no shape of %s known", a.opts.Input)
	}
	// A3 (Invariant 4): above the group's last output, whatever the
	// change's own version.
	v := g.last
	if !g.emitted.Less(v) {
		v = g.emitted.Next()
	}
	g.emitted, g.last = v, pipeline.Version{}
	rec := pipeline.Record{Table: a.out, Version: v, Origin: b.origin}
	if g.rec != nil {
		rec.EventTime, rec.TxID, rec.Pos = g.rec.EventTime, g.rec.TxID, g.rec.Pos
	}
	g.rec = nil
	img := make([]any, len(a.out.Columns))
	copy(img, g.values)
	switch {
	case g.rows == 0:
		rec.Op, rec.Before, g.live = pipeline.OpDelete, img, false
		if err := b.s.tomb(v, b.origin, g.key); err != nil {
			return out, err
		}
	default:
		for i, d := range a.opts.Aggregates {
			img[len(g.values)+i] = g.result(i, d.Func)
		}
		rec.Op, rec.After = pipeline.OpInsert, img
		if g.live {
			rec.Op = pipeline.OpUpdate
		}
		g.live = true
	}
	if err := b.put(g); err != nil {
		return out, err
	}
	if err := b.s.record(b.origin, g.key); err != nil {
		return out, err
	}
	rec.Size = pipeline.EstimateSize(&rec)
	return append(out, rec), nil
}

func (b *batch) put(g *group) error {
	v, err := g.encode(b.a)
	if err != nil {
		return err
	}
	return b.s.groups.Put(g.key, v)
}

// truncate takes out every row whose change sorts below r (Invariant 4:
// a truncate is a versioned barrier). When a row sorts above it (a
// re-read's sweep, Invariant 14, follows the rows the read emitted), the
// rows below are retracted one by one, and their groups are written with
// the batch's others. Otherwise it writes the groups the batch changed so
// far, empties the rows, multisets and groups and appends a truncate of
// the output, at the truncate's version raised above every group's last
// output so that the sinks' barrier clears them all. Each group that had
// an output keeps a tombstone at that version (A3) and is recorded (A2):
// were the truncate lost in a crash, the resumed run deletes it.
func (b *batch) truncate(r *pipeline.Record, out []pipeline.Record) ([]pipeline.Record, error) {
	if _, err := b.a.plans.Get(r.Table, b.a.plan); err != nil {
		return out, err
	}
	out, err := b.emit(out)
	if err != nil {
		return out, err
	}
	var below [][]byte
	kept := false
	err = b.s.rows.Scan(nil, func(k, v []byte) error {
		c, err := b.a.decodeContribution(v)
		if err != nil {
			return err
		}
		if c.version.Less(r.Version) {
			below = append(below, append([]byte{}, k...))
		} else {
			kept = true
		}
		return nil
	})
	if err != nil {
		return out, fatal(err)
	}
	if kept {
		for _, k := range below {
			c, err := b.row(k)
			if err != nil || c == nil {
				return out, fatal(err)
			}
			if err := b.retract(c, r); err != nil {
				return out, fatal(err)
			}
			b.setRow(k, nil)
		}
		return out, nil
	}
	clear(b.rows)
	clear(b.vals)
	clear(b.groups)
	if err := clearSpace(b.s.rows); err != nil {
		return out, err
	}
	if err := clearSpace(b.s.vals); err != nil {
		return out, err
	}
	var groups []*group
	v := r.Version
	err = b.s.groups.Scan(nil, func(k, val []byte) error {
		g, err := decodeGroup(append([]byte{}, k...), val, b.a)
		if err != nil {
			return err
		}
		if !g.emitted.Less(v) {
			v = g.emitted.Next()
		}
		groups = append(groups, g)
		return nil
	})
	if err != nil {
		return out, err
	}
	for _, g := range groups {
		if g.emitted == (pipeline.Version{}) {
			if err := b.s.groups.Delete(g.key); err != nil {
				return out, err
			}
			continue
		}
		t, err := b.a.newGroup(g.key, g.values)
		if err != nil {
			return out, err
		}
		t.emitted = v
		if err := b.put(t); err != nil {
			return out, err
		}
		if err := b.s.tomb(v, b.origin, t.key); err != nil {
			return out, err
		}
		if err := b.s.record(b.origin, t.key); err != nil {
			return out, err
		}
	}
	return append(out, pipeline.Record{Op: pipeline.OpTruncate, Table: b.a.out, Version: v, Origin: b.origin,
		EventTime: r.EventTime, TxID: r.TxID, Pos: r.Pos, Snapshot: r.Snapshot}), nil
}
