package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// Config tunes the runtime. Zero fields take the documented defaults.
type Config struct {
	Pipeline           string
	MaxInFlightRecords int           // default 50000
	MaxInFlightBytes   int64         // default 64 MiB
	BatchMaxRecords    int           // default 10000
	BatchMaxBytes      int64         // default 16 MiB
	BatchLinger        time.Duration // default 100ms
	CheckpointInterval time.Duration // default 1s
	ShutdownTimeout    time.Duration // default 30s
	RetryInitial       time.Duration // default 100ms
	RetryMax           time.Duration // default 30s
	RetryMaxAttempts   int           // 0: retry transient errors forever
	// WriteTimeout bounds one sink Write or Open attempt (default 2m): a
	// target that accepts connections but never answers (a partition, a
	// hung server) fails the attempt, which is retried, instead of
	// stalling the pipeline forever.
	WriteTimeout time.Duration
	// PipelinedWrites is how many batches a lane keeps in flight to a sink
	// that is a Pipeliner (default 3; 1 writes one batch at a time).
	PipelinedWrites int
	// WriteTargetLatency is how long one sink write should take (default
	// 2s, at most WriteTimeout/2): a lane whose writes take longer makes
	// them smaller, one whose full writes take less grows them back up
	// to BatchMaxRecords (see adaptive).
	WriteTargetLatency time.Duration
	// DegradedAfter is how long a sink's writes may keep failing before
	// the runtime reports the pipeline degraded (default 30s).
	DegradedAfter time.Duration
	// QuarantineHold keeps the changes of a table a sink refused
	// permanently (a *TableError) in the source's log instead of sending
	// them to the DLQ: they are not written and never become durable in
	// that sink, so no checkpoint passes the first of them (Invariant 1)
	// and a restart after the fix reads them again. The other tables keep
	// flowing until the held changes fill the in-flight cap; a stop exits
	// undrained, naming the held records.
	QuarantineHold bool
}

func (c *Config) defaults() {
	if c.MaxInFlightRecords <= 0 {
		c.MaxInFlightRecords = 50000
	}
	if c.MaxInFlightBytes <= 0 {
		c.MaxInFlightBytes = 64 << 20
	}
	if c.BatchMaxRecords <= 0 {
		c.BatchMaxRecords = 10000
	}
	if c.BatchMaxBytes <= 0 {
		c.BatchMaxBytes = 16 << 20
	}
	if c.BatchLinger <= 0 {
		c.BatchLinger = 100 * time.Millisecond
	}
	if c.CheckpointInterval <= 0 {
		c.CheckpointInterval = time.Second
	}
	if c.ShutdownTimeout <= 0 {
		c.ShutdownTimeout = 30 * time.Second
	}
	if c.RetryInitial <= 0 {
		c.RetryInitial = 100 * time.Millisecond
	}
	if c.RetryMax <= 0 {
		c.RetryMax = 30 * time.Second
	}
	if c.WriteTimeout <= 0 {
		c.WriteTimeout = 2 * time.Minute
	}
	if c.PipelinedWrites <= 0 {
		c.PipelinedWrites = 3
	}
	if c.WriteTargetLatency <= 0 {
		c.WriteTargetLatency = 2 * time.Second
	}
	c.WriteTargetLatency = min(c.WriteTargetLatency, c.WriteTimeout/2)
	if c.DegradedAfter <= 0 {
		c.DegradedAfter = 30 * time.Second
	}
}

// NamedSink is a sink with the name used in metrics, logs and the DLQ.
type NamedSink struct {
	Name string
	Sink Sink
	// Route selects the tables and columns the sink receives; nil: all.
	Route *Route
	// DLQ receives this sink's dead letters; nil: the pipeline's DLQ.
	DLQ DLQ
}

// NamedOperator is an operator with the name its state is stored under.
type NamedOperator struct {
	Name     string
	Operator Operator
}

// Runtime runs one pipeline: source → operators → sinks, with the ack ledger
// and the checkpoint loop.
type Runtime struct {
	cfg   Config
	src   Source
	ops   []NamedOperator
	sinks []NamedSink
	lanes []*sinkLane // one per sink, same order
	store OffsetStore
	dlq   DLQ
	obs   Observer
	log   *zap.Logger
	tap   Tap // nil: none

	ledger *ledger
	state  atomic.Value // string
	ready  atomic.Bool

	mu         sync.Mutex
	lastCP     Checkpoint
	written    map[string]int64
	runErr     error
	pendingPos Position
	// pendingCovers is how many batches of the run pendingPos covers.
	pendingCovers uint64
}

