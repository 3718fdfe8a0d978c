package duckdb

import (
	"context"
	"database/sql/driver"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	duck "github.com/duckdb/duckdb-go/v2"
	"go.uber.org/zap"

	"github.com/sluice-cdc/sluice/pipeline"
)

const stageTable = "_sluice_stage"

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
	// The MERGE uses it when it is newer than the target's row, so that
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
			tb = &tableBatch{id: r.Table.ID, target: targetName(r.Table.ID), byKey: map[string]int{},
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
		case duck.UUID:
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
		default:
			s := fmt.Sprintf("%T=%v", x, x)
			b = append(binary.AppendUvarint(append(b, 0xff), uint64(len(s))), s...)
		}
	}
	return b
}

// apply writes every table batch in one transaction and commits it.
func (s *Sink) apply(ctx context.Context, batches []*tableBatch) (err error) {
	if _, err = s.conn.ExecContext(ctx, "BEGIN TRANSACTION"); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			if _, rerr := s.conn.ExecContext(context.Background(), "ROLLBACK"); rerr != nil {
				s.log.Warn("rollback failed", zap.Error(rerr))
			}
		}
	}()
	now := s.now().UTC()
	for _, tb := range batches {
		if err = s.applyTable(ctx, tb, now); err != nil {
			return fmt.Errorf("table %s: %w", tb.id, err)
		}
	}
	_, err = s.conn.ExecContext(ctx, "COMMIT")
	return err
}

func (s *Sink) applyTable(ctx context.Context, tb *tableBatch, now time.Time) error {
	if err := s.ensureTable(ctx, tb); err != nil {
		return err
	}
	lt := strings.ToLower(tb.target)
	barrier, hasBarrier := s.barriers[lt]
	// Invariant 4: truncate is a versioned barrier. Rows below it become
	// tombstones carrying the barrier's version, and the barrier is stored
	// so that later records below it change nothing.
	if tb.truncate != nil && (!hasBarrier || barrier.Less(*tb.truncate)) {
		v := tb.truncate.Bytes()
		res, err := s.conn.ExecContext(ctx, "UPDATE "+s.qualified(tb.target)+" SET "+quote(colDeleted)+" = true, "+
			quote(colVersion)+" = ?, "+quote(colUpdatedAt)+" = ? WHERE "+quote(colVersion)+" < ?", v, now, v)
		if err != nil {
			return fmt.Errorf("truncate: %w", err)
		}
		if _, err := s.conn.ExecContext(ctx, "INSERT OR REPLACE INTO "+s.qualified(barrierTable)+
			` ("table", version, updated_at) VALUES (?, ?, ?)`, tb.target, v, now); err != nil {
			return fmt.Errorf("barrier: %w", err)
		}
		n, _ := res.RowsAffected()
		s.log.Info("truncate barrier", zap.String("table", tb.target), zap.String("version", tb.truncate.String()),
			zap.Int64("rows", n))
		barrier, hasBarrier = *tb.truncate, true
		s.barriers[lt] = barrier
	}
	rows := tb.rows
	if hasBarrier {
		rows = slices.DeleteFunc(slices.Clone(rows), func(r stagedRow) bool { return r.version.Less(barrier) })
		for i := range rows {
			if k := rows[i].kept; k != nil {
				for j := range k.hasFb {
					if k.hasFb[j] && k.fbv[j].Less(barrier) {
						k.hasFb[j], k.fb[j] = false, nil
					}
				}
			}
		}
	}
	if len(rows) == 0 {
		return nil
	}
	// The lean form stages only the values, the version and the deleted
	// flag when no row keeps a stored value (no Unchanged value, no
	// delete of a row with non-key columns, no column missing from a shape).
	lean := true
	for i := range rows {
		if rows[i].kept != nil {
			lean = false
			break
		}
	}
	if err := s.mergeRows(ctx, tb, rows, lean, now); err != nil {
		return fmt.Errorf("merge: %w", err)
	}
	return nil
}

