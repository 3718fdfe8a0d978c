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
	"github.com/sluice-cdc/sluice/sinks/upsert"
)

// The bulk-load fast path (see upsert.BulkPath): a Write of inserts and
// snapshot reads of one shape is appended straight into the target in its
// own transaction, converting each record on the way and without the batch
// fold. A key that exists or repeats makes the primary key refuse it and
// the transaction is rolled back. The sink then asks the target which of
// the Write's keys it holds (probe): the others are appended after all,
// and only the records of held keys take the MERGE path, which is
// version-guarded and also reports values that cannot be converted
// (Invariant 7). An incremental snapshot's chunk meets the few rows the
// stream wrote before its window this way, instead of a MERGE of the
// whole chunk joining every row of the table. After a refusal the next
// Writes of the table probe first (BulkPath's penalty) instead of trying
// and rolling back.

// appendNew writes what it can of records through the fast path, durably
// (committed), and returns the records it did not write: all of them
// when the path does not apply, none when it wrote them all. The caller
// writes those through the MERGE path.
func (s *Sink) appendNew(ctx context.Context, records []pipeline.Record) ([]pipeline.Record, error) {
	t := upsert.InsertShape(records)
	if t == nil {
		return records, nil
	}
	target := strings.ToLower(s.targetName(t.ID))
	have, ok := s.tables[target]
	if !ok {
		return records, nil // the MERGE path creates the table
	}
	for i := range t.Columns {
		if _, ok := have[strings.ToLower(t.Columns[i].Name)]; !ok {
			return records, nil
		}
	}
	if b, ok := s.barriers[target]; ok {
		for i := range records {
			if records[i].Op != pipeline.OpHeartbeat && records[i].Version.Less(b) {
				return records, nil // the MERGE path drops those
			}
		}
	}
	st := s.direct.For(target)
	if st.Off {
		return records, nil
	}
	if st.Try() {
		written, keyed, err := s.tryInsert(ctx, st, target, t, records)
		switch {
		case err != nil:
			return nil, err
		case written:
			st.Succeeded()
			return nil, nil
		case !keyed:
			return records, nil // a value the MERGE path reports, or the path is off
		}
		st.KeyExists()
	}
	// Refused by a key (now or in a recent Write): probe.
	held, err := s.probe(ctx, s.targetName(t.ID), t, records)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if s.conn == nil || s.dropIfTainted(err) {
			return nil, err
		}
		s.log.Debug("bulk-load probe failed; using MERGE", zap.String("table", target), zap.Error(err))
		return records, nil
	}
	fresh := make([]pipeline.Record, 0, len(records)-len(held))
	left := make([]pipeline.Record, 0, len(held))
	next, rows := 0, 0
	for i := range records {
		switch {
		case next < len(held) && held[next] == i:
			left = append(left, records[i])
			next++
		case records[i].Op != pipeline.OpHeartbeat:
			fresh = append(fresh, records[i])
			rows++
		}
	}
	if rows == 0 {
		return left, nil
	}
	// Invariant 4: the fresh records go in with no version check, which
	// is the guarded upsert's result only for keys the target does not
	// hold: the probe said so, and no other write runs in between (s.mu).
	// A key repeated in the Write is refused by the primary key.
	written, _, err := s.tryInsert(ctx, st, target, t, fresh)
	if err != nil || !written {
		return records, err // a key repeats in the Write, or a value is refused: MERGE it all
	}
	s.probedIn += int64(rows)
	if len(held) == 0 {
		st.Succeeded() // the table's keys are new again: try first
	}
	return left, nil
}

// tryInsert inserts records through insertRecords. Not written with a nil
// error means the target refused them (nothing of the attempt remains):
// keyed when for a key it holds or one that repeats, else for a value it
// cannot take, or another failure, which turns the path off for the table.
func (s *Sink) tryInsert(ctx context.Context, st *upsert.BulkPath, target string, t *pipeline.Table, records []pipeline.Record) (written, keyed bool, err error) {
	err = s.insertRecords(ctx, s.targetName(t.ID), t, records)
	if err == nil {
		return true, false, nil
	}
	if ctx.Err() != nil {
		return false, false, ctx.Err()
	}
	if s.conn == nil || s.dropIfTainted(err) {
		return false, false, err // the database was dropped (commit.go): the Write is retried
	}
	var de *duck.Error
	switch {
	case isConstraint(err): // a key exists or repeats
		return false, true, nil
	case errors.As(err, &de) && (de.Type == duck.ErrorTypeConversion || de.Type == duck.ErrorTypeOutOfRange),
		strings.Contains(err.Error(), "Conversion Error"), strings.Contains(err.Error(), "Out of Range Error"):
		// A value the target refuses: the MERGE path finds the record.
	case errors.Is(err, errConvert):
		// Likewise for a value that cannot be staged.
	default:
		st.Off = true
		s.log.Info("bulk-load path disabled for table; using MERGE", zap.String("table", target), zap.Error(err))
	}
	return false, false, nil
}

