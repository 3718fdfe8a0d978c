package postgres

import (
	"context"
	"encoding/binary"
	"fmt"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/sinks/upsert"
)

// apply writes every table batch in one transaction and commits it.
func (s *Sink) apply(ctx context.Context, batches []*upsert.TableBatch) (err error) {
	tx, err := s.conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() {
		if v := recover(); v != nil {
			// A panic in the driver: roll back like after any failure
			// (the connection would stay inside the transaction), and let
			// the runtime isolate the record that caused it.
			err = &pipeline.PanicError{Value: v, Stack: debug.Stack()}
		}
		if err != nil {
			if rerr := tx.Rollback(context.Background()); rerr != nil && !s.conn.IsClosed() {
				s.log.Warn("rollback failed", zap.Error(rerr))
			}
		}
	}()
	now := s.now().UTC()
	for i, tb := range batches {
		if err = s.applyTable(ctx, tx, tb, i, now); err != nil {
			return fmt.Errorf("table %s: %w", tb.ID, err)
		}
	}
	return tx.Commit(ctx)
}

func (s *Sink) applyTable(ctx context.Context, tx pgx.Tx, tb *upsert.TableBatch, n int, now time.Time) error {
	if err := s.ensureTable(ctx, tx, tb); err != nil {
		return &schemaError{table: tb.ID, err: err}
	}
	barrier, hasBarrier := s.barriers[tb.Target]
	// Invariant 4: truncate is a versioned barrier. Rows below it become
	// tombstones carrying the barrier's version, and the barrier is stored
	// so that later records below it change nothing.
	if tb.Truncate != nil && (!hasBarrier || barrier.Less(*tb.Truncate)) {
		v := tb.Truncate.Bytes()
		tag, err := tx.Exec(ctx, "UPDATE "+s.qualified(tb.Target)+" SET "+quote(colDeleted)+" = true, "+
			quote(colVersion)+" = $1, "+quote(colUpdatedAt)+" = $2 WHERE "+quote(colVersion)+" < $1", v, now)
		if err != nil {
			return fmt.Errorf("truncate: %w", err)
		}
		if _, err := tx.Exec(ctx, "INSERT INTO "+s.qualified(barrierTable)+" (target, version) VALUES ($1, $2)"+
			" ON CONFLICT (target) DO UPDATE SET version = EXCLUDED.version", tb.Target, v); err != nil {
			return fmt.Errorf("barrier: %w", err)
		}
		s.log.Info("truncate barrier", zap.String("table", tb.Target), zap.String("version", tb.Truncate.String()),
			zap.Int64("rows", tag.RowsAffected()))
		barrier, hasBarrier = *tb.Truncate, true
		s.barriers[tb.Target] = barrier
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
	// flag when no row keeps a stored value (no Unchanged value, no delete
	// of a row with non-key columns, no column missing from a shape).
	lean := true
	for i := range rows {
		if rows[i].Kept != nil {
			lean = false
			break
		}
	}
	if lean && tb.OnlyNew {
		done, err := s.copyNew(ctx, tx, tb, rows, now)
		if err != nil {
			return fmt.Errorf("bulk load: %w", err)
		}
		if done {
			return nil
		}
	}
	if err := s.upsertRows(ctx, tx, tb, rows, lean, n, now); err != nil {
		return fmt.Errorf("upsert: %w", err)
	}
	return nil
}

// ensureTable creates the target from the batch's columns or adds the
// columns it lacks (dropped source columns are left in place, nullable).
func (s *Sink) ensureTable(ctx context.Context, tx pgx.Tx, tb *upsert.TableBatch) error {
	have, ok := s.tables[tb.Target]
	if !ok {
		defs := make([]string, 0, len(tb.Cols)+4)
		for i := range tb.Cols {
			defs = append(defs, quote(tb.Cols[i].Name)+" "+typeOf(&tb.Cols[i]).ddl)
		}
		defs = append(defs, quote(colVersion)+" bytea NOT NULL", quote(colDeleted)+" boolean NOT NULL DEFAULT false",
			quote(colUpdatedAt)+" timestamptz")
		keys := make([]string, len(tb.Keys))
		for i, j := range tb.Keys {
			keys[i] = quote(tb.Cols[j].Name)
		}
		defs = append(defs, "PRIMARY KEY ("+strings.Join(keys, ", ")+")")
		if _, err := tx.Exec(ctx, "CREATE TABLE IF NOT EXISTS "+s.qualified(tb.Target)+
			" (\n  "+strings.Join(defs, ",\n  ")+"\n)"); err != nil {
			return fmt.Errorf("create: %w", err)
		}
		have = map[string]string{}
		for i := range tb.Cols {
			have[strings.ToLower(tb.Cols[i].Name)] = typeOf(&tb.Cols[i]).ddl
		}
		s.tables[tb.Target] = have
		s.log.Info("target table created", zap.String("table", tb.Target), zap.Int("columns", len(tb.Cols)))
		return nil
	}
	var fills []string
	var fillArgs []any
	for i := range tb.Cols {
		c := &tb.Cols[i]
		name := strings.ToLower(c.Name)
		if _, ok := have[name]; ok {
			continue
		}
		ct := typeOf(c)
		if _, err := tx.Exec(ctx, "ALTER TABLE "+s.qualified(tb.Target)+" ADD COLUMN "+quote(c.Name)+" "+ct.ddl); err != nil {
			return fmt.Errorf("add column %s: %w", c.Name, err)
		}
		if c.Missing != nil {
			// Rows that existed when the source added the column hold its
			// missing value without any change event saying so; every row
			// here predates the column.
			arg, err := toStage(c, c.Missing)
			if err != nil {
				return fmt.Errorf("add column %s: missing value: %w", c.Name, err)
			}
			fillArgs = append(fillArgs, arg)
			fills = append(fills, quote(c.Name)+" = "+ct.cast("$"+strconv.Itoa(len(fillArgs))+"::"+ct.stage))
		}
		have[name] = ct.ddl
		s.log.Info("target column added", zap.String("table", tb.Target), zap.String("column", c.Name),
			zap.String("type", ct.ddl))
	}
	if len(fills) > 0 {
		// Described first, so that each argument is encoded as its
		// parameter's type (the connection's default mode infers types
		// from Go values, and has none for a uuid's [16]byte).
		args := append([]any{pgx.QueryExecModeDescribeExec}, fillArgs...)
		if _, err := tx.Exec(ctx, "UPDATE "+s.qualified(tb.Target)+" SET "+strings.Join(fills, ", "), args...); err != nil {
			return fmt.Errorf("add columns: fill existing rows with missing values: %w", err)
		}
	}
	return nil
}

// upsertRows stages the rows in a temporary table with a binary COPY and
// applies them with set-based, version-guarded statements.
func (s *Sink) upsertRows(ctx context.Context, tx pgx.Tx, tb *upsert.TableBatch, rows []upsert.Row, lean bool, n int, now time.Time) error {
	stage := "_sluice_stage_" + strconv.Itoa(n)
	ncols := len(tb.Cols)
	defs := make([]string, 0, 2*ncols+4)
	names := make([]string, 0, 2*ncols+4)
	for _, p := range []string{"c", "f"} {
		if p == "f" && lean {
			break
		}
		for i := range tb.Cols {
			names = append(names, p+strconv.Itoa(i))
			defs = append(defs, names[len(names)-1]+" "+typeOf(&tb.Cols[i]).stage)
		}
	}
	names = append(names, "v", "d")
	defs = append(defs, "v bytea NOT NULL", "d boolean NOT NULL")
	if !lean {
		names = append(names, "k", "fv")
		defs = append(defs, "k boolean[]", "fv bytea[]")
	}
	if _, err := tx.Exec(ctx, "CREATE TEMP TABLE "+stage+" ("+strings.Join(defs, ", ")+") ON COMMIT DROP"); err != nil {
		return fmt.Errorf("stage: %w", err)
	}
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{stage}, names, &rowSource{rows: rows, n: ncols, lean: lean, ctx: ctx}); err != nil {
		return fmt.Errorf("copy: %w", err)
	}
	target := s.qualified(tb.Target)
	var cols, sel, set []string
	keys := make([]string, len(tb.Keys))
	for i, j := range tb.Keys {
		keys[i] = quote(tb.Cols[j].Name)
	}
	for i := range tb.Cols {
		ct := typeOf(&tb.Cols[i])
		name := quote(tb.Cols[i].Name)
		c := ct.cast("s.c" + strconv.Itoa(i))
		cols = append(cols, name)
		if tb.IsKey[i] || lean {
			sel = append(sel, c)
			if !tb.IsKey[i] {
				set = append(set, name+" = EXCLUDED."+name)
			}
			continue
		}
		// Unchanged values, columns the record's shape lacks and a delete's
		// non-key columns keep what the row holds: the target's value, or an
		// older change's of this batch when that one is newer. A new key has
		// only the latter (else NULL).
		f := ct.cast("s.f" + strconv.Itoa(i))
		k := strconv.Itoa(i + 1)
		sel = append(sel, "CASE WHEN s.k["+k+"] THEN "+f+" ELSE "+c+" END")
		set = append(set, name+" = CASE WHEN NOT s.k["+k+"] THEN "+c+" WHEN s.fv["+k+"] > t."+quote(colVersion)+
			" THEN "+f+" ELSE t."+name+" END")
	}
	cols = append(cols, quote(colVersion), quote(colDeleted), quote(colUpdatedAt))
	sel = append(sel, "s.v", "s.d", "$1::timestamptz")
	insert := "INSERT INTO " + target + " AS t (" + strings.Join(cols, ", ") + ")\nSELECT " + strings.Join(sel, ", ") +
		" FROM " + stage + " s\nON CONFLICT (" + strings.Join(keys, ", ") + ") DO "
	guard := "t." + quote(colVersion) + " < "
	if lean {
		// Invariant 4: a change whose version is not newer than the stored
		// row's (live or tombstone) changes nothing, so replays are
		// idempotent and late snapshot rows cannot resurrect deleted ones.
		set = append(set, quote(colVersion)+" = EXCLUDED."+quote(colVersion), quote(colDeleted)+" = EXCLUDED."+quote(colDeleted),
			quote(colUpdatedAt)+" = EXCLUDED."+quote(colUpdatedAt))
		_, err := tx.Exec(ctx, insert+"UPDATE SET "+strings.Join(set, ", ")+"\nWHERE "+guard+"EXCLUDED."+quote(colVersion), now)
		return err
	}
	// Kept columns need the staged keep flags and fallbacks, which ON
	// CONFLICT's EXCLUDED row cannot carry: update the keys the target holds
	// at an older version from the staging table, then insert the keys it
	// does not hold at all (the rest, held at a newer or equal version, are
	// left alone by both).
	set = append(set, quote(colVersion)+" = s.v", quote(colDeleted)+" = s.d", quote(colUpdatedAt)+" = $1::timestamptz")
	on := make([]string, len(tb.Keys))
	for i, j := range tb.Keys {
		on[i] = "t." + quote(tb.Cols[j].Name) + " = " + typeOf(&tb.Cols[j]).cast("s.c"+strconv.Itoa(j))
	}
	if _, err := tx.Exec(ctx, "UPDATE "+target+" AS t SET "+strings.Join(set, ", ")+" FROM "+stage+" s\nWHERE "+
		strings.Join(on, " AND ")+" AND "+guard+"s.v", now); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, insert+"NOTHING", now)
	return err
}

