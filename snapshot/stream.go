package snapshot

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/verify"
)

// Read returns the source's next batch with every watermark taken out
// and, right after each high watermark of a window of this run, the
// window's chunk rows whose keys no change touched since its low
// watermark (Invariant 12). A batch is cut after each high watermark,
// and every positioned batch carries the snapshot progress as of its
// end, so a checkpoint covers exactly the chunks emitted before it.
func (e *Engine) Read(ctx context.Context) (pipeline.Batch, error) {
	for len(e.pending) == 0 {
		b, err := e.src.Read(ctx)
		if err != nil {
			return b, err
		}
		e.scan(b)
	}
	b := e.pending[0]
	e.pending[0] = pipeline.Batch{}
	e.pending = e.pending[1:]
	return b, nil
}

// scan splits b at its high watermarks into e.pending.
func (e *Engine) scan(b pipeline.Batch) {
	e.mu.Lock()
	defer e.mu.Unlock()
	active := len(e.prog.Tables) > 0 || len(e.windows) > 0
	if !active && !hasWatermark(b.Records) {
		e.track(b.Records)
		e.pending = append(e.pending, e.positioned(b))
		return
	}
	out := pipeline.Batch{Dead: b.Dead}
	recs := make([]pipeline.Record, 0, len(b.Records))
	for i := range b.Records {
		r := &b.Records[i]
		if r.Op != pipeline.OpWatermark {
			if r.Table != nil {
				e.shapes[r.Table.ID] = r.Table
			}
			e.commits.add(r.TxID, r.Version)
			if r.Op.IsData() {
				e.touch(r)
			}
			recs = append(recs, *r)
			continue
		}
		tok, _ := r.After[0].(string)
		stem, kind, ok := splitToken(tok)
		w := e.windows[stem]
		if !ok || w == nil {
			continue // another run's, or another pipeline's
		}
		switch kind {
		case barrierSuffix:
			// Invariant 4: a fresh pipeline's snapshot clears what the
			// sinks hold of the table below this point; the barrier goes
			// out with the table's first window, once its shape is known.
			delete(e.windows, stem)
			v := r.Version
			v[3] = barrierIndex
			w.table.barrier = &pipeline.Record{Op: pipeline.OpTruncate, Version: v, EventTime: r.EventTime, Snapshot: true, Pos: r.Pos}
			w.finish(outcome{})
			continue
		case lowSuffix:
			w.started, w.low = true, r.Version
			if t := w.table; t.Barrier && t.barrier != nil && t.shape != nil {
				bar := *t.barrier
				bar.Table = t.shape
				bar.Size = pipeline.EstimateSize(&bar)
				recs = append(recs, bar)
				t.Barrier, t.barrier = false, nil
			}
			continue
		}
		rows, dead := e.reconcile(w, r)
		recs = append(recs, rows...)
		out.Dead = append(out.Dead, dead...)
		out.Records, out.Pos = recs, r.Pos
		e.pending = append(e.pending, e.positioned(out))
		out, recs = pipeline.Batch{}, make([]pipeline.Record, 0, len(b.Records)-i)
	}
	if len(recs) > 0 || len(out.Dead) > 0 || b.Pos != nil {
		out.Records, out.Pos = recs, b.Pos
		e.pending = append(e.pending, e.positioned(out))
	}
}

func hasWatermark(recs []pipeline.Record) bool {
	for i := range recs {
		if recs[i].Op == pipeline.OpWatermark {
			return true
		}
	}
	return false
}

// track notes the shapes and the transactions of records that need no
// window's attention. The commits are kept even while no snapshot runs:
// a transaction whose visibility lags its commit record may be in the
// in-progress list of a chunk read long after it was decoded.
func (e *Engine) track(recs []pipeline.Record) {
	var last *pipeline.Table
	for i := range recs {
		r := &recs[i]
		e.commits.add(r.TxID, r.Version)
		if t := r.Table; t != nil && t != last {
			e.shapes[t.ID], last = t, t
		}
	}
}

// positioned wraps b's position with the progress as it is now.
func (e *Engine) positioned(b pipeline.Batch) pipeline.Batch {
	if b.Pos != nil {
		b.Pos = e.prog.encode(b.Pos)
	}
	return b
}

// touch adds r's keys to every started window of its table.
func (e *Engine) touch(r *pipeline.Record) {
	for _, w := range e.windows {
		if !w.started || w.over || !sameTable(w.table.id(), r.Table.ID) {
			continue
		}
		if r.Op == pipeline.OpTruncate {
			w.cleared = true
			continue
		}
		w.touch(r)
	}
}

