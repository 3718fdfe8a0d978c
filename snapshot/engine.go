package snapshot

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/pipeline/textform"
)

// Options configure an Engine. Zero values take the defaults noted.
type Options struct {
	// Tables are the captured tables, in configuration order.
	Tables []pipeline.TableID
	// Fresh selects what a pipeline without a checkpoint does: true
	// snapshots every table here (the source does no initial load of its
	// own), false leaves it to the source's initial load.
	Fresh bool
	// IgnoreAdded leaves configured tables the checkpoint does not know
	// unread (snapshot mode never); by default each is snapshotted.
	IgnoreAdded bool
	// Parallel is how many windows are open at once, and how many key
	// ranges a table is split into (default 2).
	Parallel int
	// ChunkRows is the first chunk's row limit (default 4096); chunks
	// then grow or shrink towards ChunkTime per read (default 500ms),
	// between 64 rows and MaxChunkRows (default 65536).
	ChunkRows    int
	MaxChunkRows int
	ChunkTime    time.Duration
	// MaxChunkBytes bounds a chunk's rows by their heap bytes (default
	// DefaultMaxChunkBytes): the row limit is sized to it from the last
	// chunk's bytes per row, and a read keeps no row after the one that
	// reaches it (Reader.Chunk), since each window holds one chunk until
	// its high watermark, outside the runtime's in-flight cap (Invariant
	// 6).
	MaxChunkBytes int
	// RetryWait is the first wait after a failed chunk (default 1s,
	// doubling to 30s).
	RetryWait time.Duration
	Log       *zap.Logger
	// Registerer receives the engine's metrics when not nil.
	Registerer prometheus.Registerer
}

func (o *Options) withDefaults() {
	if o.Parallel <= 0 {
		o.Parallel = 2
	}
	if o.MaxChunkRows <= 0 {
		o.MaxChunkRows = 65536
	}
	if o.ChunkRows <= 0 {
		o.ChunkRows = 4096
	}
	if o.MaxChunkBytes <= 0 {
		o.MaxChunkBytes = DefaultMaxChunkBytes
	}
	o.ChunkRows = min(max(o.ChunkRows, minChunkRows), o.MaxChunkRows)
	if o.ChunkTime <= 0 {
		o.ChunkTime = 500 * time.Millisecond
	}
	if o.RetryWait <= 0 {
		o.RetryWait = time.Second
	}
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
}

const minChunkRows = 64

// DefaultMaxChunkBytes is Options.MaxChunkBytes's default. A window's
// fixed costs (two watermark commits, the shape reads, the wait for the
// stream to pass its high watermark, a sink write of its own) are paid per
// chunk: 16 MiB (about 60,000 rows of the bench's 6-column table) rather
// than 8 took MariaDB into Kafka from 391–399k to 434–437k rows/s and the
// snapshots into DuckDB under load by 15–20%, for 20 MiB more peak RSS
// (bench pg-incremental, mariadb-incremental, 2026-12-05).
const DefaultMaxChunkBytes = 16 << 20