// rowSource feeds staged rows to CopyFrom.
type rowSource struct {
	ctx  context.Context
	rows []upsert.Row
	n    int
	lean bool
	// updatedAt, when set, is sent after the deleted flag (a COPY straight
	// into the target, which has the column).
	updatedAt *time.Time
	i         int
	vals      []any
	vbuf      []byte
	err       error
}

func (r *rowSource) Next() bool {
	if r.i%1024 == 0 && r.i > 0 {
		if r.err = r.ctx.Err(); r.err != nil {
			return false
		}
	}
	r.i++
	return r.i <= len(r.rows)
}

func (r *rowSource) Values() ([]any, error) {
	row := &r.rows[r.i-1]
	if r.vbuf == nil {
		r.vbuf = make([]byte, 32*len(r.rows))
	}
	v := r.vbuf[32*(r.i-1) : 32*r.i : 32*r.i]
	for c, x := range row.Version {
		binary.BigEndian.PutUint64(v[8*c:], x)
	}
	n := r.n
	if r.lean {
		if r.vals == nil {
			r.vals = make([]any, n+2, n+3)
			if r.updatedAt != nil {
				r.vals = append(r.vals, *r.updatedAt)
			}
		}
		copy(r.vals, row.Vals)
		r.vals[n], r.vals[n+1] = v, row.Deleted
		return r.vals, nil
	}
	if r.vals == nil {
		r.vals = make([]any, 2*n+4)
	}
	keep, fbv := make([]bool, n), make([][]byte, n)
	for c := range n {
		r.vals[c], r.vals[n+c] = row.Vals[c], nil
		if k := row.Kept; k != nil {
			keep[c] = k.Keep[c]
			if k.HasFb[c] {
				r.vals[n+c], fbv[c] = k.Fb[c], k.Fbv[c].Bytes()
			}
		}
	}
	r.vals[2*n], r.vals[2*n+1], r.vals[2*n+2], r.vals[2*n+3] = v, row.Deleted, keep, fbv
	return r.vals, nil
}

func (r *rowSource) Err() error { return r.err }
