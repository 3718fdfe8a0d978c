package duckdb

import (
	"context"
	"database/sql/driver"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"

	duck "github.com/duckdb/duckdb-go/v2"
	"go.uber.org/zap"

	"github.com/sluice-cdc/sluice/pipeline"
)

// The bulk-load fast path. A Write made only of inserts and snapshot reads
// of one table shape mostly carries keys the target does not hold yet (an
// initial load, an append-mostly table). With no stored version to compare
// against, a plain INSERT is exactly what the version-guarded MERGE would
// do (Invariant 4), without the join. So such a Write is first appended
// straight into the target in its own transaction, converting each record
// on the way and without the batch fold. If any key exists (a replay, a
// tombstone, a key inserted again after a delete) or repeats in the
// batch, the primary key refuses the INSERT, the transaction is rolled
// back and the Write takes the MERGE path, which also reports values that
// cannot be converted (Invariant 7). A table whose Writes keep meeting
// existing keys skips the attempt for a growing number of Writes, so
// update-heavy tables do not pay for it.

// directState is one target table's fast-path bookkeeping.
type directState struct {
	skip    int  // Writes left before the next attempt
	penalty int  // Writes to skip after the next refusal
	off     bool // the path failed for another reason: never again
}

// appendNew tries the fast path; it reports whether the records were
// written, durably (committed). false with a nil error means: take the
// MERGE path (nothing of the attempt remains).
func (s *Sink) appendNew(ctx context.Context, records []pipeline.Record) (bool, error) {
	t := insertShape(records)
	if t == nil {
		return false, nil
	}
	target := strings.ToLower(targetName(t.ID))
	have, ok := s.tables[target]
	if !ok {
		return false, nil // the MERGE path creates the table
	}
	for i := range t.Columns {
		if _, ok := have[strings.ToLower(t.Columns[i].Name)]; !ok {
			return false, nil
		}
	}
	if b, ok := s.barriers[target]; ok {
		for i := range records {
			if records[i].Op != pipeline.OpHeartbeat && records[i].Version.Less(b) {
				return false, nil // the MERGE path drops those
			}
		}
	}
	st := s.directFor(target)
	if !st.try() {
		return false, nil
	}
	err := s.insertRecords(ctx, targetName(t.ID), t, records)
	if err == nil {
		st.penalty = 1
		return true, nil
	}
	if ctx.Err() != nil {
		return false, ctx.Err()
	}
	var de *duck.Error
	switch {
	case isConstraint(err): // a key exists or repeats
		st.skip = st.penalty
		st.penalty = min(2*st.penalty, 64)
	case errors.As(err, &de) && (de.Type == duck.ErrorTypeConversion || de.Type == duck.ErrorTypeOutOfRange),
		strings.Contains(err.Error(), "Conversion Error"), strings.Contains(err.Error(), "Out of Range Error"):
		// A value the target refuses: the MERGE path finds the record.
	case errors.Is(err, errConvert):
		// Likewise for a value that cannot be staged.
	default:
		st.off = true
		s.log.Info("bulk-load path disabled for table; using MERGE", zap.String("table", target), zap.Error(err))
	}
	return false, nil
}

// isConstraint reports a primary-key refusal. The appender flattens the
// driver's typed error into text, so the text is what is left to test.
func isConstraint(err error) bool {
	var de *duck.Error
	if errors.As(err, &de) && de.Type == duck.ErrorTypeConstraint {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "constraint violation") || strings.Contains(msg, "Constraint Error")
}

// errConvert marks a record value that cannot be staged.
var errConvert = errors.New("value cannot be staged")

