package snapshot

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/verify"
)

// Read returns the source's next batch with every watermark and rewrite
// taken out (a rewrite queues its table's new snapshot) and, right after
// each high watermark of a window of this run, the window's chunk rows
// whose keys no change touched since its low watermark (Invariant 12). A
// batch is cut after each high watermark, and every positioned batch
// carries the snapshot progress as of its end, so a checkpoint covers
// exactly the chunks emitted before it.
func (e *Engine) Read(ctx context.Context) (pipeline.Batch, error) {
	for len(e.pending) == 0 {
		// A refusal that stops the pipeline interrupts a blocked read.
		rctx, cancel := context.WithCancel(ctx)
		e.mu.Lock()
		fatal := e.fatal
		e.interrupt = cancel
		e.mu.Unlock()
		if fatal != nil {
			cancel()
			return pipeline.Batch{}, pipeline.Fatal(fatal)
		}
		b, err := e.src.Read(rctx)
		e.mu.Lock()
		e.interrupt = nil
		fatal = e.fatal
		e.mu.Unlock()
		cancel()
		if err != nil {
			if fatal != nil && ctx.Err() == nil {
				return b, pipeline.Fatal(fatal)
			}
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
	e.refetch(b.Records)
	active := len(e.prog.Tables) > 0 || len(e.windows) > 0
	if !active && !hasControl(b.Records) {
		e.track(b.Records)
		e.pending = append(e.pending, e.positioned(b))
		return
	}
	out := pipeline.Batch{Dead: b.Dead}
	recs := make([]pipeline.Record, 0, len(b.Records))
	for i := range b.Records {
		r := &b.Records[i]
		if r.Op == pipeline.OpRewrite {
			e.rewritten(r)
			continue
		}
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
			if t := w.table; t.Barrier {
				t.barrier = &pipeline.Record{Op: pipeline.OpTruncate, Version: v, EventTime: r.EventTime, Snapshot: true, Pos: r.Pos}
			} else if t.Sweep && t.SweepAt == nil {
				// Invariant 14: checkpointed with this batch, before
				// any chunk of the run is emitted.
				t.SweepAt = &v
				e.progChanged = true
			}
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
				e.progChanged = true
			}
			continue
		}
		rows, dead := e.reconcile(w, r)
		// The sweep of a table this chunk finished: after its rows, in the
		// batch whose progress no longer has the table.
		rows, e.sweeps = append(rows, e.sweeps...), nil
		if len(recs) == 0 {
			// The usual case: H alone since the last cut. The chunk's rows
			// are the batch as reconcile made them, not a copy of them.
			recs = rows
		} else {
			recs = append(recs, rows...)
		}
		out.Dead = append(out.Dead, dead...)
		// Cut at H: its transaction's own position is a transaction
		// boundary (Invariant 2) and covers the rows just emitted.
		out.Records, out.Pos = recs, r.Pos
		e.pending = append(e.pending, e.positioned(out))
		out, recs = pipeline.Batch{}, make([]pipeline.Record, 0, len(b.Records)-i)
	}
	if len(recs) > 0 || len(out.Dead) > 0 || b.Pos != nil {
		out.Records, out.Pos = recs, b.Pos
		e.pending = append(e.pending, e.positioned(out))
	}
}