// Row indexes (docs/versions.md, shared by both sources): a snapshot's
// truncate barrier, its rows.
const (
	barrierIndex = 0
	snapshotRow  = 1
)

// reconcile closes w at its high watermark h: it returns the rows to
// emit, or none when the chunk must be read again, and advances the
// range.
func (e *Engine) reconcile(w *window, h *pipeline.Record) ([]pipeline.Record, []pipeline.DeadLetter) {
	delete(e.windows, w.stem)
	t, c := w.table, w.chunk
	if c == nil || w.high == nil || !w.started {
		// The worker gave up on it before H committed; it reads again.
		w.finish(outcome{redo: "abandoned"})
		return nil, nil
	}
	for _, xid := range c.InProgress {
		if e.commits.before(xid, w.low) {
			e.m.chunks.WithLabelValues("redo_visibility").Inc()
			e.stats.Redone++
			e.log.Info("chunk read again: its read could not see a transaction that committed before its low watermark",
				zap.String("table", t.id().String()), zap.Uint64("xid", xid))
			w.finish(outcome{redo: fmt.Sprintf("transaction %d committed before the low watermark but was not visible to the read", xid)})
			return nil, nil
		}
	}
	if !sameShape(c.Table, w.high) {
		e.m.chunks.WithLabelValues("redo_schema").Inc()
		e.stats.Redone++
		e.log.Info("chunk read again: the table's shape changed between the read and the high watermark",
			zap.String("table", t.id().String()))
		w.finish(outcome{redo: "schema changed"})
		return nil, nil
	}
	shape := c.Table
	if s := e.shapes[shape.ID]; s != nil {
		if sameColumns(s, shape) {
			shape = s
		} else if s.Generation >= shape.Generation {
			// Newer than anything the stream showed (the stream meets
			// the change at the table's next row): sort it above.
			cp := *shape
			cp.Generation = s.Generation + 1
			shape = &cp
		}
	}
	v := h.Version
	v[3] = snapshotRow
	now := time.Now().UTC()
	var rows []pipeline.Record
	if !w.cleared {
		rows = make([]pipeline.Record, 0, len(c.Rows))
		for _, row := range c.Rows {
			if _, hit := w.touched[verify.RowKey(shape, row)]; hit {
				continue
			}
			r := pipeline.Record{Op: pipeline.OpRead, Table: shape, After: row, Version: v, EventTime: now,
				Snapshot: true, Pos: h.Pos}
			r.Size = pipeline.EstimateSize(&r)
			rows = append(rows, r)
		}
	}
	// The range moves on only now: the rows are in this batch, whose
	// position carries the new cursor (Invariant 12).
	if len(c.Rows)+len(c.Dead) < w.limit || c.Last == nil {
		w.rng.Done = true
	} else {
		w.rng.After = c.Last
	}
	t.Rows += int64(len(c.Rows))
	t.Chunks++
	e.rateOf(t).add(len(c.Rows))
	e.m.rows.Add(float64(len(rows)))
	e.m.chunks.WithLabelValues("emitted").Inc()
	e.stats.Chunks++
	if t.done() {
		e.finishTable(t)
	}
	w.finish(outcome{emitted: len(rows)})
	return rows, c.Dead
}

// finishTable records a finished table; e.mu is held.
func (e *Engine) finishTable(t *tableProgress) {
	for i, x := range e.prog.Tables {
		if x == t {
			e.prog.Tables = append(e.prog.Tables[:i:i], e.prog.Tables[i+1:]...)
			break
		}
	}
	if t.Where == "" {
		e.prog.know(t.id().String())
	}
	// Done once a checkpoint covers the last rows (Ack).
	e.finished = append(e.finished, finishedTable{run: t.Run, status: pipeline.TableStatus{Table: t.id().String(),
		RowsDone: t.Rows, RowsTotal: t.Rows, Incremental: true, Chunks: t.Chunks, Where: t.Where}})
	if len(e.finished) > 32 {
		e.finished = e.finished[1:]
	}
	e.m.tables.Set(float64(len(e.prog.Tables)))
	e.log.Info("table snapshotted", zap.String("table", t.id().String()), zap.String("where", t.Where),
		zap.String("run", t.Run), zap.Int64("rows", t.Rows), zap.Int64("chunks", t.Chunks),
		zap.Duration("took", time.Since(t.Requested).Round(time.Millisecond)))
}
