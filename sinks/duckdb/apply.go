package duckdb

import (
	"context"
	"database/sql/driver"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	duck "github.com/duckdb/duckdb-go/v2"
	"go.uber.org/zap"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/sinks/upsert"
)

const stageTable = "_sluice_stage"

// prepare folds records into per-table batches holding the newest change
// per key. It returns the per-record permanent failures.
func (s *Sink) prepare(records []pipeline.Record) ([]*upsert.TableBatch, []pipeline.RecordError) {
	return upsert.Prepare(records, stager{}, s.targetName)
}

// stager is the sink's upsert.Converter: values become appender values
// (toStage) and UUID keys encode as their 16 bytes.
type stager struct{}

func (stager) Stage(c *pipeline.Column, v any) (any, error) { return stageCompanion(c, v) }

func (stager) Invalid(msg string) error { return valueErr("%s", msg) }

func (stager) AppendKey(b []byte, x any) ([]byte, bool) {
	if u, ok := x.(duck.UUID); ok {
		return append(append(b, 7), u[:]...), true
	}
	return b, false
}

// apply writes every table batch in one transaction and commits it.
func (s *Sink) apply(ctx context.Context, batches []*upsert.TableBatch) (err error) {
	if _, err = s.conn.ExecContext(ctx, "BEGIN TRANSACTION"); err != nil {
		return err
	}
	defer func() {
		if v := recover(); v != nil {
			// A panic in the driver: the transaction is rolled back like
			// after any failure (an open one would fail every later
			// write), and the runtime isolates the record that caused it.
			err = &pipeline.PanicError{Value: v, Stack: debug.Stack()}
		}
		if err != nil && s.conn != nil { // nil: dropped (commit.go)
			if _, rerr := s.conn.ExecContext(context.Background(), "ROLLBACK"); rerr != nil {
				s.log.Warn("rollback failed", zap.Error(rerr))
			}
		}
	}()
	now := s.now().UTC()
	for _, tb := range batches {
		if err = s.applyTable(ctx, tb, now); err != nil {
			return fmt.Errorf("table %s: %w", tb.ID, err)
		}
	}
	return s.commit(ctx)
}