// Options carries the runtime's optional collaborators.
type Options struct {
	Operators []NamedOperator
	DLQ       DLQ
	Observer  Observer
	Log       *zap.Logger
	// Tap, when set, watches the source's batches and the committed
	// checkpoints (continuous verification).
	Tap Tap
}

// Tap watches what the runtime moves without taking part in it. Its
// methods are called from the runtime's goroutines, one call at a time per
// method, and must return quickly without blocking.
type Tap interface {
	// Read sees every batch the source handed over, before the operators
	// run. It must not change the records or keep them (or their images)
	// past the call: it copies what it needs.
	Read(b *Batch)
	// Committed is called after each checkpoint commit with its position:
	// every record the source put at or before it is durable in every
	// sink (Invariant 1).
	Committed(pos Position)
}

// New builds a runtime. Stateful operators are refused until the checkpoint
// barrier of the windowed-transform work exists (Invariant 5).
func New(cfg Config, src Source, sinks []NamedSink, store OffsetStore, opts Options) (*Runtime, error) {
	cfg.defaults()
	if src == nil || store == nil || len(sinks) == 0 {
		return nil, errors.New("runtime: a source, an offset store and at least one sink are required")
	}
	for _, op := range opts.Operators {
		st, err := op.Operator.Snapshot()
		if err != nil || st != nil {
			return nil, fmt.Errorf("runtime: operator %q is stateful; stateful operators are not supported yet", op.Name)
		}
	}
	r := &Runtime{cfg: cfg, src: src, ops: opts.Operators, sinks: sinks, store: store, dlq: opts.DLQ,
		obs: opts.Observer, log: opts.Log, tap: opts.Tap, written: map[string]int64{}}
	if r.obs == nil {
		r.obs = NopObserver{}
	}
	if r.log == nil {
		r.log = zap.NewNop()
	}
	for range sinks {
		r.lanes = append(r.lanes, newSinkLane(cfg))
	}
	// The record cap follows the sinks: what they make durable in two
	// write target latencies, at least one full batch (ledger).
	r.ledger = newLedger(cfg.MaxInFlightRecords, cfg.MaxInFlightBytes, pacing{
		hold: 2 * cfg.WriteTargetLatency, window: cfg.WriteTargetLatency, floor: min(cfg.BatchMaxRecords, cfg.MaxInFlightRecords)})
	r.state.Store("starting")
	return r, nil
}

// Stats is a snapshot of the runtime for /status.
type Stats struct {
	State           string
	InFlightRecords int
	InFlightBytes   int64
	LastCheckpoint  Checkpoint
	Written         map[string]int64
	// Sinks is each sink's write health, in configuration order.
	Sinks []SinkHealth
	// Degraded is set while a sink's writes have kept failing for longer
	// than Config.DegradedAfter (the pipeline is not moving for it), or a
	// sink holds a table in quarantine (see TableError).
	Degraded bool
	Err      error
}

// Backfilling lists the tables whose history the source is still reading
// for the first time (Backfiller); nil when the source reads none that
// way. Safe to call from any goroutine while the runtime runs.
func (r *Runtime) Backfilling() []TableID {
	if b, ok := r.src.(Backfiller); ok {
		return b.Backfilling()
	}
	return nil
}

// Stats returns the current runtime figures.
func (r *Runtime) Stats() Stats {
	recs, bytes := r.ledger.inFlight()
	r.mu.Lock()
	defer r.mu.Unlock()
	w := make(map[string]int64, len(r.written))
	for k, v := range r.written {
		w[k] = v
	}
	st := Stats{State: r.state.Load().(string), InFlightRecords: recs, InFlightBytes: bytes,
		LastCheckpoint: r.lastCP, Written: w, Err: r.runErr}
	for i, l := range r.lanes {
		h := l.health(r.sinks[i].Name)
		st.Sinks = append(st.Sinks, h)
		if r.stalled(h) || len(h.Quarantined) > 0 {
			st.Degraded = true
		}
	}
	return st
}

// Ready reports nil once the source and every sink are open and running.
func (r *Runtime) Ready() error {
	if !r.ready.Load() {
		return fmt.Errorf("pipeline %s is %s", r.cfg.Pipeline, r.state.Load())
	}
	for i, l := range r.lanes {
		if h := l.health(r.sinks[i].Name); r.stalled(h) {
			return fmt.Errorf("pipeline %s is degraded: sink %s has failed every write since %s: %s",
				r.cfg.Pipeline, h.Name, h.FailingSince.UTC().Format(time.RFC3339), h.LastError)
		}
	}
	return nil
}

