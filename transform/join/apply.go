package join

import (
	"bytes"
	"fmt"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/pipeline/binform"
)

// How an input changes the state and what it emits.
//
// A row of either side is applied only when its version is newer than the
// stored row's and not older than the table's last truncate (Invariant 4
// applied to the state). Applied or not, the joined rows the input touches
// are emitted again from the state as it now is: after a restart the state
// may be ahead of the checkpoint, and the outputs of the inputs being
// replayed may never have reached the sinks, so the replay must re-send
// what the state holds. Each output's version is the input's, raised above
// the last version emitted for the same output row when it would not be
// newer (several snapshot rows share a version; replays repeat versions),
// so every output is newer than the one before it and no sink drops it.

// applyRow applies an insert, update, read or delete and returns the keys
// of the rows it touched (the old and the new key when an update changed
// the key).
func (j *Join) applyRow(st joinState, r *pipeline.Record, ro *roles) ([][]byte, error) {
	t := r.Table
	name := t.ID.String()
	if r.Op == pipeline.OpDelete {
		k, err := binform.RowKey(t, r.Before)
		if err != nil {
			return nil, err
		}
		return [][]byte{k}, j.remove(st, name, k, r, ro)
	}
	k, err := binform.RowKey(t, r.After)
	if err != nil {
		return nil, err
	}
	keys := [][]byte{k}
	if r.Before != nil {
		// An update that changed the key deletes the old row.
		if old, err := binform.RowKey(t, r.Before); err == nil && !bytes.Equal(old, k) {
			if err := j.remove(st, name, old, r, ro); err != nil {
				return nil, err
			}
			keys = [][]byte{old, k}
		}
	}
	return keys, j.upsert(st, name, k, r, ro)
}

// stale reports whether a change at v is not newer than the stored row or
// predates the table's last truncate.
func stale(st joinState, table string, old *entry, v pipeline.Version) bool {
	if old != nil && !old.version.Less(v) {
		return true
	}
	return v.Less(st.barrier(table))
}

func (j *Join) upsert(st joinState, table string, key []byte, r *pipeline.Record, ro *roles) error {
	old, err := st.get(table, key)
	if err != nil || stale(st, table, old, r.Version) {
		return err
	}
	e := &entry{version: r.Version, names: make([]string, len(r.Table.Columns)), values: make([]any, len(r.After))}
	for i, c := range r.Table.Columns {
		e.names[i] = c.Name
		e.values[i] = r.After[i]
		if r.After[i] == pipeline.UnchangedValue && old != nil && !old.deleted {
			if v, ok := old.value(c.Name); ok {
				e.values[i] = v // unchanged TOAST keeps the stored value
			}
		}
	}
	if old != nil {
		e.emitted, e.moved = old.emitted, old.moved
	}
	moved, err := j.relinkAll(st, ro, key, old, e, r)
	if err != nil {
		return err
	}
	if moved {
		e.moved = r.Version
	}
	return st.put(table, key, e)
}

// remove leaves a versioned tombstone holding the key columns.
func (j *Join) remove(st joinState, table string, key []byte, r *pipeline.Record, ro *roles) error {
	old, err := st.get(table, key)
	if err != nil || stale(st, table, old, r.Version) {
		return err
	}
	e := &entry{version: r.Version, deleted: true}
	for _, k := range r.Table.KeyIdx {
		e.names = append(e.names, r.Table.Columns[k].Name)
		e.values = append(e.values, r.Before[k])
	}
	if old != nil {
		e.emitted, e.moved = old.emitted, old.moved
	}
	moved, err := j.relinkAll(st, ro, key, old, nil, r)
	if err != nil {
		return err
	}
	if moved {
		e.moved = r.Version
	}
	return st.put(table, key, e)
}

// relinkAll moves the index entries of the row key from what old refers
// to to what now refers to: a from row's lookups, a child row's parents.
// moved reports that the change took a child row from a parent.
func (j *Join) relinkAll(st joinState, ro *roles, key []byte, old, now *entry, r *pipeline.Record) (moved bool, err error) {
	if ro.isFrom {
		if err := j.relink(st, key, old, now); err != nil {
			return false, err
		}
	}
	return j.relinkChildren(st, ro.childN, key, old, now, r)
}

