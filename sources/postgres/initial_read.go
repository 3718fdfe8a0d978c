package postgres

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/snapshot"
)

// readRange reads one key range of the load in the reader's snapshot
// transaction, in key order, with the chunk reads' result formats
// (rowScanner: binary integers, timestamps, uuids…, text for the rest and
// for the keys), and queues its rows in batches. Rows are read from the
// socket as they are decoded and a batch blocks until Read takes it, so a
// slow pipeline slows the read (Invariant 6).
func (l *snapshotLoad) readRange(ctx context.Context, conn *pgx.Conn, job loadJob) error {
	t := job.t
	cols := make([]string, len(t.shape.Table.Columns))
	for i, c := range t.shape.Table.Columns {
		cols[i] = quoteIdent(c.Name)
	}
	sql := "SELECT " + strings.Join(cols, ", ") + " FROM " + t.ref.quoted()
	if job.where != "" {
		sql += " WHERE " + job.where
	}
	if len(t.shape.Table.KeyIdx) > 0 {
		sql += " ORDER BY " + keyList(t.shape)
	}
	b := rangeBatcher{ctx: ctx, l: l, t: t, rng: job.rng, sc: newRowScanner(t.shape)}
	res := conn.PgConn().ExecParams(ctx, sql, nil, nil, nil, b.sc.formats)
	for res.NextRow() {
		if err := b.row(res.Values()); err != nil {
			_, _ = res.Close()
			return err
		}
	}
	if _, err := res.Close(); err != nil {
		return fmt.Errorf("read %s: %w", tableName(t.ref), err)
	}
	if err := b.flush(true); err != nil {
		return err
	}
	if t.remaining.Add(-1) == 0 {
		t.finished.Store(true)
		t.total.Store(t.rows.Load())
		t.rowsTotal.Set(float64(t.rows.Load()))
		l.s.log.Info("table loaded", zap.String("table", tableName(t.ref)), zap.Int64("rows", t.rows.Load()))
	}
	return nil
}

// rangeBatcher turns the rows of one range into load batches.
type rangeBatcher struct {
	ctx   context.Context
	l     *snapshotLoad
	t     *loadTable
	rng   *snapshot.RangeProgress
	sc    *rowScanner
	batch []pipeline.Record
	bytes int
	dead  []pipeline.DeadLetter
}

func (b *rangeBatcher) row(raw [][]byte) error {
	vals, err := b.sc.scan(raw)
	if err != nil {
		// Invariant 7: the row goes to the dead-letter queue with its raw
		// values; the load goes on.
		b.dead = append(b.dead, b.sc.deadLetter(tableName(b.t.ref), raw, err))
		b.l.s.log.Warn("undecodable snapshot row sent to the dead-letter queue",
			zap.String("table", tableName(b.t.ref)), zap.Error(err))
		return nil
	}
	if b.batch == nil {
		b.batch = make([]pipeline.Record, 0, loadBatchRows) // not grown a row at a time
	}
	r := pipeline.Record{Op: pipeline.OpRead, Table: b.t.shape.Table, After: vals, EventTime: b.l.start,
		Version: snapshotVersion(b.l.s.gen, b.l.cp, snapshotRow), Snapshot: true}
	r.Size = pipeline.EstimateSize(&r)
	b.batch = append(b.batch, r)
	b.bytes += r.Size
	if len(b.batch) >= loadBatchRows || b.bytes >= loadBatchBytes {
		return b.flush(false)
	}
	return nil
}

// flush queues the rows so far, with the key of the last row read as the
// range's cursor; final ends the range (queued even without rows, so that
// it is handed over as complete).
func (b *rangeBatcher) flush(final bool) error {
	if len(b.batch) == 0 && len(b.dead) == 0 && !final {
		return nil
	}
	it := loadItem{b: pipeline.Batch{Records: b.batch, Bytes: b.bytes, Dead: b.dead}, t: b.t, rng: b.rng,
		final: final, last: b.sc.cursor()}
	select {
	case b.l.out <- it:
	case <-b.ctx.Done():
		return b.ctx.Err()
	}
	n := int64(len(b.batch))
	b.t.rows.Add(n)
	b.t.rowsDone.Add(float64(n))
	b.batch, b.bytes, b.dead = nil, 0, nil
	return nil
}
