package mysql

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/go-mysql-org/go-mysql/client"
	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"go.uber.org/zap"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/snapshot"
	"github.com/sluice-cdc/sluice/sources/internal/rangequeue"
)

// snapshotBatch is the records per batch the load hands over.
const snapshotBatch = 2048

// plan describes the tables: their shapes, keys and estimated rows. Each
// table's ranges start as one range over all of it (its tail), which the
// walk (walk) splits as it finds boundaries, so the ranges cover every
// table whole from before the barriers are handed over.
func (l *snapshotLoad) plan(ctx context.Context) error {
	s := l.s
	for _, name := range s.tables {
		descs, err := catalogDescs(l.control, name.db, name.table)
		if err != nil {
			return err
		}
		t := &loadTable{name: name, descs: descs, table: s.shapes.seed(tableID(name), descs)}
		t.cols = selectList(descs)
		t.keys = newKeyset(descs, t.table.KeyIdx)
		if len(t.table.KeyIdx) == 0 {
			return fmt.Errorf("mysql source: table %s.%s has no primary key", name.db, name.table)
		}
		if r, err := l.control.Execute("SELECT IFNULL(TABLE_ROWS, 0) FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?",
			name.db, name.table); err == nil {
			n, _ := r.GetInt(0, 0)
			t.total = n
			r.Close()
		}
		label := name.db + "." + name.table
		t.gDone, t.gTotal = s.m.snapshotDone.WithLabelValues(label), s.m.snapshotTotal.WithLabelValues(label)
		t.gDone.Set(0)
		t.gTotal.Set(float64(t.total))
		t.tail = &snapshot.RangeProgress{}
		t.ranges = []*snapshot.RangeProgress{t.tail}
		l.tables = append(l.tables, t)
	}
	return nil
}

// walk splits each table into primary-key ranges whose boundaries are
// rows the database returned (its collation, its order), walking the key
// index ChunkRows rows at a time on the control connection, and queues
// each range as soon as its upper boundary is found; the rest of the
// table above it stays the tail, whose lower end follows the walk, and
// is queued last, so a checkpoint taken mid-walk never counts as read a
// row no range still holds (Invariant 1).
func (l *snapshotLoad) walk(ctx context.Context, q *rangequeue.Queue[loadJob]) error {
	for _, t := range l.tables {
		var lo []any
		var loCur snapshot.Cursor
		err := l.boundaries(ctx, t, func(hi []any) error {
			hiCur, err := cursorOf(hi)
			if err != nil {
				return err
			}
			rng := &snapshot.RangeProgress{After: loCur, UpTo: hiCur}
			l.handedMu.Lock()
			t.ranges = append(t.ranges, rng)
			t.tail.After = hiCur
			l.handedMu.Unlock()
			q.Push(loadJob{t: t, lo: lo, hi: hi, rng: rng})
			lo, loCur = hi, hiCur
			return nil
		})
		if err != nil {
			return err
		}
		q.Push(loadJob{t: t, lo: lo, rng: t.tail})
	}
	return nil
}

// boundaries calls found with the key of every ChunkRows-th row, in key
// order.
func (l *snapshotLoad) boundaries(ctx context.Context, t *loadTable, found func([]any) error) error {
	keys := t.keys.list()
	from := quoteIdent(t.name.db) + "." + quoteIdent(t.name.table)
	first := fmt.Sprintf("SELECT %s FROM %s ORDER BY %s LIMIT 1 OFFSET %d", keys, from, keys, l.s.opts.Snapshot.ChunkRows-1)
	cond := t.keys.after()
	next := fmt.Sprintf("SELECT %s FROM %s WHERE %s ORDER BY %s LIMIT 1 OFFSET %d", keys, from, cond, keys, l.s.opts.Snapshot.ChunkRows-1)
	var prev []any
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		var r *gomysql.Result
		var err error
		if prev == nil {
			r, err = l.control.Execute(first)
		} else {
			r, err = l.control.Execute(next, afterArgs(prev)...)
		}
		if err != nil {
			return fmt.Errorf("mysql source: split %s.%s into ranges: %w", t.name.db, t.name.table, gaveWay(err))
		}
		if len(r.Values) == 0 {
			r.Close()
			return nil
		}
		row, err := t.keys.bound(r.Values[0])
		r.Close()
		if err != nil {
			return fmt.Errorf("mysql source: split %s.%s into ranges: %w", t.name.db, t.name.table, err)
		}
		if err := found(row); err != nil {
			return err
		}
		prev = row
	}
}

// cursorOf is the ChunkReader cursor of a bound, nil for none.
func cursorOf(bound []any) (snapshot.Cursor, error) {
	if bound == nil {
		return nil, nil
	}
	return encodeCursor(bound)
}

// rawRow is a copy of row's values as go-mysql gave them (a dead
// letter's raw row).
func rawRow(row []gomysql.FieldValue) []any {
	raw := make([]any, len(row))
	for i := range row {
		raw[i] = fieldValue(row[i])
	}
	return raw
}

