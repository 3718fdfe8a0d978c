package upsert

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/sluice-cdc/sluice/pipeline"
)

// Converter is a sink's part of the folding: it converts pipeline values to
// the sink's staging values and encodes the key values of the sink's own
// staging types.
type Converter interface {
	// Stage converts v, a value of column c (or c.Missing), to the sink's
	// staging value. An error fails the record permanently.
	Stage(c *pipeline.Column, v any) (any, error)
	// Invalid returns the sink's error for a value it cannot hold, with msg
	// as its description.
	Invalid(msg string) error
	// AppendKey appends an encoding of the key value x to b when x is of a
	// sink-specific staging type, and reports whether it was. Its encodings
	// must not collide with each other nor with this package's, which
	// start with the tag bytes 1 to 6, 8, 9 and 0xff.
	AppendKey(b []byte, x any) ([]byte, bool)
}

// TableBatch is the part of one Write that goes to one target table.
type TableBatch struct {
	ID     pipeline.TableID
	Target string
	// Cols is the union of the columns of every shape of the table seen in
	// the batch: the newest shape's columns first, then older ones' extras.
	// Shapes sort by generation, and among equal generations the one the
	// batch showed last is the newer (so a batch always yields the same
	// columns, whichever way a map would iterate).
	Cols   []pipeline.Column
	Keys   []int  // indexes into Cols of the key columns
	IsKey  []bool // aligned with Cols
	Newest *pipeline.Table
	// Truncate is the highest truncate version in the batch, if any.
	Truncate *pipeline.Version
	// Rows holds the highest-version change per key.
	Rows []Row
	// Reshape is true when the batch holds an OpShape record of the table:
	// the sink applies Newest's shape even when no row comes with it.
	Reshape bool
	// OnlyNew is true when every change of the table in the batch was an
	// insert or a snapshot read (no update, delete or truncate): its keys
	// are most likely absent from the target, so a sink may try a plain
	// bulk load first (and must fall back when a key turns out to exist).
	OnlyNew bool

	conv Converter
	// records counts the batch's data records of the table; arena is the
	// backing array the rows' values are cut from (one allocation for all).
	records int
	arena   []any
	spare   []any
	byKey   map[string]int // encoded key → index in Rows
	byInt   map[int64]int  // single BIGINT-like key → index in Rows
	keyBuf  []byte
	shapes  map[*pipeline.Table][]int // shape → index in the shape per union column (-1: absent)
	seenIn  []*pipeline.Table         // the shapes in the order the batch shows them (unionColumns sorts it)
	// lastShape and lastIdx cache the previous record's shapes entry.
	lastShape *pipeline.Table
	lastIdx   []int
}

// Row is one key's change, converted to staging values.
type Row struct {
	Version pipeline.Version
	Deleted bool
	Vals    []any // aligned with TableBatch.Cols
	// Kept is nil when the row writes every column (the common case).
	Kept *KeptCols
}

// KeptCols describes the columns of a row that keep the value the target
// row already has: Unchanged values, columns the record's shape lacks and a
// delete's non-key columns.
type KeptCols struct {
	Keep []bool // aligned with Cols
	// For kept columns, the newest value an older change of the same key in
	// this batch wrote (Fb) and that change's version (Fbv, valid when
	// HasFb). The sink's upsert uses it when it is newer than the target's
	// row, so that collapsing a key's changes to one row gives the same
	// result as applying them one by one.
	Fb    []any
	Fbv   []pipeline.Version
	HasFb []bool
}

func newKeptCols(n int) *KeptCols {
	return &KeptCols{Keep: make([]bool, n), Fb: make([]any, n), Fbv: make([]pipeline.Version, n), HasFb: make([]bool, n)}
}

// absorb folds an older change o of the same key into the winner w.
func (w *Row) absorb(o *Row) {
	if w.Kept == nil {
		return
	}
	k := w.Kept
	for j := range k.Keep {
		if !k.Keep[j] {
			continue
		}
		val, ver, ok := o.Vals[j], o.Version, true
		if o.Kept != nil && o.Kept.Keep[j] {
			val, ver, ok = o.Kept.Fb[j], o.Kept.Fbv[j], o.Kept.HasFb[j]
		}
		if ok && (!k.HasFb[j] || k.Fbv[j].Less(ver)) {
			k.Fb[j], k.Fbv[j], k.HasFb[j] = val, ver, true
		}
	}
}

