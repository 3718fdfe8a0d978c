package snapshot

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/pipeline/textform"
)

// work runs chunks until ctx ends: it plans the next table that needs a
// plan, or takes a free range and reads it chunk by chunk, one window at
// a time.
func (e *Engine) work(ctx context.Context) {
	limit := e.opts.ChunkRows
	wait := e.opts.RetryWait
	for ctx.Err() == nil {
		t, rng := e.claim()
		if t == nil {
			select {
			case <-e.wake:
			case <-ctx.Done():
				return
			}
			continue
		}
		var err error
		if rng == nil {
			err = e.plan(ctx, t)
		} else {
			limit, err = e.readRange(ctx, t, rng, limit)
		}
		if err == nil {
			wait = e.opts.RetryWait
			continue
		}
		if ctx.Err() != nil {
			return
		}
		if pipeline.IsFatal(err) {
			// Retrying cannot help (a table without a key): the request
			// is dropped and says why; a fresh pipeline's table stops the
			// pipeline, since its rows would never arrive.
			e.refuse(t, err)
			continue
		}
		e.mu.Lock()
		e.lastErr = fmt.Errorf("snapshot of %s: %w", t.id(), err)
		e.mu.Unlock()
		e.m.errors.Inc()
		e.log.Warn("snapshot chunk failed; retrying", zap.String("table", t.id().String()), zap.Duration("in", wait), zap.Error(err))
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return
		}
		wait = min(2*wait, 30*time.Second)
	}
}

// claim picks work: a table to plan (rng nil) or a free range. It marks
// what it returns busy; release undoes that.
func (e *Engine) claim() (*tableProgress, *keyRange) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, t := range e.prog.Tables {
		if !t.Planned {
			if t.planning {
				continue
			}
			t.planning = true
			return t, nil
		}
		for _, r := range t.Ranges {
			if !r.Done && !r.busy {
				r.busy = true
				return t, r
			}
		}
	}
	return nil, nil
}

// plan splits a table into Parallel ranges up to its max key.
func (e *Engine) plan(ctx context.Context, t *tableProgress) error {
	defer func() {
		e.mu.Lock()
		t.planning = false
		e.mu.Unlock()
		e.signal()
	}()
	if t.Barrier || t.Sweep && t.SweepAt == nil {
		// The barrier's (or the sweep's) place in the log: before the
		// max key is read.
		stem := e.register(&window{table: t, barrierOnly: true, done: make(chan outcome, 1)})
		if err := e.rd.Mark(ctx, stem+barrierSuffix, t.id(), nil); err != nil {
			e.mu.Lock()
			delete(e.windows, stem)
			e.mu.Unlock()
			return fmt.Errorf("barrier watermark: %w", err)
		}
	}
	if t.Repair {
		return e.planRepair(ctx, t)
	}
	p, err := e.rd.Plan(ctx, t.target(), nil, e.opts.Parallel)
	if err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	t.shape = p.Table
	t.Estimate = p.Rows
	t.Planned = true
	e.progChanged = true
	t.Ranges = nil
	after := Cursor(nil)
	for _, s := range append(p.Splits, p.Max) {
		// A nil Max (no row yet) is one range with no upper bound, read
		// until a chunk comes back short; its window still carries the
		// barrier of a fresh pipeline.
		t.Ranges = append(t.Ranges, &keyRange{After: after, UpTo: s})
		after = s
	}
	e.log.Info("snapshot planned", zap.String("table", t.id().String()), zap.String("where", t.Where),
		zap.Int("ranges", len(t.Ranges)), zap.Int64("estimated_rows", p.Rows))
	return nil
}

// repairBatch is the most keys one repair window reads.
const repairBatch = 512

// planRepair spreads a repair's keys over ranges of at most repairBatch
// keys each, read by keyed windows (readRange).
func (e *Engine) planRepair(ctx context.Context, t *tableProgress) error {
	if _, err := e.repairShape(ctx, t); err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	t.Ranges = nil
	for i := 0; i < len(t.Keys); i += repairBatch {
		t.Ranges = append(t.Ranges, &keyRange{Keys: t.Keys[i:min(i+repairBatch, len(t.Keys))]})
	}
	t.Keys, t.Planned = nil, true
	e.progChanged = true
	e.log.Info("repair planned", zap.String("table", t.id().String()), zap.Int("windows", len(t.Ranges)), zap.Int64("keys", t.Estimate))
	return nil
}