// fieldValue turns a binary-protocol value into what converter.value
// reads: fieldView with the bytes copied, so that it may outlive the row.
func fieldValue(fv gomysql.FieldValue) any {
	v := fieldView(fv)
	if b, ok := v.([]byte); ok {
		return append([]byte(nil), b...)
	}
	return v
}

// run hands over every table's truncate barrier, then reads the ranges
// on every reader while the control connection walks the keys and queues
// them (walk), until none is left.
func (l *snapshotLoad) run(ctx context.Context) {
	defer close(l.out)
	l.s.log.Info("initial load started", zap.Int("tables", len(l.tables)), zap.Int("readers", len(l.readers)),
		zap.String("gtid", l.start.GTID))
	barriers := loadItem{barriers: true}
	for _, t := range l.tables {
		barriers.b.Records = append(barriers.b.Records, pipeline.Record{Op: pipeline.OpTruncate, Table: t.table, Snapshot: true,
			EventTime: l.startAt.UTC(), Size: 128, Version: l.version(l.start.Pos, l.startFile(), barrierIndex)})
	}
	select {
	case l.out <- barriers:
	case <-ctx.Done():
		l.fail(ctx.Err()) // a load cut short is never complete
		return
	}
	// A reader's failure ends the load: it cancels the walk and the other
	// readers (the queue closes with ctx), and its error is the load's.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	q := rangequeue.New[loadJob]()
	stop := context.AfterFunc(ctx, q.Close)
	defer stop()
	// The watcher gives way to a statement waiting for the readers'
	// metadata locks (giveway.go); it stops once the readers are done.
	watchCtx, stopWatch := context.WithCancel(ctx)
	watched := make(chan struct{})
	own := map[uint64]bool{uint64(l.control.GetConnectionID()): true}
	for _, r := range l.readers {
		own[uint64(r.c.GetConnectionID())] = true
	}
	go func() {
		defer close(watched)
		if err := l.watchWaiters(watchCtx, own); err != nil {
			l.fail(err)
			cancel()
		}
	}()
	var wg sync.WaitGroup
	for _, r := range l.readers {
		wg.Add(1)
		go func(r *snapReader) {
			defer wg.Done()
			for {
				job, ok := q.Pop()
				if !ok || l.failed() {
					return
				}
				if err := l.read(ctx, r, job); err != nil {
					l.fail(err)
					cancel()
					return
				}
			}
		}(r)
	}
	if err := l.walk(ctx, q); err != nil {
		l.fail(err)
	}
	q.Close()
	wg.Wait()
	stopWatch()
	<-watched
	// End the readers' transactions now, failed or not, not when the
	// source closes or Read drains the last batches (which a stalled
	// pipeline may not do for long): a schema change may be waiting for
	// their metadata locks, and every statement on its table behind it.
	l.close()
}

func (l *snapshotLoad) startFile() uint64 {
	n, _ := fileNumber(l.start.File)
	return n
}

func (l *snapshotLoad) version(pos uint32, file uint64, index uint64) pipeline.Version {
	return pipeline.Version{l.start.Epoch, file, uint64(pos), index}
}

// read copies one key range in the reader's snapshot transaction.
func (l *snapshotLoad) read(ctx context.Context, r *snapReader, job loadJob) error {
	t := job.t
	var where []string
	var args []any
	if job.lo != nil {
		where = append(where, t.keys.after())
		args = append(args, afterArgs(job.lo)...)
	}
	if job.hi != nil {
		where = append(where, "NOT "+t.keys.after())
		args = append(args, afterArgs(job.hi)...)
	}
	q := "SELECT " + t.cols + " FROM " + quoteIdent(t.name.db) + "." + quoteIdent(t.name.table)
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY " + t.keys.list()
	stmt, err := r.c.Prepare(q)
	if err != nil {
		return fmt.Errorf("mysql source: snapshot of %s.%s: %w", t.name.db, t.name.table, gaveWay(err))
	}
	defer stmt.Close()
	rr := rowReader{conv: converter{zeroNull: l.s.opts.ZeroDates == ZeroDatesNull, charsets: l.s.cs}, descs: t.descs}
	v := l.version(r.pos, r.file, snapshotRow)
	batch := make([]pipeline.Record, 0, snapshotBatch)
	var dead []pipeline.DeadLetter
	var last heldKey
	// flush queues the rows so far; final ends the range (queued even
	// without rows, so that it is handed over as complete).
	flush := func(final bool) error {
		if len(batch) == 0 && len(dead) == 0 && !final {
			return nil
		}
		it := loadItem{b: pipeline.Batch{Records: batch, Dead: dead}, t: t, rng: job.rng, final: final}
		if last.seen {
			held := last.values()
			b := make([]any, len(held))
			for i, v := range held {
				var err error
				if b[i], err = boundOf(t.keys.descs[i], v); err != nil {
					return err
				}
			}
			var err error
			if it.last, err = encodeCursor(b); err != nil {
				return err
			}
		}
		select {
		case l.out <- it:
		case <-ctx.Done():
			return ctx.Err()
		}
		t.done.Add(int64(len(batch)))
		t.gDone.Set(float64(t.done.Load()))
		batch, dead = make([]pipeline.Record, 0, snapshotBatch), nil
		return nil
	}
	var result gomysql.Result
	err = stmt.ExecuteSelectStreaming(&result, func(row []gomysql.FieldValue) error {
		if err := ctx.Err(); err != nil {
			return err // Close waits for the readers to stop before it closes their connections
		}
		last.hold(row, t.table.KeyIdx)
		rec := pipeline.Record{Op: pipeline.OpRead, Table: t.table, Snapshot: true, EventTime: l.startAt.UTC(), Version: v}
		after, bad, err := rr.row(row)
		if err != nil {
			// Invariant 7: the row goes to the DLQ, the load goes on.
			dead = append(dead, deadLetter(t.table, pipeline.OpRead, v, [][]any{rawRow(row)}, fmt.Errorf("column %s: %w", t.descs[bad].name, err)))
			return nil
		}
		rec.After = after
		rec.Size = pipeline.EstimateSize(&rec)
		batch = append(batch, rec)
		if len(batch) >= snapshotBatch {
			return flush(false)
		}
		return nil
	}, nil, args...)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("mysql source: snapshot of %s.%s: %w", t.name.db, t.name.table, gaveWay(err))
	}
	return flush(true)
}