// insertRecords appends the records into the target in one transaction
// and commits it; on any error the transaction is rolled back.
func (s *Sink) insertRecords(ctx context.Context, target string, t *pipeline.Table, records []pipeline.Record) (err error) {
	n := len(t.Columns)
	names := make([]string, 0, n+3)
	types := make([]duck.TypeInfo, 0, n+2)
	sel := make([]string, 0, n+3)
	cols := make([]string, 0, n+3)
	for i := range t.Columns {
		ct := typeOf(&t.Columns[i])
		ti, err := typeInfo(ct.stage)
		if err != nil {
			return err
		}
		x := "c" + strconv.Itoa(i)
		names, types = append(names, x), append(types, ti)
		if ct.conv != nil {
			x = ct.conv(x)
		}
		sel = append(sel, x)
		cols = append(cols, quote(t.Columns[i].Name))
	}
	for _, extra := range [][2]string{{"v", "BLOB"}, {"d", "BOOLEAN"}} {
		ti, err := typeInfo(extra[1])
		if err != nil {
			return err
		}
		names, types, sel = append(names, extra[0]), append(types, ti), append(sel, extra[0])
	}
	now := "make_timestamptz(" + strconv.FormatInt(s.now().UTC().UnixMicro(), 10) + "::BIGINT)"
	sel = append(sel, now)
	cols = append(cols, quote(colVersion), quote(colDeleted), quote(colUpdatedAt))
	q := "INSERT INTO " + s.qualified(target) + " (" + strings.Join(cols, ", ") + ") SELECT " + strings.Join(sel, ", ") +
		" FROM " + stageTable

	if _, err = s.conn.ExecContext(ctx, "BEGIN TRANSACTION"); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			if _, rerr := s.conn.ExecContext(context.Background(), "ROLLBACK"); rerr != nil {
				err = errors.Join(err, rerr)
				s.off(target, rerr)
			}
		}
	}()
	err = s.conn.Raw(func(dc any) error {
		conn, ok := dc.(driver.Conn)
		if !ok {
			return fmt.Errorf("unexpected driver connection %T", dc)
		}
		a, err := duck.NewQueryAppender(conn, q, stageTable, types, names)
		if err != nil {
			return err
		}
		if err := appendRecords(ctx, a, t, records); err != nil {
			return errors.Join(err, a.Clear(), a.Close())
		}
		return a.CloseWithCancel(ctx)
	})
	if err != nil {
		return err
	}
	_, err = s.conn.ExecContext(ctx, "COMMIT")
	return err
}

// off disables the fast path of a table after a failed rollback.
func (s *Sink) off(target string, err error) {
	s.directFor(strings.ToLower(target)).off = true
	s.log.Warn("bulk-load path: rollback failed", zap.String("table", target), zap.Error(err))
}

func appendRecords(ctx context.Context, a *duck.Appender, t *pipeline.Table, records []pipeline.Record) error {
	n := len(t.Columns)
	vbuf := make([]byte, 32*len(records))
	args := make([]driver.Value, n+2)
	for i := range records {
		r := &records[i]
		if i%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		if r.Op == pipeline.OpHeartbeat {
			continue
		}
		for c := range n {
			v, err := toStage(&t.Columns[c], r.After[c])
			if err != nil {
				return fmt.Errorf("%w: column %s: %v", errConvert, t.Columns[c].Name, err)
			}
			args[c] = v
		}
		v := vbuf[32*i : 32*i+32 : 32*i+32]
		for c, x := range r.Version {
			binary.BigEndian.PutUint64(v[8*c:], x)
		}
		args[n], args[n+1] = v, false
		if err := a.AppendRow(args...); err != nil {
			return err
		}
	}
	return nil
}

// insertShape returns the one table shape of records when every record is
// an insert or a snapshot read of it with a full after image, else nil.
func insertShape(records []pipeline.Record) *pipeline.Table {
	var t *pipeline.Table
	for i := range records {
		r := &records[i]
		if r.Op == pipeline.OpHeartbeat {
			continue
		}
		if (r.Op != pipeline.OpInsert && r.Op != pipeline.OpRead) || r.Table == nil || len(r.After) != len(r.Table.Columns) ||
			(t != nil && r.Table != t) {
			return nil
		}
		for _, v := range r.After {
			if v == pipeline.UnchangedValue {
				return nil
			}
		}
		t = r.Table
	}
	if t == nil || len(t.KeyIdx) == 0 {
		return nil
	}
	return t
}

// directFor returns the fast-path state of a target table.
func (s *Sink) directFor(target string) *directState {
	if s.direct == nil {
		s.direct = map[string]*directState{}
	}
	st := s.direct[target]
	if st == nil {
		st = &directState{penalty: 1}
		s.direct[target] = st
	}
	return st
}

// try reports whether to attempt the fast path for this Write.
func (st *directState) try() bool {
	if st.off {
		return false
	}
	if st.skip > 0 {
		st.skip--
		return false
	}
	return true
}