// Prepare converts records to per-table batches, keeping the newest change
// per key; target names a table's target. It returns the batches of the
// tables with rows, a truncate or a new shape (OpShape), in the order of
// their first record, and the per-record permanent failures.
func Prepare(records []pipeline.Record, conv Converter, target func(pipeline.TableID) string) ([]*TableBatch, []pipeline.RecordError) {
	var failed []pipeline.RecordError
	fail := func(i int, err error) {
		failed = append(failed, pipeline.RecordError{Index: i, Err: err, Permanent: true})
	}
	byID := map[pipeline.TableID]*TableBatch{}
	var order []*TableBatch
	// lookup finds the batch of a record's table; consecutive records
	// mostly share their *Table, so the previous answer is cached.
	var lastTable *pipeline.Table
	var lastTB *TableBatch
	lookup := func(t *pipeline.Table) *TableBatch {
		if t != lastTable {
			lastTable, lastTB = t, byID[t.ID]
		}
		return lastTB
	}
	// First pass: the shapes of each table, so rows align with one column set.
	for i := range records {
		r := &records[i]
		if r.Op == pipeline.OpHeartbeat || r.Table == nil {
			continue
		}
		tb := lookup(r.Table)
		if tb == nil {
			tb = &TableBatch{ID: r.Table.ID, Target: target(r.Table.ID), conv: conv, byKey: map[string]int{},
				shapes: map[*pipeline.Table][]int{}, OnlyNew: true}
			byID[r.Table.ID] = tb
			order = append(order, tb)
			lastTB = tb
		}
		tb.records++
		if _, ok := tb.shapes[r.Table]; !ok {
			tb.shapes[r.Table] = nil
			tb.seenIn = append(tb.seenIn, r.Table)
		}
	}
	for _, tb := range order {
		tb.unionColumns()
	}
	lastTable, lastTB = nil, nil
	// Second pass: convert and keep the newest change per key.
	for i := range records {
		r := &records[i]
		switch {
		case r.Op == pipeline.OpHeartbeat:
			continue
		case r.Table == nil:
			fail(i, fmt.Errorf("%s record without a table", r.Op))
			continue
		}
		tb := lookup(r.Table)
		if r.Op != pipeline.OpInsert && r.Op != pipeline.OpRead && r.Op != pipeline.OpShape {
			tb.OnlyNew = false
		}
		switch r.Op {
		case pipeline.OpShape:
			tb.Reshape = true
		case pipeline.OpTruncate:
			if tb.Truncate == nil || tb.Truncate.Less(r.Version) {
				v := r.Version
				tb.Truncate = &v
			}
		case pipeline.OpInsert, pipeline.OpUpdate, pipeline.OpRead, pipeline.OpDelete:
			row, err := tb.stage(r)
			if err != nil {
				fail(i, err)
				continue
			}
			tb.add(row)
		default:
			fail(i, fmt.Errorf("unknown op %s", r.Op))
		}
	}
	out := order[:0]
	for _, tb := range order {
		if tb.Truncate != nil || len(tb.Rows) > 0 || tb.Reshape {
			out = append(out, tb)
		}
	}
	return out, failed
}

func (tb *TableBatch) unionColumns() {
	shapes := tb.seenIn
	slices.Reverse(shapes) // the last shown first among equals
	sort.SliceStable(shapes, func(a, b int) bool { return shapes[a].Generation > shapes[b].Generation })
	tb.Newest = shapes[0]
	seen := map[string]int{}
	for _, t := range shapes {
		for _, c := range t.Columns {
			if _, ok := seen[strings.ToLower(c.Name)]; !ok {
				seen[strings.ToLower(c.Name)] = len(tb.Cols)
				tb.Cols = append(tb.Cols, c)
			}
		}
	}
	tb.IsKey = make([]bool, len(tb.Cols))
	for _, k := range tb.Newest.KeyIdx {
		j := seen[strings.ToLower(tb.Newest.Columns[k].Name)]
		tb.Keys = append(tb.Keys, j)
		tb.IsKey[j] = true
	}
	for _, t := range shapes {
		idx := make([]int, len(tb.Cols))
		for j := range idx {
			idx[j] = -1
		}
		for i, c := range t.Columns {
			idx[seen[strings.ToLower(c.Name)]] = i
		}
		tb.shapes[t] = idx
	}
}

