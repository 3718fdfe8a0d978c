package postgres

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/big"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/sluice-cdc/sluice/pipeline"
)

// tableBatch is the part of one Write that goes to one target table.
type tableBatch struct {
	id     pipeline.TableID
	target string
	// cols is the union of the columns of every shape of the table seen in
	// the batch: the newest shape's columns first, then older ones' extras.
	cols   []pipeline.Column
	keys   []int  // indexes into cols of the key columns
	isKey  []bool // aligned with cols
	newest *pipeline.Table
	// truncate is the highest truncate version in the batch, if any.
	truncate *pipeline.Version
	// rows holds the highest-version change per key.
	rows []stagedRow
	// records counts the batch's data records of the table; arena is the
	// backing array the rows' values are cut from (one allocation for all).
	records int
	arena   []any
	spare   []any
	byKey   map[string]int // encoded key → index in rows
	byInt   map[int64]int  // single BIGINT-like key → index in rows
	keyBuf  []byte
	shapes  map[*pipeline.Table][]int // shape → index in the shape per union column (-1: absent)
	// lastShape and lastIdx cache the previous record's shapes entry.
	lastShape *pipeline.Table
	lastIdx   []int
}

// stagedRow is one key's change, converted to staging values.
type stagedRow struct {
	version pipeline.Version
	deleted bool
	vals    []any // aligned with tableBatch.cols
	// kept is nil when the row writes every column (the common case).
	kept *keptCols
}

// keptCols describes the columns of a row that keep the value the target
// row already has: Unchanged values, columns the record's shape lacks and a
// delete's non-key columns.
type keptCols struct {
	keep []bool // aligned with cols
	// For kept columns, the newest value an older change of the same key in
	// this batch wrote (fb) and that change's version (fbv, valid when hasFb).
	// The upsert uses it when it is newer than the target's row, so that
	// collapsing a key's changes to one row gives the same result as
	// applying them one by one.
	fb    []any
	fbv   []pipeline.Version
	hasFb []bool
}

func newKeptCols(n int) *keptCols {
	return &keptCols{keep: make([]bool, n), fb: make([]any, n), fbv: make([]pipeline.Version, n), hasFb: make([]bool, n)}
}

// absorb folds an older change o of the same key into the winner w.
func (w *stagedRow) absorb(o *stagedRow) {
	if w.kept == nil {
		return
	}
	k := w.kept
	for j := range k.keep {
		if !k.keep[j] {
			continue
		}
		val, ver, ok := o.vals[j], o.version, true
		if o.kept != nil && o.kept.keep[j] {
			val, ver, ok = o.kept.fb[j], o.kept.fbv[j], o.kept.hasFb[j]
		}
		if ok && (!k.hasFb[j] || k.fbv[j].Less(ver)) {
			k.fb[j], k.fbv[j], k.hasFb[j] = val, ver, true
		}
	}
}

