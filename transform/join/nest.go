package join

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/pipeline/binform"
	"github.com/sluice-cdc/sluice/transform/eval"
)

// Nested rows (the nest transform): a Child table's rows that refer to a
// from-table row (their On columns hold its primary key) are embedded in
// that row's output as a JSON array of objects, ordered by OrderBy.
//
// Invariant N1: a from row's output is rebuilt from the state after every
// input that changes one of its nested rows: a child inserted, updated or
// deleted emits its parent; a child moved to another parent emits both.
// A replayed child input finds its current parent in the state, and the
// parents it left in the moves space (every parent a change of the row at
// or after the replayed version took it from), so the outputs a crash may
// have kept from the sinks are sent again even when the state ran ahead of
// the checkpoint. Moves below the replay floor (state.Floor over versions)
// are pruned: no restart hands their inputs again. A replay from another
// server (a generation up, with that server's versions) is re-applied,
// so the state's parent is where the row went: it follows the moves of
// earlier generations too, and those stay past a floor of the new
// generation until the source's position order (Options.Covers) puts
// their changes before it.

// Child is one table nested into the from table (one-to-many).
type Child struct {
	// Table is the child table, "schema.table".
	Table string
	// On lists the child table's columns that hold the from row's primary
	// key, in the order of that key.
	On []string
	// As is the name of the output column that holds the array.
	As string
	// OrderBy lists the child columns the array is sorted by (ascending,
	// NULLs last, ties broken by the child's primary key); empty: the
	// primary key.
	OrderBy []string
	// Columns selects the child rows' columns; empty: all of them.
	Columns []string
	// Max bounds the array (0: no bound): past it, Overflow decides.
	Max int
	// Overflow is what a from row with more than Max children does.
	Overflow Overflow
	// MaxSetting names Max in errors ("transforms[0].nest.children[0].max_children").
	MaxSetting string
}

// Overflow is the policy for a from row with more than Max children.
type Overflow uint8

const (
	// OverflowTruncate embeds the first Max children in order, and counts
	// the output (Options.Overflowed).
	OverflowTruncate Overflow = iota
	// OverflowFail stops the pipeline with an error naming the row, the
	// count and the setting.
	OverflowFail
)

// parentKey returns the key of the from row that the child row e refers
// to through child n; nil when e is absent or deleted or an On column is
// NULL.
func (j *Join) parentKey(e *entry, n int) ([]byte, error) {
	return keyOfColumns(e, j.opts.Children[n].On)
}