// repairShape returns t's shape, read once per run (the key columns'
// types decode a repair's keys).
func (e *Engine) repairShape(ctx context.Context, t *tableProgress) (*pipeline.Table, error) {
	e.mu.Lock()
	shape := t.shape
	e.mu.Unlock()
	if shape != nil {
		return shape, nil
	}
	p, err := e.rd.Plan(ctx, t.target(), nil, 1)
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	t.shape = p.Table
	e.mu.Unlock()
	return p.Table, nil
}

// repairKeys decodes a repair range's keys with the key columns' types.
func repairKeys(shape *pipeline.Table, keys [][]string) ([][]any, error) {
	out := make([][]any, len(keys))
	for i, key := range keys {
		if len(key) != len(shape.KeyIdx) {
			return nil, pipeline.Fatal(fmt.Errorf("repair key %q does not fit the key of %s (%d columns)", key, shape.ID, len(shape.KeyIdx)))
		}
		out[i] = make([]any, len(key))
		for j, text := range key {
			v, err := textform.Decode(&shape.Columns[shape.KeyIdx[j]], text)
			if err != nil {
				return nil, pipeline.Fatal(fmt.Errorf("repair key %q of %s: column %s: %w", key, shape.ID, shape.Columns[shape.KeyIdx[j]].Name, err))
			}
			out[i][j] = v
		}
	}
	return out, nil
}

// readRange reads rng chunk by chunk until it is done, a chunk fails or
// ctx ends; it returns the adapted row limit. A repair's range is one
// keyed window (retried until it is emitted).
func (e *Engine) readRange(ctx context.Context, t *tableProgress, rng *keyRange, limit int) (int, error) {
	defer func() {
		e.mu.Lock()
		rng.busy = false
		e.mu.Unlock()
		e.signal()
	}()
	redoWait := minRedoWait
	reported := false // this range set t.again
	// pause backs off before a chunk (or keys) read again: visibility can
	// lag for as long as a synchronous standby does not answer, and each
	// read costs two watermarks. A chunk is never given up (its rows
	// would be missing), so once the wait has reached its longest the
	// table's status and a warning say why it is read again.
	pause := func(why string) error {
		e.log.Debug("chunk read again", zap.String("table", t.id().String()), zap.String("why", why), zap.Duration("in", redoWait))
		if redoWait == maxRedoWait {
			e.mu.Lock()
			warn := t.again == ""
			t.again, reported = why, true
			e.mu.Unlock()
			if warn {
				e.log.Warn("a snapshot chunk keeps being read again; the table's snapshot waits until it can be emitted",
					zap.String("table", t.id().String()), zap.String("why", why), zap.Duration("every", maxRedoWait))
			}
		}
		select {
		case <-time.After(redoWait):
		case <-ctx.Done():
			return ctx.Err()
		}
		redoWait = min(2*redoWait, maxRedoWait)
		return nil
	}
	for {
		e.mu.Lock()
		done, after, upTo, repair := rng.Done, rng.After, rng.UpTo, rng.Keys
		e.mu.Unlock()
		if done {
			return limit, nil
		}
		read := func(ctx context.Context) (Chunk, error) {
			return e.rd.Chunk(ctx, t.target(), after, upTo, limit, e.opts.MaxChunkBytes)
		}
		var keyed [][]any
		var then outcome
		if repair != nil {
			then.short = true // the range is done once its window is
			shape, err := e.repairShape(ctx, t)
			if err != nil {
				return limit, err
			}
			if keyed, err = repairKeys(shape, repair); err != nil {
				return limit, err
			}
			read = func(ctx context.Context) (Chunk, error) { return e.rd.Keys(ctx, t.target(), keyed) }
		}
		read1, o, err := e.window(ctx, t, rng, limit, read, keyed, then)
		if err != nil {
			return limit, err
		}
		for keys := o.refetch; len(keys) > 0; {
			// Keys whose change in the window kept an unchanged value:
			// read them again, until no change in their own window does;
			// the last such window moves the range on.
			_, ko, err := e.window(ctx, t, rng, len(keys), func(ctx context.Context) (Chunk, error) {
				return e.rd.Keys(ctx, t.target(), keys)
			}, keys, o)
			if err != nil {
				return limit, err
			}
			if ko.redo == "" {
				keys = ko.refetch
			} else if err := pause(ko.redo); err != nil {
				return limit, err
			}
		}
		if o.redo != "" {
			if err := pause(o.redo); err != nil {
				return limit, err
			}
			continue
		}
		redoWait = minRedoWait
		if reported {
			e.mu.Lock()
			t.again, reported = "", false
			e.mu.Unlock()
		}
		limit = adapt(limit, read1, e.opts.ChunkTime, e.opts.MaxChunkRows, e.opts.MaxChunkBytes)
	}
}