func (s *Sink) applyTable(ctx context.Context, tb *upsert.TableBatch, now time.Time) error {
	if err := s.ensureShape(ctx, tb); err != nil {
		return err
	}
	// Before any UPDATE of the table in this transaction, as every ALTER.
	comp, err := s.companionCols(ctx, tb)
	if err != nil {
		return err
	}
	lt := strings.ToLower(tb.Target)
	barrier, hasBarrier := s.barriers[lt]
	// Invariant 4: truncate is a versioned barrier. Rows below it become
	// tombstones carrying the barrier's version, and the barrier is stored
	// so that later records below it change nothing.
	if tb.Truncate != nil && (!hasBarrier || barrier.Less(*tb.Truncate)) {
		v := tb.Truncate.Bytes()
		res, err := s.conn.ExecContext(ctx, "UPDATE "+s.qualified(tb.Target)+" SET "+quote(colDeleted)+" = true, "+
			quote(colVersion)+" = ?, "+quote(colUpdatedAt)+" = ? WHERE "+quote(colVersion)+" < ?", v, now, v)
		if err != nil {
			return fmt.Errorf("truncate: %w", err)
		}
		if _, err := s.conn.ExecContext(ctx, "INSERT OR REPLACE INTO "+s.qualified(barrierTable)+
			` ("table", version, updated_at) VALUES (?, ?, ?)`, tb.Target, v, now); err != nil {
			return fmt.Errorf("barrier: %w", err)
		}
		n, _ := res.RowsAffected()
		s.log.Info("truncate barrier", zap.String("table", tb.Target), zap.String("version", tb.Truncate.String()),
			zap.Int64("rows", n))
		barrier, hasBarrier = *tb.Truncate, true
		s.barriers[lt] = barrier
	}
	rows := tb.Rows
	if hasBarrier {
		rows = slices.DeleteFunc(slices.Clone(rows), func(r upsert.Row) bool { return r.Version.Less(barrier) })
		for i := range rows {
			if k := rows[i].Kept; k != nil {
				for j := range k.HasFb {
					if k.HasFb[j] && k.Fbv[j].Less(barrier) {
						k.HasFb[j], k.Fb[j] = false, nil
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
		if rows[i].Kept != nil {
			lean = false
			break
		}
	}
	if err := s.mergeRows(ctx, tb, rows, lean, comp, now); err != nil {
		return fmt.Errorf("merge: %w", err)
	}
	return nil
}

// ensureTable creates the target from the batch's columns or adds the
// columns it lacks (dropped source columns are left in place, nullable).
func (s *Sink) ensureTable(ctx context.Context, tb *upsert.TableBatch) error {
	lt := strings.ToLower(tb.Target)
	have, ok := s.tables[lt]
	if !ok {
		defs := make([]string, 0, len(tb.Cols)+4)
		for i := range tb.Cols {
			defs = append(defs, quote(tb.Cols[i].Name)+" "+typeOf(&tb.Cols[i]).ddl)
		}
		defs = append(defs, quote(colVersion)+" BLOB NOT NULL", quote(colDeleted)+" BOOLEAN NOT NULL",
			quote(colUpdatedAt)+" TIMESTAMPTZ")
		if len(tb.Keys) > 0 {
			keys := make([]string, len(tb.Keys))
			for i, j := range tb.Keys {
				keys[i] = quote(tb.Cols[j].Name)
			}
			defs = append(defs, "PRIMARY KEY ("+strings.Join(keys, ", ")+")")
		}
		if _, err := s.conn.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS "+s.qualified(tb.Target)+
			" (\n  "+strings.Join(defs, ",\n  ")+"\n)"); err != nil {
			return fmt.Errorf("create: %w", err)
		}
		have = map[string]string{}
		for i := range tb.Cols {
			have[strings.ToLower(tb.Cols[i].Name)] = typeOf(&tb.Cols[i]).ddl
		}
		s.tables[lt] = have
		s.log.Info("target table created", zap.String("table", tb.Target), zap.Int("columns", len(tb.Cols)))
		return nil
	}
	var fills []*pipeline.Column
	for i := range tb.Cols {
		name := strings.ToLower(tb.Cols[i].Name)
		if _, ok := have[name]; ok {
			continue
		}
		ct := typeOf(&tb.Cols[i])
		ddl := ct.ddl
		if _, err := s.conn.ExecContext(ctx, "ALTER TABLE "+s.qualified(tb.Target)+" ADD COLUMN "+
			quote(tb.Cols[i].Name)+" "+ddl); err != nil {
			return fmt.Errorf("add column %s: %w", tb.Cols[i].Name, err)
		}
		if m := tb.Cols[i].Missing; m != nil {
			// Rows that existed when the source added the column hold its
			// missing value without any change event saying so; every row
			// here predates the column.
			fills = append(fills, &tb.Cols[i])
			if needsCompanion(&tb.Cols[i], m) {
				comp := companionColumn(tb.Cols[i].Name)
				if _, err := s.conn.ExecContext(ctx, "ALTER TABLE "+s.qualified(tb.Target)+" ADD COLUMN "+quote(comp)+" VARCHAR"); err != nil {
					return fmt.Errorf("add column %s: %w", comp, err)
				}
				have[strings.ToLower(comp)] = "VARCHAR"
			}
		}
		have[name] = ddl
		s.log.Info("target column added", zap.String("table", tb.Target), zap.String("column", tb.Cols[i].Name),
			zap.String("type", ddl))
	}
	// One UPDATE after every ALTER: DuckDB fails the commit of a
	// transaction that alters a table it has already updated.
	if len(fills) > 0 {
		if err := s.fillMissing(ctx, tb.Target, fills); err != nil {
			return fmt.Errorf("add columns: fill existing rows with missing values: %w", err)
		}
	}
	return nil
}

// fillMissing sets the columns cols of every row of target to their
// missing values. The values go in as a row does — staged by toStage,
// appended as one row of the staging relation, converted by the column's
// conv — and one UPDATE … FROM reads them, so that any value a row can
// hold can be a missing value (bound as query parameters, uuids, lists,
// timestamps and unsigned integers were refused or crashed the driver).
func (s *Sink) fillMissing(ctx context.Context, target string, cols []*pipeline.Column) error {
	names := make([]string, len(cols))
	types := make([]duck.TypeInfo, len(cols))
	set := make([]string, len(cols))
	vals := make([]driver.Value, len(cols))
	for i, c := range cols {
		names[i] = "m" + strconv.Itoa(i)
		if needsCompanion(c, c.Missing) {
			// Into the companion (companion.go), which ensureTable added.
			text, err := stageCompanion(c, c.Missing)
			if err != nil {
				return fmt.Errorf("column %s: %w", c.Name, err)
			}
			ti, err := typeInfo("VARCHAR")
			if err != nil {
				return err
			}
			types[i], vals[i] = ti, string(text.(companionValue))
			set[i] = quote(companionColumn(c.Name)) + " = s." + names[i]
			continue
		}
		ct := typeOf(c)
		ti, err := typeInfo(ct.stage)
		if err != nil {
			return fmt.Errorf("column %s: %w", c.Name, err)
		}
		v, err := toStage(c, c.Missing)
		if err != nil {
			return fmt.Errorf("column %s: %w", c.Name, err)
		}
		types[i], vals[i] = ti, v
		x := "s." + names[i]
		if ct.conv != nil {
			x = ct.conv(x)
		}
		set[i] = quote(c.Name) + " = " + x
	}
	q := "UPDATE " + s.qualified(target) + " SET " + strings.Join(set, ", ") + " FROM " + stageTable + " AS s"
	return s.appendThrough(ctx, q, types, names, func(a *duck.Appender) error { return a.AppendRow(vals...) })
}

// appendThrough runs query q over the rows fill appends to the staging
// relation stageTable (columns names of types), through a query Appender
// on the sink's connection. When fill fails its rows are discarded and q
// does not run; otherwise closing the Appender flushes, running q (more
// than one time when the rows exceed the Appender's flush threshold).
func (s *Sink) appendThrough(ctx context.Context, q string, types []duck.TypeInfo, names []string, fill func(*duck.Appender) error) error {
	return s.conn.Raw(func(dc any) error {
		conn, ok := dc.(driver.Conn)
		if !ok {
			return fmt.Errorf("unexpected driver connection %T", dc)
		}
		a, err := duck.NewQueryAppender(conn, q, stageTable, types, names)
		if err != nil {
			return err
		}
		if err := fill(a); err != nil {
			return errors.Join(err, a.Clear(), a.Close())
		}
		return a.CloseWithCancel(ctx)
	})
}

// stageTypes returns the staging columns' names and types.
func stageTypes(tb *upsert.TableBatch, lean bool, comp []bool) ([]string, []duck.TypeInfo, error) {
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
		for i := range tb.Cols {
			if err := add(p+strconv.Itoa(i), typeOf(&tb.Cols[i]).stage); err != nil {
				return nil, nil, err
			}
			if comp[i] {
				if err := add("n"+p+strconv.Itoa(i), "VARCHAR"); err != nil {
					return nil, nil, err
				}
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

func appendRows(ctx context.Context, a *duck.Appender, n int, rows []upsert.Row, lean bool, comp []bool) error {
	if slices.Contains(comp, true) {
		return appendCompanionRows(ctx, a, n, rows, lean, comp)
	}
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
		for c, x := range r.Version {
			binary.BigEndian.PutUint64(v[8*c:], x)
		}
		if lean {
			for c := range n {
				args[c] = r.Vals[c]
			}
			args[n], args[n+1] = v, r.Deleted
		} else {
			keep, fbv := make([]any, n), make([]any, n)
			for c := range n {
				args[c], args[n+c], keep[c] = r.Vals[c], nil, false
				if k := r.Kept; k != nil {
					keep[c] = k.Keep[c]
					if k.HasFb[c] {
						args[n+c], fbv[c] = k.Fb[c], k.Fbv[c].Bytes()
					}
				}
			}
			args[2*n], args[2*n+1], args[2*n+2], args[2*n+3] = v, r.Deleted, keep, fbv
		}
		if err := a.AppendRow(args...); err != nil {
			return err
		}
	}
	return nil
}