// Engine is a pipeline.Source: the wrapped source's stream with snapshot
// chunks merged in at their high watermarks. It forwards
// pipeline.Generational and pipeline.StatusReporter to the source.
type Engine struct {
	src  pipeline.Source
	rd   Reader
	opts Options
	log  *zap.Logger
	m    *metrics

	instance string // in every watermark token of this run

	mu   sync.Mutex
	prog *progress
	// progJSON is prog encoded, again only after progChanged: every
	// positioned batch carries it.
	progJSON    []byte
	progChanged bool
	windows     map[string]*window // by token stem, open or waiting for H
	seq         uint64
	wake        chan struct{} // a table was requested or a range freed
	lastErr     error
	fatal       error // a fresh pipeline's table cannot be read: Read returns it
	refused     error // the last request dropped for a permanent error
	// interrupt cancels the source read in progress (set while Read
	// waits on the source).
	interrupt context.CancelFunc
	finished  []finishedTable // tables read in this run, for status
	rates     map[string]*rate
	stats     Stats

	// Read's goroutine only.
	pending []pipeline.Batch
	shapes  map[pipeline.TableID]*pipeline.Table // newest shape the stream showed
	sweeps  []pipeline.Record                    // the sweep of the table the last reconcile finished (Invariant 14)
	commits commitRing

	// opened and loadRun name the snapshots that finish an interrupted
	// initial load (Loader).
	opened  time.Time
	loadRun string
	// loading lists the tables of the source's initial load not yet read
	// whole, as of the last load batch Read handed over.
	loading []pipeline.TableID

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// New wraps src; rd reads the same database.
func New(src pipeline.Source, rd Reader, opts Options) *Engine {
	opts.withDefaults()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	e := &Engine{src: src, rd: rd, opts: opts, log: opts.Log, instance: hex.EncodeToString(b),
		windows: map[string]*window{}, wake: make(chan struct{}, 1), rates: map[string]*rate{},
		shapes: map[pipeline.TableID]*pipeline.Table{}}
	e.m = newMetrics(opts.Registerer)
	return e
}

// Source returns the wrapped source.
func (e *Engine) Source() pipeline.Source { return e.src }

// FloorGeneration forwards to the source (pipeline.Generational).
func (e *Engine) FloorGeneration(floor uint64, held bool) {
	if g, ok := e.src.(pipeline.Generational); ok {
		g.FloorGeneration(floor, held)
	}
}

// Open opens the source at the stream part of from, restores the
// snapshot progress, queues a snapshot of every configured table the
// sinks do not have yet (all of them on a fresh pipeline with
// Options.Fresh) and starts the workers.
func (e *Engine) Open(ctx context.Context, from pipeline.Position) error {
	prog := &progress{}
	var stream pipeline.Position
	switch {
	case from == nil:
		if !e.opts.Fresh {
			// The source's initial load reads every table.
			for _, t := range e.opts.Tables {
				prog.know(t.String())
			}
		}
	default:
		pos, wrapped, err := parsePosition(from)
		if err != nil {
			return pipeline.Fatal(err)
		}
		stream = pipeline.Position(pos.Stream)
		if wrapped {
			prog = pos.Snapshot
		} else {
			// A checkpoint from before the engine: every table was
			// loaded.
			for _, t := range e.opts.Tables {
				prog.know(t.String())
			}
		}
	}
	for _, t := range prog.Tables {
		if t.Barrier || t.Sweep && t.SweepAt == nil {
			// Nothing of it can be durable before its barrier (or its
			// sweep's version is read): plan again, and place the
			// barrier's watermark first.
			t.Planned, t.Ranges, t.Rows, t.Chunks = false, nil, 0, 0
		}
	}
	now := time.Now().UTC()
	e.opened, e.loadRun = now, e.newRun()
	for _, id := range e.opts.Tables {
		if slices.Contains(prog.Known, id.String()) || prog.active(id, "") != nil {
			continue
		}
		if from != nil && e.opts.IgnoreAdded {
			prog.know(id.String())
			continue
		}
		prog.Tables = append(prog.Tables, &tableProgress{Database: id.Database, Schema: id.Schema, Name: id.Table,
			Run: e.newRun(), Barrier: from == nil, Sweep: from != nil, Requested: now})
		if from != nil {
			e.log.Info("table added to the pipeline: snapshotting it while the stream flows", zap.String("table", id.String()))
		}
	}
	e.mu.Lock()
	e.prog = prog
	e.mu.Unlock()
	// Before the workers start: they edit prog.Tables (under e.mu).
	e.m.tables.Set(float64(len(prog.Tables)))
	if err := e.src.Open(ctx, stream); err != nil {
		return err
	}
	runCtx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	for range e.opts.Parallel {
		e.wg.Add(1)
		go func() { defer e.wg.Done(); e.work(runCtx) }()
	}
	return nil
}

// Request queues a snapshot of table, of the rows where selects when not
// empty, while the stream flows. It returns the request's run id. A
// table already being snapshotted with the same condition is not queued
// twice: its run id is returned.
func (e *Engine) Request(table pipeline.TableID, where string) (string, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.queue(table, where, false)
}

// queue is Request with e.mu held; again queues a new run even when one
// of the table with the same condition is under way, unless that run has
// not begun (begun): its chunks read so far, or its plan's max key, may
// predate what makes the table read again (a row inserted above that max
// key before it would never be read), while a run whose plan comes after
// it reads all it made.
func (e *Engine) queue(table pipeline.TableID, where string, again bool) (string, error) {
	i := slices.IndexFunc(e.opts.Tables, func(id pipeline.TableID) bool { return sameTable(id, table) })
	if i < 0 {
		return "", fmt.Errorf("table %s is not captured by this pipeline (captured: %v)", table, e.opts.Tables)
	}
	table = e.opts.Tables[i] // as configured, with its database
	if e.prog == nil {
		return "", errors.New("the pipeline is not open yet")
	}
	if t := e.prog.active(table, where); t != nil && (!again || !e.begun(t)) {
		return t.Run, nil
	}
	t := &tableProgress{Database: table.Database, Schema: table.Schema, Name: table.Table, Where: where,
		Sweep: where == "", Run: e.newRun(), Requested: time.Now().UTC()}
	e.prog.Tables = append(e.prog.Tables, t)
	e.progChanged = true
	e.m.tables.Set(float64(len(e.prog.Tables)))
	e.log.Info("snapshot requested", zap.String("table", table.String()), zap.String("where", where), zap.String("run", t.Run))
	e.signal()
	return t.Run, nil
}

// rewritten queues a new snapshot of the table of r, an OpRewrite: its
// rows changed in place with no change events (pipeline.OpRewrite), so
// the sinks hold them as they were. With IgnoreAdded (snapshot mode
// never) the table is not read again, and the log says how to. e.mu is
// held. The request is part of the progress the next positioned batch
// carries, so a checkpoint past the rewrite always includes it.
func (e *Engine) rewritten(r *pipeline.Record) {
	id := r.Table.ID
	if !slices.ContainsFunc(e.opts.Tables, func(t pipeline.TableID) bool { return sameTable(t, id) }) {
		return
	}
	if e.opts.IgnoreAdded {
		e.log.Warn("a table's rows were rewritten without change events (ALTER TABLE … TYPE … USING, or ADD COLUMN with a volatile "+
			"DEFAULT); with snapshot mode never the sinks keep them as they were: run sluice snapshot --table to read it again",
			zap.String("table", id.String()))
		return
	}
	if _, err := e.queue(id, "", true); err != nil {
		e.log.Warn("table rewritten without change events, but it cannot be read again", zap.String("table", id.String()), zap.Error(err))
		return
	}
	e.stats.Rewrites++
	e.log.Info("table rewritten without change events: reading it again", zap.String("table", id.String()),
		zap.Stringer("version", r.Version))
}

// RequestKeys queues a repair of table: the rows of keys (each key's
// columns in their textform, in key order) are read again while the
// stream flows and emitted like snapshot rows; a key with no row when read
// is emitted as a delete, versioned the same way, so a row only a sink
// holds is removed. It returns the request's run id.
func (e *Engine) RequestKeys(table pipeline.TableID, keys [][]string) (string, error) {
	i := slices.IndexFunc(e.opts.Tables, func(id pipeline.TableID) bool { return sameTable(id, table) })
	if i < 0 {
		return "", fmt.Errorf("table %s is not captured by this pipeline (captured: %v)", table, e.opts.Tables)
	}
	if len(keys) == 0 {
		return "", errors.New("no keys to repair")
	}
	table = e.opts.Tables[i]
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.prog == nil {
		return "", errors.New("the pipeline is not open yet")
	}
	return e.queueKeys(table, keys, "repair requested"), nil
}

// queueKeys adds a repair of keys of table (as the options name it) to the
// progress and returns its run id. e.mu is held.
func (e *Engine) queueKeys(table pipeline.TableID, keys [][]string, why string) string {
	t := &tableProgress{Database: table.Database, Schema: table.Schema, Name: table.Table, Keys: keys, Repair: true,
		Run: e.newRun(), Requested: time.Now().UTC(), Estimate: int64(len(keys))}
	e.prog.Tables = append(e.prog.Tables, t)
	e.progChanged = true
	e.m.tables.Set(float64(len(e.prog.Tables)))
	e.log.Info(why, zap.String("table", table.String()), zap.Int("keys", len(keys)), zap.String("run", t.Run))
	e.signal()
	return t.Run
}

// refetch queues, per table, a repair of the rows of recs' changes marked
// Refetch (Invariant 13): they carry Unchanged values the sinks may hold
// nothing to keep for. The repair enters the progress before the batch is
// positioned, so the batch's checkpoint carries it. e.mu is held.
func (e *Engine) refetch(recs []pipeline.Record) {
	var byTable map[pipeline.TableID][][]string
	var seen map[string]bool
	for i := range recs {
		r := &recs[i]
		if !r.Refetch || r.Table == nil {
			continue
		}
		j := slices.IndexFunc(e.opts.Tables, func(id pipeline.TableID) bool { return sameTable(id, r.Table.ID) })
		key, err := textKey(r)
		if j < 0 || err != nil {
			e.log.Warn("a change left values out that cannot be read again", zap.Stringer("table", r.Table.ID),
				zap.Stringer("version", r.Version), zap.Error(err))
			continue
		}
		id := e.opts.Tables[j]
		if k := id.String() + "\x00" + strings.Join(key, "\x00"); !seen[k] {
			if byTable == nil {
				byTable, seen = map[pipeline.TableID][][]string{}, map[string]bool{}
			}
			seen[k] = true
			byTable[id] = append(byTable[id], key)
		}
	}
	for id, keys := range byTable {
		e.stats.Refetches += int64(len(keys))
		e.m.refetches.Add(float64(len(keys)))
		e.queueKeys(id, keys, "changes left values out: their rows will be read again")
	}
}

// textKey is r's key in the textform RequestKeys takes.
func textKey(r *pipeline.Record) ([]string, error) {
	key := r.Key()
	out := make([]string, len(key))
	for i, v := range key {
		s, err := textform.Encode(&r.Table.Columns[r.Table.KeyIdx[i]], v)
		if err != nil {
			return nil, err
		}
		out[i] = s
	}
	return out, nil
}

func (p *progress) active(id pipeline.TableID, where string) *tableProgress {
	for _, t := range p.Tables {
		if sameTable(t.id(), id) && t.Where == where && !t.Repair {
			return t
		}
	}
	return nil
}

// begun reports whether t's run may have read the table before the point
// the stream has reached: it emitted a chunk, or its plan may have read
// the max key before then. A run's plan reads the max key after its
// barrier's watermark (a fresh table's barrier, a re-read's sweep
// version) commits, so while the stream has not shown that watermark yet,
// the plan and every chunk come after this point. A run without one (a
// progress of an earlier version) counts as begun. e.mu is held.
func (e *Engine) begun(t *tableProgress) bool {
	switch {
	case t.Chunks > 0 || t.Rows > 0:
		return true
	case t.Barrier:
		return t.barrier != nil
	case t.Sweep:
		return t.SweepAt != nil
	}
	return true
}

// sameTable compares schema and table only: a Postgres source learns its
// database's name when it connects, and a MySQL table's schema is its
// database.
func sameTable(a, b pipeline.TableID) bool { return a.Schema == b.Schema && a.Table == b.Table }

func (e *Engine) newRun() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return time.Now().UTC().Format("20060102T150405Z") + "-" + hex.EncodeToString(b)
}