// keyOfColumns encodes e's values of cols as a key; nil when e is absent
// or deleted or one of the values is NULL.
func keyOfColumns(e *entry, cols []string) ([]byte, error) {
	if e == nil || e.deleted {
		return nil, nil
	}
	var b []byte
	for _, c := range cols {
		v, ok := e.value(c)
		if !ok || v == nil || v == pipeline.UnchangedValue {
			return nil, nil
		}
		var err error
		if b, err = binform.AppendKey(b, v); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// relinkChildren moves the child row ck's index entries, for each child
// n of its table, from the parent old refers to to the one now refers to
// (either may be nil), and records in the moves space the parent change
// r took it from (N1), reporting whether there was one. An index
// entry holds the child row as now (so a parent's children are read with
// one scan): it is written again on every change of the row.
func (j *Join) relinkChildren(st joinState, childN []int, ck []byte, old, now *entry, r *pipeline.Record) (moved bool, err error) {
	var enc []byte
	for _, n := range childN {
		was, err := j.parentKey(old, n)
		if err != nil {
			return moved, err
		}
		is, err := j.parentKey(now, n)
		if err != nil {
			return moved, err
		}
		if was != nil && !bytes.Equal(was, is) {
			if err := st.child(n, was, ck, nil); err != nil {
				return moved, err
			}
			if err := st.recordMove(n, ck, r, was); err != nil {
				return moved, err
			}
			moved = true
		}
		if is != nil {
			if enc, err = j.nestedValue(n, now, enc[:0]); err != nil {
				return moved, err
			}
			if err := st.child(n, is, ck, enc); err != nil {
				return moved, err
			}
		}
	}
	return moved, nil
}

// nestedValue appends to b what child n's index holds for the row e: its
// order_by values, then the row rendered as the array's object (so a
// document is built from one scan, with no row decoded).
func (j *Join) nestedValue(n int, e *entry, b []byte) ([]byte, error) {
	c := &j.opts.Children[n]
	var order []byte
	for _, col := range c.OrderBy {
		v, _ := e.value(col)
		var err error
		if order, err = binform.Append(order, v); err != nil {
			return nil, fmt.Errorf("order_by %s: %w", col, err)
		}
	}
	b = binary.AppendUvarint(b, uint64(len(order)))
	b = append(b, order...)
	return appendRow(b, j.childFields[n], e), nil
}

// rerender writes child n's index values again from the rows: the
// embedded columns changed.
func (j *Join) rerender(st joinState, n int) error {
	b := st.nested.Lookup([]byte{byte(n)})
	if b == nil {
		return nil
	}
	var keys [][]byte
	if err := b.Scan(nil, func(k, _ []byte) error {
		keys = append(keys, append([]byte{}, k...))
		return nil
	}); err != nil {
		return err
	}
	for _, k := range keys {
		fk := lookupKeyOf(k)
		ck := k[len(indexKey(fk, nil)):]
		e, err := st.get(j.opts.Children[n].Table, ck)
		if err != nil {
			return err
		}
		if e == nil || e.deleted {
			continue
		}
		v, err := j.nestedValue(n, e, nil)
		if err != nil {
			return err
		}
		if err := st.child(n, fk, ck, v); err != nil {
			return err
		}
	}
	return nil
}

// emitParents emits, for the child rows keys of the children childN, the
// output of the live from row each now belongs to and of every from row a
// change of it at or after r's version moved it from (N1).
func (j *Join) emitParents(st joinState, r *pipeline.Record, childN []int, keys [][]byte, seen *emitted, out []pipeline.Record) ([]pipeline.Record, error) {
	table := r.Table.ID.String()
	for _, n := range childN {
		for _, ck := range keys {
			e, err := st.get(table, ck)
			if err != nil {
				return out, err
			}
			var parents [][]byte
			if e == nil || !e.moved.Less(r.Version) || e.moved[0] < r.Version[0] {
				// The row's last move is at or after r (a replay while
				// the state ran ahead), or of an earlier generation (a
				// replay from another server, re-applied: the state's
				// parent is then where the row went, not where it was):
				// follow the moves since r, and those of earlier
				// generations.
				if parents, err = st.movesSince(n, ck, r.Version); err != nil {
					return out, err
				}
			}
			p, err := j.parentKey(e, n)
			if err != nil {
				return out, err
			}
			if p != nil {
				parents = append(parents, p)
			}
			for _, p := range parents {
				if out, err = j.emitLive(st, r, p, seen, out); err != nil {
					return out, err
				}
			}
		}
	}
	return out, nil
}

// emitLive emits the from row fk's output when the row is live and not
// yet emitted for this input: a child of a deleted or unknown row changes
// no output.
func (j *Join) emitLive(st joinState, r *pipeline.Record, fk []byte, seen *emitted, out []pipeline.Record) ([]pipeline.Record, error) {
	e, err := st.get(j.opts.From, fk)
	if err != nil || e == nil || e.deleted || !seen.add(fk) {
		return out, err
	}
	return j.emit(st, r, fk, out)
}

// emitAllParents emits every live from row that has a child of the
// children ns (their embedded columns changed; applyAndEmit rendered
// their rows again first).
func (j *Join) emitAllParents(st joinState, r *pipeline.Record, ns []int, seen *emitted, out []pipeline.Record) ([]pipeline.Record, error) {
	for _, n := range ns {
		parents, err := st.parents(n)
		if err != nil {
			return out, err
		}
		for _, p := range parents {
			if out, err = j.emitLive(st, r, p, seen, out); err != nil {
				return out, err
			}
		}
	}
	return out, nil
}

// emitEveryRow emits every live from row: a replayed truncate of a child
// table cleared the rows it must correct before the crash.
func (j *Join) emitEveryRow(st joinState, r *pipeline.Record, seen *emitted, out []pipeline.Record) ([]pipeline.Record, error) {
	if err := st.flush(); err != nil {
		return out, err
	}
	b, err := st.table(j.opts.From)
	if err != nil {
		return out, err
	}
	var keys [][]byte
	err = b.Scan(nil, func(k, _ []byte) error {
		keys = append(keys, append([]byte{}, k...))
		return nil
	})
	if err != nil {
		return out, err
	}
	for _, k := range keys {
		if out, err = j.emitLive(st, r, k, seen, out); err != nil {
			return out, err
		}
	}
	return out, nil
}

// childRow is one child row being ordered for the array: its key, its
// rendered object and its order values.
type childRow struct {
	key   []byte
	obj   []byte
	order []any
}

// renderChildren renders the live children n of the from row fk as a JSON
// array, in order, bounded by Max.
func (j *Join) renderChildren(st joinState, n int, fk []byte) (pipeline.JSON, error) {
	c := &j.opts.Children[n]
	var rows []childRow
	err := st.children(n, fk, func(ck, v []byte) error {
		r := binform.NewReader(v)
		ln := r.Uvarint()
		if r.Err() != nil || ln > uint64(r.Len()) {
			return binform.ErrCorrupt
		}
		row := childRow{key: ck, order: make([]any, 0, len(c.OrderBy)+1)}
		for or := binform.NewReader(r.Fixed(int(ln))); or.Len() > 0 && or.Err() == nil; {
			row.order = append(row.order, or.Value())
		}
		for kr := binform.NewReader(ck); kr.Len() > 0 && kr.Err() == nil; {
			row.order = append(row.order, kr.Value()) // ties: by key value
		}
		row.obj = append([]byte{}, r.Rest()...)
		rows = append(rows, row)
		return nil
	})
	if err != nil {
		return "", err
	}
	slices.SortFunc(rows, compareNested)
	if c.Max > 0 && len(rows) > c.Max {
		if c.Overflow == OverflowFail {
			return "", fmt.Errorf("the row with key %s has %d rows of %s in %s, more than %d: raise %s, or set on_overflow: truncate to embed the first %d",
				describeKey(fk), len(rows), c.Table, c.As, c.Max, c.MaxSetting, c.Max)
		}
		rows = rows[:c.Max]
		if j.opts.Overflowed != nil {
			j.opts.Overflowed(1)
		}
	}
	size := 2
	for i := range rows {
		size += len(rows[i].obj) + 1
	}
	b := make([]byte, 0, size)
	b = append(b, '[')
	for i := range rows {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, rows[i].obj...)
	}
	return pipeline.JSON(append(b, ']')), nil
}

// compareNested orders child rows by their order values (NULLs last;
// the key's values last of them), then by encoded key.
func compareNested(a, b childRow) int {
	for i := range a.order {
		x, y := a.order[i], b.order[i]
		switch {
		case x == nil && y == nil:
			continue
		case x == nil:
			return 1
		case y == nil:
			return -1
		}
		if c := eval.Compare(x, y); c != 0 {
			return c
		}
	}
	return bytes.Compare(a.key, b.key)
}

// describeKey renders an encoded key's values for an error.
func describeKey(k []byte) string {
	r := binform.NewReader(k)
	var parts []string
	for r.Len() > 0 && r.Err() == nil {
		parts = append(parts, fmt.Sprint(r.Value()))
	}
	if r.Err() != nil {
		return fmt.Sprintf("%x", k)
	}
	return "(" + strings.Join(parts, ", ") + ")"
}

// The moves space: per child n, <len><child key><version> → the parent
// key the change at version took the row from; and in moveOrder,
// <version><n><len><child key> → the change's TxID (uvarint) and
// position, to prune by version (and, across generations, by position).

func moveKey(ck []byte, v pipeline.Version) []byte {
	b := binary.AppendUvarint(make([]byte, 0, 10+len(ck)+32), uint64(len(ck)))
	return append(append(b, ck...), v.Bytes()...)
}

func moveOrderKey(n int, ck []byte, v pipeline.Version) []byte {
	b := append(v.Bytes(), byte(n))
	b = binary.AppendUvarint(b, uint64(len(ck)))
	return append(b, ck...)
}

// pruneBatch bounds the moves one write prunes, so a write after a long
// pause does not stall on them.
const pruneBatch = 10_000