// stalled reports a sink whose writes have kept failing for longer than
// DegradedAfter.
func (r *Runtime) stalled(h SinkHealth) bool {
	return !h.FailingSince.IsZero() && time.Since(h.FailingSince) > r.cfg.DegradedAfter
}

// item is one source batch on its way to the sinks.
type item struct {
	seq     uint64
	records []Record
	bytes   int64
	read    time.Time
}

// Run resumes from the stored checkpoint and runs until ctx is cancelled
// (graceful stop: stop reading, drain within ShutdownTimeout, final
// checkpoint, close sinks then source), the source ends (io.EOF) or a fatal
// error. It returns nil on a clean stop.
func (r *Runtime) Run(ctx context.Context) (err error) {
	cp, found, err := r.store.Load(ctx, r.cfg.Pipeline)
	if err != nil {
		r.state.Store("failed")
		return fmt.Errorf("load checkpoint: %w", err)
	}
	var from Position
	if found {
		// Stats may already be polled (the daemon's /status starts first).
		r.mu.Lock()
		r.lastCP = cp
		r.mu.Unlock()
		if len(cp.Position) > 0 && string(cp.Position) != "null" {
			from = Position(cp.Position)
		}
		r.log.Info("resuming from checkpoint", zap.Uint64("seq", cp.Seq), zap.ByteString("position", cp.Position))
	}
	for _, op := range r.ops {
		if so, ok := op.Operator.(StateOwner); ok {
			if err := so.Begin(ctx, found); err != nil {
				r.state.Store("failed")
				return &OpenError{What: "transform " + op.Name, Err: err}
			}
		}
	}
	// Work contexts outlive ctx so that a graceful stop can drain.
	workCtx, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()

	// startFailed closes the first n sinks after a failed start: stopped
	// during start-up (nothing was read, nothing to commit) is a clean
	// stop, anything else a failure.
	startFailed := func(n int, err error) error {
		for _, o := range r.sinks[:n] {
			_ = o.Sink.Close(workCtx)
		}
		if ctx.Err() != nil {
			r.state.Store("stopped")
			return nil
		}
		r.state.Store("failed")
		return err
	}
	// Sinks open first: their recorded generations decide the source's
	// (Invariant 10).
	for i, s := range r.sinks {
		if err := r.openSink(ctx, s); err != nil {
			return startFailed(i, err)
		}
	}
	if g, ok := r.src.(Generational); ok {
		floor, held, err := r.heldGeneration(ctx)
		if err != nil {
			return startFailed(len(r.sinks), err)
		}
		g.FloorGeneration(floor, held)
	}
	if err := r.src.Open(ctx, from); err != nil {
		return startFailed(len(r.sinks), &OpenError{What: "source", Err: err})
	}
	closeSource := func() {
		cctx, cancel := context.WithTimeout(workCtx, 10*time.Second)
		defer cancel()
		if err := r.src.Close(cctx); err != nil {
			r.log.Warn("close source", zap.Error(err))
		}
	}
	r.ready.Store(true)
	r.state.Store("running")

	readCtx, stopReading := context.WithCancel(workCtx)
	defer stopReading()
	writeCtx, stopWriting := context.WithCancel(workCtx)
	defer stopWriting()
	commitCtx, stopCommitting := context.WithCancel(workCtx)
	defer stopCommitting()

	items := make(chan item, 4)
	durable := make(chan struct{}, 1)
	readerErr, writerErr, commitErr := make(chan error, 1), make(chan error, 1), make(chan error, 1)
	go func() { readerErr <- r.read(readCtx, items) }()
	go func() { writerErr <- r.write(writeCtx, items, durable) }()
	go func() { commitErr <- r.commitLoop(commitCtx, durable) }()

	var errs []error
	keep := func(e error) {
		if e != nil && !errors.Is(e, context.Canceled) && !errors.Is(e, io.EOF) {
			errs = append(errs, e)
		}
	}
	readerExited, writerExited, committerExited := false, false, false
	select {
	case <-ctx.Done():
		r.log.Info("stopping: draining in-flight records", zap.Duration("deadline", r.cfg.ShutdownTimeout))
	case e := <-readerErr:
		readerExited = true
		keep(e)
		if errors.Is(e, io.EOF) {
			r.log.Info("source finished; draining")
		}
	case e := <-writerErr:
		writerExited = true
		keep(e)
	case e := <-commitErr:
		committerExited = true
		keep(e)
	}
	r.state.Store("draining")
	r.ready.Store(false)
	stopReading()
	if len(errs) > 0 {
		// A fatal error: stop at once; nothing undurable is checkpointed.
		stopWriting()
	}
	drain := time.AfterFunc(r.cfg.ShutdownTimeout, func() {
		r.log.Warn("drain deadline passed; stopping without the undrained records (they are re-read on restart)")
		stopWriting()
	})
	if !readerExited {
		keep(<-readerErr)
	}
	if !writerExited {
		keep(<-writerErr)
	}
	drain.Stop()
	stopCommitting()
	if !committerExited {
		keep(<-commitErr)
	}
	// Invariant 1: the final checkpoint covers only what is durable.
	if err := r.commit(workCtx); err != nil {
		keep(err)
	}
	for _, s := range r.sinks {
		if err := s.Sink.Close(workCtx); err != nil {
			r.log.Warn("close sink", zap.String("sink", s.Name), zap.Error(err))
		}
	}
	closeSource()
	if len(errs) == 0 {
		// Records handed to a sink and not durable in it: the drain did
		// not finish (its deadline passed with a sink still failing or
		// slow), so this is not a clean stop, whatever ended the run. (A
		// batch the reader held when the stop came was never handed over;
		// it is read again after a restart like any record past the
		// checkpoint.)
		u := &UndrainedError{Deadline: r.cfg.ShutdownTimeout}
		for i, l := range r.lanes {
			if h := l.health(r.sinks[i].Name); h.Undrained > 0 {
				u.Sinks = append(u.Sinks, h)
			}
		}
		if len(u.Sinks) > 0 {
			u.Records, _ = r.ledger.inFlight()
			errs = append(errs, u)
		}
	}
	if len(errs) > 0 {
		r.state.Store("failed")
		r.mu.Lock()
		r.runErr = errs[0]
		r.mu.Unlock()
		return errs[0]
	}
	r.state.Store("stopped")
	return nil
}