// relink moves a from-table row's index entries from what old refers to
// to what now refers to (either may be nil).
func (j *Join) relink(st joinState, key []byte, old, now *entry) error {
	for n := range j.opts.With {
		was, err := j.lookupKey(old, n)
		if err != nil {
			return err
		}
		is, err := j.lookupKey(now, n)
		if err != nil {
			return err
		}
		if bytes.Equal(was, is) {
			continue
		}
		if was != nil {
			if err := st.link(n, was, key, false); err != nil {
				return err
			}
		}
		if is != nil {
			if err := st.link(n, is, key, true); err != nil {
				return err
			}
		}
	}
	return nil
}

// lookupKey returns the key of the row of lookup n that e refers to; nil
// when e is absent or deleted or one of its on columns is NULL.
func (j *Join) lookupKey(e *entry, n int) ([]byte, error) {
	return keyOfColumns(e, j.opts.With[n].On)
}

// truncate clears the table's rows older than the truncate. On the from
// table it emits a truncate of the output; on a looked-up table it emits
// again every joined row that refers to that lookup, unless the truncate
// is new and cleared nothing. A replayed truncate cleared its rows before
// the crash and they are no longer known, so its outputs are all sent
// again.
func (j *Join) truncate(st joinState, r *pipeline.Record, ro *roles, seen *emitted, out []pipeline.Record) ([]pipeline.Record, error) {
	name := r.Table.ID.String()
	barrier := st.barrier(name)
	// Not seen before: not a replay. A barrier of an earlier generation
	// tells nothing: a replay from another server (or after a cut-short
	// run) comes a generation up, and what the truncate cleared the first
	// time is gone from the state.
	fresh := barrier.Less(r.Version) && (barrier == pipeline.Version{} || barrier[0] == r.Version[0])
	cleared := 0
	var parents [][]byte // the from rows that lost children
	if !r.Version.Less(barrier) {
		if err := st.flush(); err != nil {
			return out, err
		}
		b, err := st.table(name)
		if err != nil {
			return out, err
		}
		var drop [][]byte
		var dropped []*entry
		err = b.Scan(nil, func(k, v []byte) error {
			e, err := decodeEntry(v)
			if err != nil {
				return err
			}
			if e.version.Less(r.Version) {
				drop = append(drop, append([]byte{}, k...))
				dropped = append(dropped, e)
			}
			return nil
		})
		if err != nil {
			return out, err
		}
		cleared = len(drop)
		for i, k := range drop {
			if ro.isFrom {
				if err := j.relink(st, k, dropped[i], nil); err != nil {
					return out, err
				}
			}
			for _, n := range ro.childN {
				p, err := j.parentKey(dropped[i], n)
				if err != nil {
					return out, err
				}
				if p == nil {
					continue
				}
				if err := st.child(n, p, k, nil); err != nil {
					return out, err
				}
				parents = append(parents, p)
			}
			if err := b.Delete(k); err != nil {
				return out, err
			}
		}
		if err := st.setBarrier(name, r.Version); err != nil {
			return out, err
		}
		st.forget()
	}
	if ro.isFrom && j.out != nil {
		out = append(out, pipeline.Record{Op: pipeline.OpTruncate, Table: j.out, Version: r.Version, Origin: r.OrderVersion(),
			EventTime: r.EventTime, TxID: r.TxID, Snapshot: r.Snapshot, Replaces: r.Replaces, Pos: r.Pos, Size: 64})
	}
	if fresh && cleared == 0 {
		// Nothing was cleared (a first load's barrier): no output changes.
		return out, nil
	}
	out, err := j.emitAll(st, r, ro.lookupN, seen, out)
	if err != nil || len(ro.childN) == 0 {
		return out, err
	}
	if !fresh {
		// A replay: the children it cleared are no longer known.
		return j.emitEveryRow(st, r, seen, out)
	}
	for _, p := range parents {
		if out, err = j.emitLive(st, r, p, seen, out); err != nil {
			return out, err
		}
	}
	return out, nil
}

// emitAll emits every joined row that refers to a row of the lookups ns.
func (j *Join) emitAll(st joinState, r *pipeline.Record, ns []int, seen *emitted, out []pipeline.Record) ([]pipeline.Record, error) {
	for _, n := range ns {
		b, err := st.lookupIndex(n)
		if err != nil {
			return out, err
		}
		var keys [][]byte
		err = b.Scan(nil, func(k, _ []byte) error {
			if fk := fromKeyOf(k); fk != nil && seen.add(fk) {
				keys = append(keys, fk)
			}
			return nil
		})
		if err != nil {
			return out, err
		}
		for _, fk := range keys {
			if out, err = j.emit(st, r, fk, out); err != nil {
				return out, err
			}
		}
	}
	return out, nil
}