// prepare converts records to per-table batches, keeping the newest change
// per key. It returns the per-record permanent failures.
func (s *Sink) prepare(records []pipeline.Record) ([]*tableBatch, []pipeline.RecordError) {
	var failed []pipeline.RecordError
	fail := func(i int, err error) {
		failed = append(failed, pipeline.RecordError{Index: i, Err: err, Permanent: true})
	}
	byID := map[pipeline.TableID]*tableBatch{}
	var order []*tableBatch
	// lookup finds the batch of a record's table; consecutive records
	// mostly share their *Table, so the previous answer is cached.
	var lastTable *pipeline.Table
	var lastTB *tableBatch
	lookup := func(t *pipeline.Table) *tableBatch {
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
			tb = &tableBatch{id: r.Table.ID, target: s.targetName(r.Table.ID), byKey: map[string]int{},
				shapes: map[*pipeline.Table][]int{}}
			byID[r.Table.ID] = tb
			order = append(order, tb)
			lastTB = tb
		}
		tb.records++
		if _, ok := tb.shapes[r.Table]; !ok {
			tb.shapes[r.Table] = nil
			if tb.newest == nil || r.Table.Generation > tb.newest.Generation {
				tb.newest = r.Table
			}
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
		switch r.Op {
		case pipeline.OpTruncate:
			if tb.truncate == nil || tb.truncate.Less(r.Version) {
				v := r.Version
				tb.truncate = &v
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
		if tb.truncate != nil || len(tb.rows) > 0 {
			out = append(out, tb)
		}
	}
	return out, failed
}

func (tb *tableBatch) unionColumns() {
	shapes := make([]*pipeline.Table, 0, len(tb.shapes))
	for t := range tb.shapes {
		shapes = append(shapes, t)
	}
	sort.SliceStable(shapes, func(a, b int) bool { return shapes[a].Generation > shapes[b].Generation })
	seen := map[string]int{}
	for _, t := range shapes {
		for _, c := range t.Columns {
			if _, ok := seen[strings.ToLower(c.Name)]; !ok {
				seen[strings.ToLower(c.Name)] = len(tb.cols)
				tb.cols = append(tb.cols, c)
			}
		}
	}
	tb.isKey = make([]bool, len(tb.cols))
	for _, k := range tb.newest.KeyIdx {
		j := seen[strings.ToLower(tb.newest.Columns[k].Name)]
		tb.keys = append(tb.keys, j)
		tb.isKey[j] = true
	}
	for _, t := range shapes {
		idx := make([]int, len(tb.cols))
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
func (tb *tableBatch) newVals() []any {
	if v := tb.spare; v != nil {
		tb.spare = nil
		return v
	}
	n := len(tb.cols)
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
func (tb *tableBatch) stage(r *pipeline.Record) (stagedRow, error) {
	img := r.After
	if r.Op == pipeline.OpDelete {
		img = r.Before
	}
	if len(tb.keys) == 0 {
		return stagedRow{}, fmt.Errorf("table %s has no key columns; upsert by key is impossible", tb.id)
	}
	if len(img) != len(r.Table.Columns) {
		return stagedRow{}, fmt.Errorf("%s record image has %d values for %d columns", r.Op, len(img), len(r.Table.Columns))
	}
	if r.Table != tb.lastShape {
		tb.lastShape, tb.lastIdx = r.Table, tb.shapes[r.Table]
	}
	idx := tb.lastIdx
	row := stagedRow{version: r.Version, deleted: r.Op == pipeline.OpDelete, vals: tb.newVals()}
	row, err := tb.fill(r, img, idx, row)
	if err != nil {
		clear(row.vals)
		tb.spare = row.vals // the failed row's values are reused
		return stagedRow{}, err
	}
	return row, nil
}

func (tb *tableBatch) fill(r *pipeline.Record, img []any, idx []int, row stagedRow) (stagedRow, error) {
	keep := func(j int) {
		if row.kept == nil {
			row.kept = newKeptCols(len(tb.cols))
		}
		row.kept.keep[j] = true
	}
	for j := range tb.cols {
		isKey := tb.isKey[j]
		i := idx[j]
		if i < 0 && !row.deleted && tb.cols[j].Missing != nil {
			// The record predates the column, so at its time the row held
			// the column's missing value (see pipeline.Column.Missing).
			staged, err := toStage(&tb.cols[j], tb.cols[j].Missing)
			if err != nil {
				return row, err
			}
			row.vals[j] = staged
			continue
		}
		if i < 0 || (row.deleted && !isKey) {
			if isKey {
				return row, fmt.Errorf("key column %s missing from the record's shape", tb.cols[j].Name)
			}
			keep(j)
			continue
		}
		v := img[i]
		if _, ok := v.(pipeline.Unchanged); ok {
			if isKey {
				return row, fmt.Errorf("key column %s is unchanged-toast", tb.cols[j].Name)
			}
			keep(j)
			continue
		}
		c := &r.Table.Columns[i]
		if c.Type != tb.cols[j].Type || c.Elem != tb.cols[j].Elem {
			return row, valueErr("column %s changed type from %s to %s; target migration is not supported",
				c.Name, c.Type, tb.cols[j].Type)
		}
		x, err := toStage(&tb.cols[j], v)
		if err != nil {
			return row, err
		}
		if x == nil && isKey {
			return row, fmt.Errorf("key column %s is NULL", c.Name)
		}
		row.vals[j] = x
	}
	return row, nil
}

// add keeps row when it is the newest change of its key in the batch,
// folding the older change into the newer one.
func (tb *tableBatch) add(row stagedRow) {
	var j int
	var found bool
	if len(tb.keys) == 1 {
		if k, ok := row.vals[tb.keys[0]].(int64); ok {
			if tb.byInt == nil {
				tb.byInt = make(map[int64]int, tb.records)
			}
			if j, found = tb.byInt[k]; !found {
				tb.byInt[k] = len(tb.rows)
			}
			goto merge
		}
	}
	tb.keyBuf = appendKey(tb.keyBuf[:0], tb.keys, row.vals)
	if j, found = tb.byKey[string(tb.keyBuf)]; !found {
		tb.byKey[string(tb.keyBuf)] = len(tb.rows)
	}
merge:
	if !found {
		tb.rows = append(tb.rows, row)
		return
	}
	if row.version.Less(tb.rows[j].version) {
		tb.rows[j].absorb(&row)
		return
	}
	row.absorb(&tb.rows[j])
	tb.rows[j] = row
}

// appendKey appends an encoding of a row's key values to b: equal keys
// encode equally, different keys differently (each value carries its type
// and, when variable in size, its length).
func appendKey(b []byte, keys []int, vals []any) []byte {
	for _, j := range keys {
		switch x := vals[j].(type) {
		case int64:
			b = binary.BigEndian.AppendUint64(append(b, 1), uint64(x))
		case uint64:
			b = binary.BigEndian.AppendUint64(append(b, 2), x)
		case int32:
			b = binary.BigEndian.AppendUint32(append(b, 3), uint32(x))
		case string:
			b = append(binary.AppendUvarint(append(b, 4), uint64(len(x))), x...)
		case []byte:
			b = append(binary.AppendUvarint(append(b, 5), uint64(len(x))), x...)
		case bool:
			if x {
				b = append(b, 6, 1)
			} else {
				b = append(b, 6, 0)
			}
		case [16]byte:
			b = append(append(b, 7), x[:]...)
		case float64:
			if x != x {
				x = math.NaN()
			}
			b = binary.BigEndian.AppendUint64(append(b, 8), math.Float64bits(x))
		case float32:
			if x != x {
				x = float32(math.NaN())
			}
			b = binary.BigEndian.AppendUint32(append(b, 9), math.Float32bits(x))
		case pgtype.Numeric:
			// Numerically equal decimals (1.5, 1.50) are one key.
			d := pipeline.Decimal{Unscaled: x.Int, Scale: -x.Exp}
			if x.NaN {
				d = pipeline.Decimal{Special: pipeline.NaN}
			}
			s := "dec:" + canonDecimal(d)
			b = append(binary.AppendUvarint(append(b, 10), uint64(len(s))), s...)
		case pgtype.Timestamptz:
			b = binary.BigEndian.AppendUint64(append(b, 11, byte(x.InfinityModifier)), uint64(x.Time.UnixMicro()))
		case pgtype.Timestamp:
			b = binary.BigEndian.AppendUint64(append(b, 12, byte(x.InfinityModifier)), uint64(x.Time.UnixMicro()))
		case pgtype.Date:
			b = binary.BigEndian.AppendUint64(append(b, 13, byte(x.InfinityModifier)), uint64(x.Time.Unix()))
		default:
			s := fmt.Sprintf("%T=%v", x, x)
			b = append(binary.AppendUvarint(append(b, 0xff), uint64(len(s))), s...)
		}
	}
	return b
}

// canonDecimal renders a finite decimal without trailing fractional zeros.
func canonDecimal(d pipeline.Decimal) string {
	if !d.IsFinite() || d.Unscaled == nil {
		return d.String()
	}
	u, scale := new(big.Int).Set(d.Unscaled), d.Scale
	ten, r := big.NewInt(10), new(big.Int)
	for scale > 0 {
		q, m := new(big.Int).QuoRem(u, ten, r)
		if m.Sign() != 0 {
			break
		}
		u, scale = q, scale-1
	}
	return pipeline.Decimal{Unscaled: u, Scale: scale}.String()
}