// ensureTable creates the target from the batch's columns or adds the
// columns it lacks (dropped source columns are left in place, nullable).
func (s *Sink) ensureTable(ctx context.Context, tb *tableBatch) error {
	lt := strings.ToLower(tb.target)
	have, ok := s.tables[lt]
	if !ok {
		defs := make([]string, 0, len(tb.cols)+4)
		for i := range tb.cols {
			defs = append(defs, quote(tb.cols[i].Name)+" "+typeOf(&tb.cols[i]).ddl)
		}
		defs = append(defs, quote(colVersion)+" BLOB NOT NULL", quote(colDeleted)+" BOOLEAN NOT NULL",
			quote(colUpdatedAt)+" TIMESTAMPTZ")
		if len(tb.keys) > 0 {
			keys := make([]string, len(tb.keys))
			for i, j := range tb.keys {
				keys[i] = quote(tb.cols[j].Name)
			}
			defs = append(defs, "PRIMARY KEY ("+strings.Join(keys, ", ")+")")
		}
		if _, err := s.conn.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS "+s.qualified(tb.target)+
			" (\n  "+strings.Join(defs, ",\n  ")+"\n)"); err != nil {
			return fmt.Errorf("create: %w", err)
		}
		have = map[string]string{}
		for i := range tb.cols {
			have[strings.ToLower(tb.cols[i].Name)] = typeOf(&tb.cols[i]).ddl
		}
		s.tables[lt] = have
		s.log.Info("target table created", zap.String("table", tb.target), zap.Int("columns", len(tb.cols)))
		return nil
	}
	var fills []string
	var fillArgs []any
	for i := range tb.cols {
		name := strings.ToLower(tb.cols[i].Name)
		if _, ok := have[name]; ok {
			continue
		}
		ct := typeOf(&tb.cols[i])
		ddl := ct.ddl
		if _, err := s.conn.ExecContext(ctx, "ALTER TABLE "+s.qualified(tb.target)+" ADD COLUMN "+
			quote(tb.cols[i].Name)+" "+ddl); err != nil {
			return fmt.Errorf("add column %s: %w", tb.cols[i].Name, err)
		}
		if m := tb.cols[i].Missing; m != nil {
			// Rows that existed when the source added the column hold its
			// missing value without any change event saying so; every row
			// here predates the column.
			expr, args, err := param(&tb.cols[i], m)
			if err != nil {
				return fmt.Errorf("add column %s: missing value: %w", tb.cols[i].Name, err)
			}
			fills = append(fills, quote(tb.cols[i].Name)+" = "+expr)
			fillArgs = append(fillArgs, args...)
		}
		have[name] = ddl
		s.log.Info("target column added", zap.String("table", tb.target), zap.String("column", tb.cols[i].Name),
			zap.String("type", ddl))
	}
	// One UPDATE after every ALTER: DuckDB fails the commit of a
	// transaction that alters a table it has already updated.
	if len(fills) > 0 {
		if _, err := s.conn.ExecContext(ctx, "UPDATE "+s.qualified(tb.target)+" SET "+strings.Join(fills, ", "), fillArgs...); err != nil {
			return fmt.Errorf("add columns: fill existing rows with missing values: %w", err)
		}
	}
	return nil
}

// mergeQuery is the set-based upsert of the staged rows, read from the
// relation from; now is the _sluice_updated_at expression.
func (s *Sink) mergeQuery(tb *tableBatch, lean bool, from, now string) string {
	sel := make([]string, 0, 2*len(tb.cols)+4)
	prefixes := []string{"c", "f"}
	if lean {
		prefixes = prefixes[:1]
	}
	for _, p := range prefixes {
		for i := range tb.cols {
			x := p + strconv.Itoa(i)
			if ct := typeOf(&tb.cols[i]); ct.conv != nil {
				x = ct.conv(x) + " AS " + x
			}
			sel = append(sel, x)
		}
	}
	sel = append(sel, "v", "d")
	if !lean {
		sel = append(sel, "k", "fv")
	}
	on := make([]string, len(tb.keys))
	for i, j := range tb.keys {
		on[i] = fmt.Sprintf("t.%s = s.c%d", quote(tb.cols[j].Name), j)
	}
	var set, names, vals []string
	for i := range tb.cols {
		name := quote(tb.cols[i].Name)
		names = append(names, name)
		if tb.isKey[i] {
			vals = append(vals, fmt.Sprintf("s.c%d", i))
			continue
		}
		if lean {
			vals = append(vals, fmt.Sprintf("s.c%d", i))
			set = append(set, fmt.Sprintf("%s = s.c%d", name, i))
			continue
		}
		// Unchanged values, columns the record's shape lacks and a delete's
		// non-key columns keep what the row holds: the target's value, or an
		// older change's of this batch when that one is newer. A new key has
		// only the latter (else NULL).
		vals = append(vals, fmt.Sprintf("CASE WHEN s.k[%d] THEN s.f%d ELSE s.c%d END", i+1, i, i))
		set = append(set, fmt.Sprintf("%[1]s = CASE WHEN NOT s.k[%[2]d] THEN s.c%[3]d WHEN s.fv[%[2]d] > t.%[4]s THEN s.f%[3]d ELSE t.%[1]s END",
			name, i+1, i, quote(colVersion)))
	}
	set = append(set, quote(colVersion)+" = s.v", quote(colDeleted)+" = s.d", quote(colUpdatedAt)+" = "+now)
	names = append(names, quote(colVersion), quote(colDeleted), quote(colUpdatedAt))
	vals = append(vals, "s.v", "s.d", now)
	// Invariant 4: a change whose version is not newer than the stored
	// row's (live or tombstone) changes nothing, so replays are idempotent
	// and late snapshot rows cannot resurrect deleted ones.
	return "MERGE INTO " + s.qualified(tb.target) + " AS t\nUSING (SELECT " + strings.Join(sel, ", ") +
		" FROM " + from + ") AS s\nON " + strings.Join(on, " AND ") +
		"\nWHEN MATCHED AND s.v > t." + quote(colVersion) + " THEN UPDATE SET " + strings.Join(set, ", ") +
		"\nWHEN NOT MATCHED THEN INSERT (" + strings.Join(names, ", ") + ") VALUES (" + strings.Join(vals, ", ") + ")"
}