// probeTable holds, for one probe, the indexes of the records whose key
// the target holds.
const probeTable = "_sluice_held"

// probe returns, in increasing order, the indexes of the records whose
// key target holds (a live row or a tombstone). It joins the records'
// staged keys with the target's key columns.
func (s *Sink) probe(ctx context.Context, target string, t *pipeline.Table, records []pipeline.Record) ([]int, error) {
	names := []string{"i"}
	it, err := typeInfo("INTEGER")
	if err != nil {
		return nil, err
	}
	types := []duck.TypeInfo{it}
	var on []string
	for _, k := range t.KeyIdx {
		ct := typeOf(&t.Columns[k])
		ti, err := typeInfo(ct.stage)
		if err != nil {
			return nil, err
		}
		x := "c" + strconv.Itoa(k)
		names, types = append(names, x), append(types, ti)
		if ct.conv != nil {
			x = ct.conv(x)
		}
		on = append(on, "t."+quote(t.Columns[k].Name)+" = "+x)
	}
	if _, err := s.conn.ExecContext(ctx, "CREATE OR REPLACE TEMP TABLE "+probeTable+" (i INTEGER)"); err != nil {
		return nil, err
	}
	defer func() {
		if s.conn != nil {
			_, _ = s.conn.ExecContext(context.Background(), "DROP TABLE IF EXISTS "+probeTable)
		}
	}()
	q := "INSERT INTO " + probeTable + " SELECT i FROM " + stageTable + " JOIN " + s.qualified(target) + " AS t ON " +
		strings.Join(on, " AND ")
	err = s.appendThrough(ctx, q, types, names, func(a *duck.Appender) error {
		args := make([]driver.Value, 1+len(t.KeyIdx))
		for i := range records {
			r := &records[i]
			if r.Op == pipeline.OpHeartbeat {
				continue
			}
			args[0] = int32(i)
			for j, k := range t.KeyIdx {
				v, err := toStage(&t.Columns[k], r.After[k])
				if err != nil {
					return fmt.Errorf("%w: column %s: %v", errConvert, t.Columns[k].Name, err)
				}
				args[1+j] = v
			}
			if err := a.AppendRow(args...); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	rows, err := s.conn.QueryContext(ctx, "SELECT i FROM "+probeTable+" ORDER BY i")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var held []int
	for rows.Next() {
		var i int32
		if err := rows.Scan(&i); err != nil {
			return nil, err
		}
		held = append(held, int(i))
	}
	return held, rows.Err()
}

// isConstraint reports a primary-key refusal. The appender flattens the
// driver's typed error into text, so the text is what is left to test: a
// key repeated in the Write reads "Constraint Error … constraint
// violation", a key the table holds, refused when the appender closes,
// "Duplicate key … violates primary key constraint".
func isConstraint(err error) bool {
	var de *duck.Error
	if errors.As(err, &de) && de.Type == duck.ErrorTypeConstraint {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "constraint violation") || strings.Contains(msg, "Constraint Error") ||
		strings.Contains(msg, "violates primary key constraint")
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
		if err != nil && s.conn != nil { // nil: dropped (commit.go)
			if _, rerr := s.conn.ExecContext(context.Background(), "ROLLBACK"); rerr != nil {
				err = errors.Join(err, rerr)
				s.off(target, rerr)
			}
		}
	}()
	err = s.appendThrough(ctx, q, types, names, func(a *duck.Appender) error {
		return appendRecords(ctx, a, t, records)
	})
	if err != nil {
		return err
	}
	return s.commit(ctx)
}

// off disables the fast path of a table after a failed rollback.
func (s *Sink) off(target string, err error) {
	s.direct.For(strings.ToLower(target)).Off = true
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