// heldGeneration is the highest generation any sink recorded (Invariant
// 10), asked with the open-retry policy of each sink.
func (r *Runtime) heldGeneration(ctx context.Context) (floor uint64, held bool, err error) {
	for _, s := range r.sinks {
		k, ok := s.Sink.(GenerationKeeper)
		if !ok {
			continue
		}
		b := newBackoff(r.cfg.RetryInitial, r.cfg.RetryMax)
		for attempt := 1; ; attempt++ {
			actx, cancel := context.WithTimeout(ctx, r.cfg.WriteTimeout)
			g, h, gerr := k.Generation(actx)
			cancel()
			if gerr == nil {
				if h {
					r.log.Info("sink holds versions", zap.String("sink", s.Name), zap.Uint64("generation", g))
					if !held || g > floor {
						floor = g
					}
					held = true
				}
				break
			}
			if IsFatal(gerr) || (r.cfg.RetryMaxAttempts > 0 && attempt >= r.cfg.RetryMaxAttempts) {
				return 0, false, &OpenError{What: "sink " + s.Name, Err: fmt.Errorf("read its generation: %w", gerr)}
			}
			r.log.Warn("reading a sink's generation failed; retrying", zap.String("sink", s.Name), zap.Error(gerr))
			if werr := b.wait(ctx); werr != nil {
				return 0, false, fmt.Errorf("sink %s generation: %w", s.Name, werr)
			}
		}
	}
	return floor, held, nil
}

func (r *Runtime) openSink(ctx context.Context, s NamedSink) error {
	b := newBackoff(r.cfg.RetryInitial, r.cfg.RetryMax)
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, r.cfg.WriteTimeout)
		err := s.Sink.Open(actx)
		cancel()
		if err == nil {
			return nil
		}
		if IsFatal(err) || (r.cfg.RetryMaxAttempts > 0 && attempt >= r.cfg.RetryMaxAttempts) {
			return &OpenError{What: "sink " + s.Name, Err: err}
		}
		r.log.Warn("open sink failed; retrying", zap.String("sink", s.Name), zap.Error(err))
		if err := b.wait(ctx); err != nil {
			return fmt.Errorf("open sink %s: %w", s.Name, err)
		}
	}
}