// gaveWay explains the two ways a schema change ends the load, and marks
// them for a restart (pipeline.Restart), which resumes the load from its
// checkpoint and reads the rest in chunks: a lock wait the server gave
// up (lockWaitSeconds: a schema change waits for the load's metadata
// locks and the load for it), and a table rebuilt after the load's
// snapshot began (ER_TABLE_DEF_CHANGED: an ALTER or TRUNCATE of a table
// no reader had touched yet).
func gaveWay(err error) error {
	var me *gomysql.MyError
	if !errors.As(err, &me) {
		return err
	}
	switch me.Code {
	case gomysql.ER_LOCK_WAIT_TIMEOUT:
		return pipeline.Restart(fmt.Errorf("%w (a schema change or LOCK TABLES waits for the table and for the load's transactions, which end with this error; "+
			"started again, the pipeline resumes the load from its checkpoint and reads the rest in chunks)", err))
	case gomysql.ER_TABLE_DEF_CHANGED:
		return pipeline.Restart(fmt.Errorf("%w (a schema change rebuilt the table after the load's snapshot began; "+
			"started again, the pipeline resumes the load from its checkpoint and reads the rest in chunks)", err))
	}
	return err
}

func (l *snapshotLoad) fail(err error) {
	l.errMu.Lock()
	if l.err == nil {
		l.err = err
	}
	l.errMu.Unlock()
}

func (l *snapshotLoad) failed() bool {
	l.errMu.Lock()
	defer l.errMu.Unlock()
	return l.err != nil
}

// next returns the next batch of the load, recorded as handed over; ok is
// false once it is complete.
func (l *snapshotLoad) next(ctx context.Context) (b pipeline.Batch, ok bool, err error) {
	select {
	case it, ok := <-l.out:
		if !ok {
			l.errMu.Lock()
			defer l.errMu.Unlock()
			return pipeline.Batch{}, false, l.err
		}
		l.handedMu.Lock()
		if it.barriers {
			for _, t := range l.tables {
				t.started = true
			}
		}
		if it.t != nil {
			it.t.handed += int64(len(it.b.Records))
		}
		if it.rng != nil {
			it.rng.Handed(it.last, it.final)
		}
		l.handedMu.Unlock()
		return it.b, true, nil
	case <-ctx.Done():
		return pipeline.Batch{}, false, ctx.Err()
	}
}

// state is the load's snapshot.LoadState as of the batches next
// returned.
func (l *snapshotLoad) state() snapshot.LoadState {
	st := snapshot.LoadState{Stream: l.start.Encode()}
	l.handedMu.Lock()
	defer l.handedMu.Unlock()
	for _, t := range l.tables {
		lt := snapshot.LoadTable{Table: t.table.ID, Started: t.started, Rows: t.handed, Estimate: t.total}
		lt.Ranges = snapshot.Remaining(t.ranges)
		if !t.started || len(lt.Ranges) > 0 {
			st.Tables = append(st.Tables, lt)
		}
	}
	return st
}

// close ends the reader transactions and connections.
func (l *snapshotLoad) close() {
	l.closeOnce.Do(func() {
		for _, r := range l.readers {
			closeQuietly(r.c)
		}
		if l.control != nil {
			closeQuietly(l.control)
		}
	})
}

func closeQuietly(c *client.Conn) {
	if c != nil {
		_ = c.Close()
	}
}

// progress reports rows done per table.
func (l *snapshotLoad) progress() []pipeline.TableStatus {
	out := make([]pipeline.TableStatus, 0, len(l.tables))
	for _, t := range l.tables {
		out = append(out, pipeline.TableStatus{Table: t.name.db + "." + t.name.table, RowsDone: t.done.Load(), RowsTotal: t.total})
	}
	return out
}