// hasControl reports a record the engine consumes: a watermark or a
// rewrite.
func hasControl(recs []pipeline.Record) bool {
	for i := range recs {
		if recs[i].Op == pipeline.OpWatermark || recs[i].Op == pipeline.OpRewrite {
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

// positioned wraps b's position with the progress as it is now; the
// progress is encoded again only after it changed (e.changed).
func (e *Engine) positioned(b pipeline.Batch) pipeline.Batch {
	if b.Pos == nil {
		// A batch of the source's initial load: positioned when the load
		// can resume (Loader).
		b.Pos = e.loadPosition()
		return b
	}
	if e.progJSON == nil || e.progChanged {
		e.progJSON, e.progChanged = e.prog.marshal(), false
	}
	b.Pos = wrap(b.Pos, e.progJSON)
	return b
}

// touch adds r's keys to every started window of its table.
func (e *Engine) touch(r *pipeline.Record) {
	var keys *changeKeys
	for _, w := range e.windows {
		if !w.started || w.over || !sameTable(w.table.id(), r.Table.ID) {
			continue
		}
		if r.Op == pipeline.OpTruncate {
			w.cleared = true
			continue
		}
		if keys == nil {
			k := keysOf(r)
			keys = &k
		}
		w.touch(*keys)
	}
}

// Row indexes (docs/versions.md, shared by both sources): a snapshot's
// truncate barrier, its rows.
const (
	barrierIndex = 0
	snapshotRow  = 1
)

// hiddenCommit returns a transaction the stream showed committing below
// low that c's read could not see: one of its in-progress list, or one at
// or above its first invisible id.
func (e *Engine) hiddenCommit(c *Chunk, low pipeline.Version) (uint64, bool) {
	for _, xid := range c.InProgress {
		if e.commits.before(xid, low) {
			return xid, true
		}
	}
	if c.InvisibleFrom != 0 {
		return e.commits.atOrAbove(c.InvisibleFrom, low)
	}
	return 0, false
}

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
	if xid, ok := e.hiddenCommit(c, w.low); ok {
		e.m.chunks.WithLabelValues("redo_visibility").Inc()
		e.stats.Redone++
		e.log.Info("chunk read again: its read could not see a transaction that committed before its low watermark",
			zap.String("table", t.id().String()), zap.Uint64("xid", xid))
		w.finish(outcome{redo: fmt.Sprintf("transaction %d committed before the low watermark but was not visible to the read", xid)})
		return nil, nil
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
		if !sameColumns(s, shape) {
			// The read saw a shape the stream has not shown yet: a
			// schema change committed before H, which the stream meets
			// at the table's next row or shape check. Rows go out with
			// the stream's shape only (Invariant 11): it carries what
			// no catalog read knows, the missing values of added
			// columns, which the sinks fill the older rows with when
			// they add the column. Read again once the stream shows it.
			e.m.chunks.WithLabelValues("redo_schema").Inc()
			e.stats.Redone++
			e.log.Info("chunk read again: the stream has not shown the table's new shape yet",
				zap.String("table", t.id().String()))
			w.finish(outcome{redo: "the stream has not shown the shape yet"})
			return nil, nil
		}
		shape = s
	}
	t.shape = shape // for its sweep (Invariant 14)
	v := h.Version
	v[3] = snapshotRow
	now := time.Now().UTC()
	var rows []pipeline.Record
	var bytes int // the chunk's emitted records' sizes (outcome.bytes)
	if !w.cleared {
		rows = make([]pipeline.Record, 0, len(c.Rows))
		// A record's size is its struct and position beside its row's.
		base := pipeline.EstimateSize(&pipeline.Record{Pos: h.Pos})
		replaces := !e.firstRead(t)
		for i, row := range c.Rows {
			if len(w.touched) > 0 {
				if _, hit := w.touched[verify.RowKey(shape, row)]; hit {
					continue
				}
			}
			r := pipeline.Record{Op: pipeline.OpRead, Table: shape, After: row, Version: v, EventTime: now,
				Snapshot: true, Replaces: replaces, Pos: h.Pos, Size: base + c.Sizes[i]}
			bytes += r.Size
			rows = append(rows, r)
		}
	}
	if w.keyed != nil && t.Repair && !w.cleared {
		rows = append(rows, repairDeletes(w, c, shape, v, now, h.Pos)...)
	}
	e.m.rows.Add(float64(len(rows)))
	o := outcome{emitted: len(rows), read: chunkRead{rows: len(rows), bytes: bytes}}
	if len(w.unchanged) > 0 {
		w.needKeys()
	}
	for k, key := range w.unchanged {
		if _, in := w.keys[k]; in {
			o.refetch = append(o.refetch, key)
		}
	}
	if w.keyed != nil {
		if t.Repair {
			e.stats.Repaired += int64(len(w.keyed))
			t.Rows += int64(len(w.keyed))
			t.Chunks++
			e.progChanged = true
		} else {
			e.stats.Refetched += int64(len(w.keyed))
		}
		if len(o.refetch) == 0 {
			e.advance(t, w.rng, w.then.last, w.then.short)
		}
		w.finish(o)
		return rows, c.Dead
	}
	t.Rows += int64(len(c.Rows))
	t.Chunks++
	e.rateOf(t).add(len(c.Rows))
	e.m.chunks.WithLabelValues("emitted").Inc()
	e.stats.Chunks++
	if c.Cut {
		e.stats.Cut++
	}
	o.last, o.short = c.Last, len(c.Rows)+len(c.Dead) < w.limit && !c.Cut || c.Last == nil
	if len(o.refetch) == 0 {
		// The range moves on only now: the rows are in this batch, whose
		// position carries the new cursor (Invariant 12).
		e.advance(t, w.rng, o.last, o.short)
	}
	e.progChanged = true
	w.finish(o)
	return rows, c.Dead
}

// repairDeletes are the deletes of a repair window's keys that have no row
// in its chunk and that no change in the window touched, versioned like
// its rows: a row only a sink holds is removed, and a later insert sorts
// above.
func repairDeletes(w *window, c *Chunk, shape *pipeline.Table, v pipeline.Version, now time.Time, pos pipeline.Position) []pipeline.Record {
	if len(c.Dead) > 0 {
		// A row the source could not decode went to the dead-letter
		// queue; its key is not known here, so no key counts as absent.
		return nil
	}
	present := make(map[string]struct{}, len(c.Rows))
	for _, row := range c.Rows {
		present[verify.RowKey(c.Table, row)] = struct{}{}
	}
	var out []pipeline.Record
	for _, key := range w.keyed {
		k := verify.Key(key)
		if _, ok := present[k]; ok {
			continue
		}
		if _, hit := w.touched[k]; hit {
			continue
		}
		before := make([]any, len(shape.Columns))
		for i, idx := range shape.KeyIdx {
			before[idx] = key[i]
		}
		r := pipeline.Record{Op: pipeline.OpDelete, Table: shape, Before: before, Version: v, EventTime: now, Snapshot: true, Pos: pos}
		r.Size = pipeline.EstimateSize(&r)
		out = append(out, r)
	}
	return out
}

// advance moves rng past a chunk whose rows (and keys read again) are
// emitted; e.mu is held.
func (e *Engine) advance(t *tableProgress, rng *keyRange, last Cursor, short bool) {
	if short {
		rng.Done = true
	} else {
		rng.After = last
	}
	e.progChanged = true
	if t.done() {
		e.finishTable(t)
	}
}

// finishTable records a finished table; e.mu is held.
func (e *Engine) finishTable(t *tableProgress) {
	for i, x := range e.prog.Tables {
		if x == t {
			e.prog.Tables = append(e.prog.Tables[:i:i], e.prog.Tables[i+1:]...)
			break
		}
	}
	if t.Where == "" && !t.Repair {
		e.prog.know(t.id().String())
	}
	e.sweep(t)
	e.progChanged = true
	// Done once a checkpoint covers the last rows (Ack).
	e.finished = append(e.finished, finishedTable{run: t.Run, status: pipeline.TableStatus{Table: t.id().String(),
		RowsDone: t.Rows, RowsTotal: t.Rows, Incremental: true, Chunks: t.Chunks, Where: t.label()}})
	if len(e.finished) > 32 {
		e.finished = e.finished[1:]
	}
	e.m.tables.Set(float64(len(e.prog.Tables)))
	e.log.Info("table snapshotted", zap.String("table", t.id().String()), zap.String("where", t.Where),
		zap.String("run", t.Run), zap.Int64("rows", t.Rows), zap.Int64("chunks", t.Chunks),
		zap.Duration("took", time.Since(t.Requested).Round(time.Millisecond)))
}

// sweep queues t's sweep, if it has one, for the batch that carries the
// progress without t (Invariant 14): a truncate at SweepAt, which every
// row the run emitted and every change since it began sorts above, so
// the sinks drop only the rows the run did not find. e.mu is held.
func (e *Engine) sweep(t *tableProgress) {
	if !t.Sweep || t.SweepAt == nil {
		return
	}
	shape := t.shape
	if shape != nil && e.shapes[shape.ID] != nil {
		shape = e.shapes[shape.ID] // the stream's newest
	}
	if shape == nil {
		e.log.Warn("re-read table not swept: its shape is not known", zap.String("table", t.id().String()))
		return
	}
	r := pipeline.Record{Op: pipeline.OpTruncate, Table: shape, Version: *t.SweepAt, EventTime: time.Now().UTC(),
		Snapshot: true, Replaces: true}
	r.Size = pipeline.EstimateSize(&r)
	e.sweeps = append(e.sweeps, r)
	e.stats.Sweeps++
	e.log.Info("re-read table swept: the sinks drop its rows the read did not find", zap.String("table", t.id().String()),
		zap.Stringer("below", *t.SweepAt))
}