// stageTypes returns the staging columns' names and types.
func stageTypes(tb *tableBatch, lean bool) ([]string, []duck.TypeInfo, error) {
	var names []string
	var types []duck.TypeInfo
	add := func(name, typ string) error {
		ti, err := typeInfo(typ)
		if err != nil {
			return fmt.Errorf("staging column %s: %w", name, err)
		}
		names, types = append(names, name), append(types, ti)
		return nil
	}
	for _, p := range []string{"c", "f"} {
		if p == "f" && lean {
			break
		}
		for i := range tb.cols {
			if err := add(p+strconv.Itoa(i), typeOf(&tb.cols[i]).stage); err != nil {
				return nil, nil, err
			}
		}
	}
	extra := []string{"v", "BLOB", "d", "BOOLEAN", "k", "BOOLEAN[]", "fv", "BLOB[]"}
	if lean {
		extra = extra[:4]
	}
	for i := 0; i < len(extra); i += 2 {
		if err := add(extra[i], extra[i+1]); err != nil {
			return nil, nil, err
		}
	}
	return names, types, nil
}

// typeInfo is the driver's type of a staging type name.
func typeInfo(typ string) (duck.TypeInfo, error) {
	if elem, ok := strings.CutSuffix(typ, "[]"); ok {
		e, err := typeInfo(elem)
		if err != nil {
			return nil, err
		}
		return duck.NewListInfo(e)
	}
	var w, sc uint8
	if _, err := fmt.Sscanf(typ, "DECIMAL(%d,%d)", &w, &sc); err == nil {
		return duck.NewDecimalInfo(w, sc)
	}
	t, ok := map[string]duck.Type{"BOOLEAN": duck.TYPE_BOOLEAN, "SMALLINT": duck.TYPE_SMALLINT, "INTEGER": duck.TYPE_INTEGER,
		"BIGINT": duck.TYPE_BIGINT, "UTINYINT": duck.TYPE_UTINYINT, "USMALLINT": duck.TYPE_USMALLINT,
		"UINTEGER": duck.TYPE_UINTEGER, "UBIGINT": duck.TYPE_UBIGINT, "FLOAT": duck.TYPE_FLOAT, "DOUBLE": duck.TYPE_DOUBLE,
		"VARCHAR": duck.TYPE_VARCHAR, "BLOB": duck.TYPE_BLOB, "UUID": duck.TYPE_UUID, "INTERVAL": duck.TYPE_INTERVAL}[typ]
	if !ok {
		return nil, fmt.Errorf("no driver type for %s", typ)
	}
	return duck.NewTypeInfo(t)
}

// mergeRows runs the MERGE over the rows through a query Appender: DuckDB
// reads the appended rows as the relation stageTable, with no table to
// create and drop.
func (s *Sink) mergeRows(ctx context.Context, tb *tableBatch, rows []stagedRow, lean bool, now time.Time) error {
	names, types, err := stageTypes(tb, lean)
	if err != nil {
		return err
	}
	q := s.mergeQuery(tb, lean, stageTable, "make_timestamptz("+strconv.FormatInt(now.UnixMicro(), 10)+"::BIGINT)")
	return s.conn.Raw(func(dc any) error {
		conn, ok := dc.(driver.Conn)
		if !ok {
			return fmt.Errorf("unexpected driver connection %T", dc)
		}
		a, err := duck.NewQueryAppender(conn, q, stageTable, types, names)
		if err != nil {
			return err
		}
		if err := appendRows(ctx, a, len(tb.cols), rows, lean); err != nil {
			// Discard the rows rather than merging part of them.
			return errors.Join(err, a.Clear(), a.Close())
		}
		// Closing flushes: the MERGE runs over the appended rows (more
		// than one time when they exceed the Appender's flush threshold,
		// which is harmless: every key appears once).
		return a.CloseWithCancel(ctx)
	})
}

func appendRows(ctx context.Context, a *duck.Appender, n int, rows []stagedRow, lean bool) error {
	// One backing array for every row's version bytes.
	vbuf := make([]byte, 32*len(rows))
	width := n + 2
	if !lean {
		width = 2*n + 4
	}
	args := make([]driver.Value, width)
	for i := range rows {
		r := &rows[i]
		if i%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		v := vbuf[32*i : 32*i+32 : 32*i+32]
		for c, x := range r.version {
			binary.BigEndian.PutUint64(v[8*c:], x)
		}
		if lean {
			for c := range n {
				args[c] = r.vals[c]
			}
			args[n], args[n+1] = v, r.deleted
		} else {
			keep, fbv := make([]any, n), make([]any, n)
			for c := range n {
				args[c], args[n+c], keep[c] = r.vals[c], nil, false
				if k := r.kept; k != nil {
					keep[c] = k.keep[c]
					if k.hasFb[c] {
						args[n+c], fbv[c] = k.fb[c], k.fbv[c].Bytes()
					}
				}
			}
			args[2*n], args[2*n+1], args[2*n+2], args[2*n+3] = v, r.deleted, keep, fbv
		}
		if err := a.AppendRow(args...); err != nil {
			return err
		}
	}
	return nil
}