// minRedoWait and maxRedoWait bound the backoff before a chunk is read
// again (it doubles from one to the other); variables for the tests.
var (
	minRedoWait = 20 * time.Millisecond
	maxRedoWait = 5 * time.Second
)

// refuse drops t's request after a permanent error.
func (e *Engine) refuse(t *tableProgress, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	t.planning = false
	for i, x := range e.prog.Tables {
		if x == t {
			e.prog.Tables = append(e.prog.Tables[:i:i], e.prog.Tables[i+1:]...)
			break
		}
	}
	e.progChanged = true
	e.m.tables.Set(float64(len(e.prog.Tables)))
	e.refused = fmt.Errorf("snapshot of %s refused: %w", t.id(), err)
	e.log.Error("snapshot refused", zap.String("table", t.id().String()), zap.String("where", t.Where), zap.Error(err))
	if t.Barrier && e.fatal == nil {
		e.fatal = e.refused
		if e.interrupt != nil {
			e.interrupt()
		}
	}
}

// chunkRead is what a chunk's read took: its time, and the rows it
// emitted with their records' heap bytes (pipeline.EstimateSize, the
// in-flight cap's measure).
type chunkRead struct {
	took        time.Duration
	rows, bytes int
}

// adapt moves a chunk's row limit towards the target read time: doubled
// when a read took under half of it, halved when over twice. Invariant
// 6: it never exceeds the rows of maxBytes at the last chunk's bytes per
// row, so a window holds about maxBytes of rows however wide they are.
func adapt(limit int, c chunkRead, target time.Duration, maxRows, maxBytes int) int {
	switch {
	case c.took < target/2:
		limit *= 2
	case c.took > 2*target:
		limit /= 2
	}
	if c.rows > 0 && c.bytes > 0 {
		perRow := (c.bytes + c.rows - 1) / c.rows
		maxRows = min(maxRows, maxBytes/perRow)
	}
	return min(max(limit, minChunkRows), max(maxRows, minChunkRows))
}

// register names w and lists it for Read's goroutine.
func (e *Engine) register(w *window) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.seq++
	w.stem = e.instance + ":" + strconv.FormatUint(e.seq, 10)
	e.windows[w.stem] = w
	return w.stem
}

// window runs one chunk: L, read, H, then waits until Read's goroutine
// reconciled it at H.
func (e *Engine) window(ctx context.Context, t *tableProgress, rng *keyRange, limit int,
	read func(context.Context) (Chunk, error), keyed [][]any, then outcome) (chunkRead, outcome, error) {
	w := &window{table: t, rng: rng, limit: limit, keyed: keyed, then: then, touched: map[string]struct{}{}, done: make(chan outcome, 1)}
	e.register(w)
	e.m.windows.Inc()
	defer e.m.windows.Dec()
	abandon := func(err error) (chunkRead, outcome, error) {
		e.mu.Lock()
		defer e.mu.Unlock()
		if w.over { // reconciled meanwhile: its H made it
			return chunkRead{}, <-w.done, nil
		}
		delete(e.windows, w.stem)
		w.over = true
		return chunkRead{}, outcome{}, err
	}
	id := t.id()
	if err := e.rd.Mark(ctx, w.stem+lowSuffix, id, nil); err != nil {
		return abandon(fmt.Errorf("low watermark: %w", err))
	}
	start := time.Now()
	c, err := read(ctx)
	took := time.Since(start)
	if err != nil {
		return abandon(fmt.Errorf("read: %w", err))
	}
	if c.Table == nil {
		return abandon(errors.New("read: the reader returned no shape"))
	}
	e.mu.Lock()
	w.setChunk(&c)
	e.mu.Unlock()
	err = e.rd.Mark(ctx, w.stem+highSuffix, id, func(shape *pipeline.Table) error {
		e.mu.Lock()
		w.high = shape
		e.mu.Unlock()
		return nil
	})
	if err != nil {
		return abandon(fmt.Errorf("high watermark: %w", err))
	}
	select {
	case o := <-w.done:
		o.read.took = took
		return o.read, o, o.err
	case <-ctx.Done():
		return abandon(ctx.Err())
	}
}