// lookupKeyOf returns the first key of an index key (the looked-up key of
// a lookup's, the from-table key of a child's).
func lookupKeyOf(k []byte) []byte {
	r := binform.NewReader(k)
	n := r.Uvarint()
	if r.Err() != nil || n > uint64(r.Len()) {
		return nil
	}
	return append([]byte{}, r.Fixed(int(n))...)
}

// fromKeyOf returns the from-table key of an index key.
func fromKeyOf(k []byte) []byte {
	r := binform.NewReader(k)
	n := r.Uvarint()
	if r.Err() != nil || n > uint64(r.Len()) {
		return nil
	}
	r.Fixed(int(n))
	return append([]byte{}, r.Rest()...)
}

// emitReferrers emits the joined rows that refer to the looked-up rows
// keys and are not in seen.
func (j *Join) emitReferrers(st joinState, r *pipeline.Record, lookupN []int, keys [][]byte, seen *emitted, out []pipeline.Record) ([]pipeline.Record, error) {
	for _, n := range lookupN {
		for _, lk := range keys {
			fks, err := st.referrers(n, lk)
			if err != nil {
				return out, err
			}
			for _, fk := range fks {
				if !seen.add(fk) {
					continue
				}
				if out, err = j.emit(st, r, fk, out); err != nil {
					return out, err
				}
			}
		}
	}
	return out, nil
}

// emit appends the joined row of the from-table row fk as the state now
// holds it: an upsert of the row with its looked-up rows, or a delete.
func (j *Join) emit(st joinState, r *pipeline.Record, fk []byte, out []pipeline.Record) ([]pipeline.Record, error) {
	e, err := st.get(j.opts.From, fk)
	if err != nil || e == nil {
		return out, err
	}
	if j.out == nil {
		return out, fmt.Errorf("state holds rows of %s but not its shape", j.opts.From)
	}
	v := r.Version
	first := e.emitted == pipeline.Version{}
	if !e.emitted.Less(v) {
		v = e.emitted.Next()
	}
	e.emitted = v
	if err := st.put(j.opts.From, fk, e); err != nil {
		return out, err
	}
	// An output a snapshot record caused (a read, a repair's delete) is
	// one too: its Origin need not follow the stream's order (a later
	// parallel MariaDB reader's rows sort above stream changes written
	// after them), so the exactly-once Kafka sink must not count it in
	// its mark.
	rec := pipeline.Record{Table: j.out, Version: v, Origin: r.OrderVersion(), EventTime: r.EventTime, TxID: r.TxID, Pos: r.Pos,
		Snapshot: r.Snapshot || r.Op == pipeline.OpRead}
	switch {
	case e.deleted:
		rec.Op = pipeline.OpDelete
		rec.Before = make([]any, len(j.out.Columns))
		for _, k := range j.out.KeyIdx {
			rec.Before[k], _ = e.value(j.out.Columns[k].Name)
		}
	case r.Op == pipeline.OpRead:
		// A re-read row's output replaces what the sinks hold as well.
		rec.Op, rec.Replaces = pipeline.OpRead, r.Replaces
	case first:
		rec.Op = pipeline.OpInsert
	default:
		rec.Op = pipeline.OpUpdate
	}
	if !e.deleted {
		if rec.After, err = j.row(st, fk, e); err != nil {
			return out, err
		}
	}
	rec.Size = pipeline.EstimateSize(&rec)
	return append(out, rec), nil
}

// row builds the output image of a live from-table row.
func (j *Join) row(st joinState, fk []byte, e *entry) ([]any, error) {
	cols := j.out.Columns
	nFrom := len(cols) - len(j.opts.With) - len(j.opts.Children)
	img := make([]any, len(cols))
	for i := range nFrom {
		v, ok := e.value(cols[i].Name)
		if !ok {
			v = cols[i].Missing
		}
		img[i] = v
	}
	for n, l := range j.opts.With {
		lk, err := j.lookupKey(e, n)
		if err != nil {
			return nil, err
		}
		if lk == nil {
			continue
		}
		le, err := st.get(l.Table, lk)
		if err != nil {
			return nil, err
		}
		if le == nil || le.deleted {
			continue
		}
		img[nFrom+n] = renderRow(cols[nFrom+n].Fields, le)
	}
	nLookups := nFrom + len(j.opts.With)
	for n := range j.opts.Children {
		var err error
		if img[nLookups+n], err = j.renderChildren(st, n, fk); err != nil {
			return nil, err
		}
	}
	return img, nil
}