// signal wakes one idle worker.
func (e *Engine) signal() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// Ack forwards the stream part of upTo (Invariant 1: upTo is durable and
// checkpointed, snapshot rows included). A table read whose run upTo's
// progress no longer lists is durable: its status shows done from now on.
func (e *Engine) Ack(ctx context.Context, upTo pipeline.Position) error {
	pos, wrapped, err := parsePosition(upTo)
	if err == nil && wrapped {
		e.mu.Lock()
		for i := range e.finished {
			f := &e.finished[i]
			if !f.status.Done && !slices.ContainsFunc(pos.Snapshot.Tables, func(t *tableProgress) bool { return t.Run == f.run }) {
				f.status.Done = true
			}
		}
		e.mu.Unlock()
		return e.src.Ack(ctx, pipeline.Position(pos.Stream))
	}
	return e.src.Ack(ctx, StreamPosition(upTo))
}

// Close stops the workers, then closes the source. Windows still open
// are dropped: their chunks are read again after a restart.
func (e *Engine) Close(ctx context.Context) error {
	if e.cancel != nil {
		e.cancel()
	}
	e.wg.Wait()
	e.mu.Lock()
	for k, w := range e.windows {
		w.finish(outcome{err: context.Canceled})
		delete(e.windows, k)
	}
	e.mu.Unlock()
	return e.src.Close(ctx)
}