// newVals returns a zeroed value slice for one row, cut from the arena.
func (tb *TableBatch) newVals() []any {
	if v := tb.spare; v != nil {
		tb.spare = nil
		return v
	}
	n := len(tb.Cols)
	if len(tb.arena) < n {
		tb.arena = make([]any, max(tb.records, 1)*n)
	}
	v := tb.arena[:n:n]
	tb.arena = tb.arena[n:]
	return v
}

// stage converts one data record to a staged row. Columns the record's
// shape lacks, Unchanged values and (for deletes) non-key columns are
// marked kept: an update leaves the target's value.
func (tb *TableBatch) stage(r *pipeline.Record) (Row, error) {
	img := r.After
	if r.Op == pipeline.OpDelete {
		img = r.Before
	}
	if len(tb.Keys) == 0 {
		return Row{}, fmt.Errorf("table %s has no key columns; upsert by key is impossible", tb.ID)
	}
	if len(img) != len(r.Table.Columns) {
		return Row{}, fmt.Errorf("%s record image has %d values for %d columns", r.Op, len(img), len(r.Table.Columns))
	}
	if r.Table != tb.lastShape {
		tb.lastShape, tb.lastIdx = r.Table, tb.shapes[r.Table]
	}
	idx := tb.lastIdx
	row := Row{Version: r.Version, Deleted: r.Op == pipeline.OpDelete, Vals: tb.newVals()}
	row, err := tb.fill(r, img, idx, row)
	if err != nil {
		clear(row.Vals)
		tb.spare = row.Vals // the failed row's values are reused
		return Row{}, err
	}
	return row, nil
}

func (tb *TableBatch) fill(r *pipeline.Record, img []any, idx []int, row Row) (Row, error) {
	keep := func(j int) {
		if row.Kept == nil {
			row.Kept = newKeptCols(len(tb.Cols))
		}
		row.Kept.Keep[j] = true
	}
	for j := range tb.Cols {
		isKey := tb.IsKey[j]
		i := idx[j]
		if i < 0 && !row.Deleted && tb.Cols[j].Missing != nil {
			// The record predates the column, so at its time the row held
			// the column's missing value (see pipeline.Column.Missing).
			staged, err := tb.conv.Stage(&tb.Cols[j], tb.Cols[j].Missing)
			if err != nil {
				return row, err
			}
			row.Vals[j] = staged
			continue
		}
		if i < 0 || (row.Deleted && !isKey) {
			if isKey {
				return row, fmt.Errorf("key column %s missing from the record's shape", tb.Cols[j].Name)
			}
			keep(j)
			continue
		}
		v := img[i]
		if _, ok := v.(pipeline.Unchanged); ok {
			if isKey {
				return row, fmt.Errorf("key column %s is unchanged-toast", tb.Cols[j].Name)
			}
			keep(j)
			continue
		}
		c := &r.Table.Columns[i]
		if c.Type != tb.Cols[j].Type || c.Elem != tb.Cols[j].Elem {
			return row, tb.conv.Invalid(fmt.Sprintf("column %s changed type from %s to %s; target migration is not supported",
				c.Name, c.Type, tb.Cols[j].Type))
		}
		x, err := tb.conv.Stage(&tb.Cols[j], v)
		if err != nil {
			return row, err
		}
		if x == nil && isKey {
			return row, fmt.Errorf("key column %s is NULL", c.Name)
		}
		row.Vals[j] = x
	}
	return row, nil
}

// add keeps row when it is the newest change of its key in the batch,
// folding the older change into the newer one.
func (tb *TableBatch) add(row Row) {
	var j int
	var found bool
	if len(tb.Keys) == 1 {
		if k, ok := row.Vals[tb.Keys[0]].(int64); ok {
			if tb.byInt == nil {
				tb.byInt = make(map[int64]int, tb.records)
			}
			if j, found = tb.byInt[k]; !found {
				tb.byInt[k] = len(tb.Rows)
			}
			goto merge
		}
	}
	tb.keyBuf = appendKey(tb.keyBuf[:0], tb.Keys, row.Vals, tb.conv)
	if j, found = tb.byKey[string(tb.keyBuf)]; !found {
		tb.byKey[string(tb.keyBuf)] = len(tb.Rows)
	}
merge:
	if !found {
		tb.Rows = append(tb.Rows, row)
		return
	}
	if row.Version.Less(tb.Rows[j].Version) {
		tb.Rows[j].absorb(&row)
		return
	}
	row.absorb(&tb.Rows[j])
	tb.Rows[j] = row
}
