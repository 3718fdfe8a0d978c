package duckdb

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

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
	keys   []int // indexes into cols of the key columns
	newest *pipeline.Table
	// truncate is the highest truncate version in the batch, if any.
	truncate *pipeline.Version
	// rows holds the highest-version change per key.
	rows   []stagedRow
	byKey  map[string]int
	shapes map[*pipeline.Table][]int // shape → index in the shape per union column (-1: absent)
}

// stagedRow is one key's change, converted to staging values.
type stagedRow struct {
	version pipeline.Version
	deleted bool
	vals    []any  // aligned with tableBatch.cols
	keep    []bool // aligned with cols: keep the value the row already has
	// For kept columns, the newest value an older change of the same key in
	// this batch wrote (fb) and that change's version (fbv, valid when hasFb).
	// The MERGE uses it when it is newer than the target's row, so that
	// collapsing a key's changes to one row gives the same result as
	// applying them one by one.
	fb    []any
	fbv   []pipeline.Version
	hasFb []bool
}

// absorb folds an older change o of the same key into the winner w.
func (w *stagedRow) absorb(o *stagedRow) {
	for j := range w.keep {
		if !w.keep[j] {
			continue
		}
		val, ver, ok := o.vals[j], o.version, !o.keep[j]
		if !ok {
			val, ver, ok = o.fb[j], o.fbv[j], o.hasFb[j]
		}
		if ok && (!w.hasFb[j] || w.fbv[j].Less(ver)) {
			w.fb[j], w.fbv[j], w.hasFb[j] = val, ver, true
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
	// First pass: the shapes of each table, so rows align with one column set.
	for i := range records {
		r := &records[i]
		if r.Op == pipeline.OpHeartbeat || r.Table == nil {
			continue
		}
		tb := byID[r.Table.ID]
		if tb == nil {
			tb = &tableBatch{id: r.Table.ID, target: targetName(r.Table.ID), byKey: map[string]int{},
				shapes: map[*pipeline.Table][]int{}}
			byID[r.Table.ID] = tb
			order = append(order, tb)
		}
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
		tb := byID[r.Table.ID]
		switch r.Op {
		case pipeline.OpTruncate:
			if tb.truncate == nil || tb.truncate.Less(r.Version) {
				v := r.Version
				tb.truncate = &v
			}
		case pipeline.OpInsert, pipeline.OpUpdate, pipeline.OpRead, pipeline.OpDelete:
			row, key, err := tb.stage(r)
			if err != nil {
				fail(i, err)
				continue
			}
			if j, ok := tb.byKey[key]; ok {
				if r.Version.Less(tb.rows[j].version) {
					tb.rows[j].absorb(&row)
				} else {
					row.absorb(&tb.rows[j])
					tb.rows[j] = row
				}
				continue
			}
			tb.byKey[key] = len(tb.rows)
			tb.rows = append(tb.rows, row)
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
	for _, k := range tb.newest.KeyIdx {
		tb.keys = append(tb.keys, seen[strings.ToLower(tb.newest.Columns[k].Name)])
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

// stage converts one data record to a staged row and its key string.
// Columns the record's shape lacks, Unchanged values and (for deletes)
// non-key columns are marked keep: an update leaves the target's value.
func (tb *tableBatch) stage(r *pipeline.Record) (stagedRow, string, error) {
	img := r.After
	if r.Op == pipeline.OpDelete {
		img = r.Before
	}
	if len(tb.keys) == 0 {
		return stagedRow{}, "", fmt.Errorf("table %s has no key columns; upsert by key is impossible", tb.id)
	}
	if len(img) != len(r.Table.Columns) {
		return stagedRow{}, "", fmt.Errorf("%s record image has %d values for %d columns", r.Op, len(img), len(r.Table.Columns))
	}
	idx := tb.shapes[r.Table]
	row := stagedRow{version: r.Version, deleted: r.Op == pipeline.OpDelete,
		vals: make([]any, len(tb.cols)), keep: make([]bool, len(tb.cols)),
		fb: make([]any, len(tb.cols)), fbv: make([]pipeline.Version, len(tb.cols)), hasFb: make([]bool, len(tb.cols))}
	for j := range tb.cols {
		isKey := slices.Contains(tb.keys, j)
		i := idx[j]
		if i < 0 && !row.deleted && tb.cols[j].Missing != nil {
			// The record predates the column, so at its time the row held
			// the column's missing value (see pipeline.Column.Missing).
			staged, err := toStage(&tb.cols[j], tb.cols[j].Missing)
			if err != nil {
				return stagedRow{}, "", err
			}
			row.vals[j] = staged
			continue
		}
		if i < 0 || (row.deleted && !isKey) {
			if isKey {
				return stagedRow{}, "", fmt.Errorf("key column %s missing from the record's shape", tb.cols[j].Name)
			}
			row.keep[j] = true
			continue
		}
		v := img[i]
		if _, ok := v.(pipeline.Unchanged); ok {
			if isKey {
				return stagedRow{}, "", fmt.Errorf("key column %s is unchanged-toast", tb.cols[j].Name)
			}
			row.keep[j] = true
			continue
		}
		c := &r.Table.Columns[i]
		if c.Type != tb.cols[j].Type || c.Elem != tb.cols[j].Elem {
			return stagedRow{}, "", valueErr("column %s changed type from %s to %s; target migration is not supported",
				c.Name, c.Type, tb.cols[j].Type)
		}
		x, err := toStage(&tb.cols[j], v)
		if err != nil {
			return stagedRow{}, "", err
		}
		if x == nil && isKey {
			return stagedRow{}, "", fmt.Errorf("key column %s is NULL", c.Name)
		}
		row.vals[j] = x
	}
	var key strings.Builder
	for _, j := range tb.keys {
		fmt.Fprintf(&key, "%T=%v\x00", row.vals[j], row.vals[j])
	}
	return row, key.String(), nil
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

func (s *Sink) applyTable(ctx context.Context, tb *tableBatch, now any) error {
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
			for j := range rows[i].hasFb {
				if rows[i].hasFb[j] && rows[i].fbv[j].Less(barrier) {
					rows[i].hasFb[j], rows[i].fb[j] = false, nil
				}
			}
		}
	}
	if len(rows) == 0 {
		return nil
	}
	if err := s.stageRows(ctx, tb, rows); err != nil {
		return fmt.Errorf("staging: %w", err)
	}
	if _, err := s.conn.ExecContext(ctx, s.mergeSQL(tb), now, now); err != nil {
		return fmt.Errorf("merge: %w", err)
	}
	_, err := s.conn.ExecContext(ctx, "DROP TABLE temp.main."+stageTable)
	return err
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
			staged, err := toStage(&tb.cols[i], m)
			if err != nil {
				return fmt.Errorf("add column %s: missing value: %w", tb.cols[i].Name, err)
			}
			expr := "?::" + ct.stage
			if ct.conv != nil {
				expr = ct.conv(expr)
			}
			if _, err := s.conn.ExecContext(ctx, "UPDATE "+s.qualified(tb.target)+" SET "+quote(tb.cols[i].Name)+" = "+expr, staged); err != nil {
				return fmt.Errorf("add column %s: fill existing rows: %w", tb.cols[i].Name, err)
			}
		}
		have[name] = ddl
		s.log.Info("target column added", zap.String("table", tb.target), zap.String("column", tb.cols[i].Name),
			zap.String("type", ddl))
	}
	return nil
}

// stageRows fills a temporary staging table through the Appender.
func (s *Sink) stageRows(ctx context.Context, tb *tableBatch, rows []stagedRow) error {
	defs := make([]string, 0, len(tb.cols)+3)
	for i := range tb.cols {
		defs = append(defs, fmt.Sprintf("c%d %s", i, typeOf(&tb.cols[i]).stage))
	}
	for i := range tb.cols {
		defs = append(defs, fmt.Sprintf("f%d %s", i, typeOf(&tb.cols[i]).stage))
	}
	defs = append(defs, "v BLOB", "d BOOLEAN", "k BOOLEAN[]", "fv BLOB[]")
	if _, err := s.conn.ExecContext(ctx, "CREATE OR REPLACE TEMP TABLE "+stageTable+" ("+strings.Join(defs, ", ")+")"); err != nil {
		return err
	}
	return s.conn.Raw(func(dc any) error {
		conn, ok := dc.(driver.Conn)
		if !ok {
			return fmt.Errorf("unexpected driver connection %T", dc)
		}
		a, err := duck.NewAppender(conn, "temp", "main", stageTable)
		if err != nil {
			return err
		}
		n := len(tb.cols)
		args := make([]driver.Value, 2*n+4)
		for _, r := range rows {
			if err := ctx.Err(); err != nil {
				return errors.Join(err, a.Close())
			}
			keep, fbv := make([]any, n), make([]any, n)
			for i := range n {
				args[i], args[n+i], keep[i] = r.vals[i], nil, r.keep[i]
				if r.hasFb[i] {
					args[n+i], fbv[i] = r.fb[i], r.fbv[i].Bytes()
				}
			}
			args[2*n], args[2*n+1], args[2*n+2], args[2*n+3] = r.version.Bytes(), r.deleted, keep, fbv
			if err := a.AppendRow(args...); err != nil {
				return errors.Join(err, a.Close())
			}
		}
		return a.Close()
	})
}

// mergeSQL is the set-based upsert of the staged rows. Its two parameters
// are the _sluice_updated_at value.
func (s *Sink) mergeSQL(tb *tableBatch) string {
	sel := make([]string, 0, 2*len(tb.cols)+4)
	for _, p := range []string{"c", "f"} {
		for i := range tb.cols {
			x := fmt.Sprintf("%s%d", p, i)
			if ct := typeOf(&tb.cols[i]); ct.conv != nil {
				x = ct.conv(x)
			}
			sel = append(sel, fmt.Sprintf("%s AS %s%d", x, p, i))
		}
	}
	sel = append(sel, "v", "d", "k", "fv")
	on := make([]string, len(tb.keys))
	for i, j := range tb.keys {
		on[i] = fmt.Sprintf("t.%s = s.c%d", quote(tb.cols[j].Name), j)
	}
	var set, names, vals []string
	for i := range tb.cols {
		name := quote(tb.cols[i].Name)
		names = append(names, name)
		if slices.Contains(tb.keys, i) {
			vals = append(vals, fmt.Sprintf("s.c%d", i))
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
	set = append(set, quote(colVersion)+" = s.v", quote(colDeleted)+" = s.d", quote(colUpdatedAt)+" = ?")
	names = append(names, quote(colVersion), quote(colDeleted), quote(colUpdatedAt))
	vals = append(vals, "s.v", "s.d", "?")
	// Invariant 4: a change whose version is not newer than the stored
	// row's (live or tombstone) changes nothing, so replays are idempotent
	// and late snapshot rows cannot resurrect deleted ones.
	return "MERGE INTO " + s.qualified(tb.target) + " AS t\nUSING (SELECT " + strings.Join(sel, ", ") +
		" FROM temp.main." + stageTable + ") AS s\nON " + strings.Join(on, " AND ") +
		"\nWHEN MATCHED AND s.v > t." + quote(colVersion) + " THEN UPDATE SET " + strings.Join(set, ", ") +
		"\nWHEN NOT MATCHED THEN INSERT (" + strings.Join(names, ", ") + ") VALUES (" + strings.Join(vals, ", ") + ")"
}