// Snapshotting lists the tables with a snapshot request not over (a
// repair or a filtered re-snapshot included).
func (e *Engine) Snapshotting() []pipeline.TableID {
	return e.tables(func(*tableProgress) bool { return true })
}

// Backfilling implements pipeline.Backfiller: the tables of the source's
// initial load not yet read whole, and those snapshotted here that the
// sinks did not hold before (a fresh pipeline's, a table added to it).
func (e *Engine) Backfilling() []pipeline.TableID {
	e.mu.Lock()
	loading := slices.Clone(e.loading)
	e.mu.Unlock()
	return append(loading, e.tables(func(t *tableProgress) bool {
		return e.firstRead(t) && !slices.ContainsFunc(loading, func(id pipeline.TableID) bool { return sameTable(id, t.id()) })
	})...)
}

// firstRead reports whether t reads a table whose rows the sinks do not
// hold yet (a fresh pipeline's, a table added to it), as opposed to a
// re-snapshot or a repair, whose rows replace what the sinks hold
// (pipeline.Record.Replaces); e.mu is held.
func (e *Engine) firstRead(t *tableProgress) bool {
	return !t.Repair && t.Where == "" && !slices.Contains(e.prog.Known, t.id().String())
}

// tables lists the tables of the requests keep selects, once each.
func (e *Engine) tables(keep func(*tableProgress) bool) []pipeline.TableID {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.prog == nil {
		return nil
	}
	out := make([]pipeline.TableID, 0, len(e.prog.Tables))
	for _, t := range e.prog.Tables {
		if id := t.id(); keep(t) && !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	return out
}
