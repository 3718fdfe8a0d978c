package pipeline

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// Each sink has its own lane: a queue, its own batching (count, bytes,
// linger) and its own retries. A slow or unreachable sink therefore delays
// only the checkpoint — the ledger marks a source batch durable when every
// lane has written it (Invariant 1) — while the other sinks keep writing
// until the in-flight cap stops the source (Invariant 6).

// tracked is an item shared by the lanes; pending counts the lanes that
// have not yet made it durable.
type tracked struct {
	item
	pending atomic.Int32
}

// write fans items out to one lane per sink and returns when the lanes have
// drained (items closed) or one of them failed; the first error cancels
// the others.
func (r *Runtime) write(ctx context.Context, items <-chan item, durable chan<- struct{}) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	lanes := make([]chan *tracked, len(r.sinks))
	var wg sync.WaitGroup
	for i, s := range r.sinks {
		in := make(chan *tracked)
		out := make(chan *tracked)
		lanes[i] = in
		wg.Add(2)
		go func() { defer wg.Done(); queue(ctx, in, out) }()
		go func() {
			defer wg.Done()
			if err := r.lane(ctx, s, r.lanes[i], out, durable); err != nil {
				cancel(err) // the first cause is kept
			}
		}()
	}
	drain := func() error {
		for _, l := range lanes {
			close(l)
		}
		wg.Wait()
		if ctx.Err() != nil {
			return context.Cause(ctx) // a lane's error, or the caller's cancellation
		}
		return nil
	}
	for {
		select {
		case it, ok := <-items:
			if !ok {
				return drain()
			}
			t := &tracked{item: it}
			t.pending.Store(int32(len(lanes)))
			for i, l := range lanes {
				r.lanes[i].undrained.Add(int64(len(it.records)))
				select {
				case l <- t:
				case <-ctx.Done():
				}
			}
		case <-ctx.Done():
			return drain()
		}
	}
}

// queue moves items from in to out without ever blocking the sender for
// long: a lane's backlog is bounded by the ledger's in-flight cap, not by a
// channel size, so one slow sink never stalls the others' input. It closes
// out after in is closed and everything queued was taken.
func queue(ctx context.Context, in <-chan *tracked, out chan<- *tracked) {
	defer close(out)
	var q []*tracked
	for in != nil || len(q) > 0 {
		var send chan<- *tracked
		var head *tracked
		if len(q) > 0 {
			send, head = out, q[0]
		}
		select {
		case it, ok := <-in:
			if !ok {
				in = nil
				continue
			}
			q = append(q, it)
		case send <- head:
			q[0] = nil
			q = q[1:]
		case <-ctx.Done():
			return
		}
	}
}

// lane coalesces one sink's items into batches, writes them through the
// sink's route and marks each item durable for this sink. To a Pipeliner
// it keeps up to PipelinedWrites batches in flight (see inflight).
func (r *Runtime) lane(ctx context.Context, s NamedSink, sl *sinkLane, in <-chan *tracked, durable chan<- struct{}) error {
	var (
		batch   []*tracked
		recs    int
		bytes   int64
		linger  *time.Timer
		lingerC <-chan time.Time
		fl      = &inflight{r: r, s: s, sl: sl, durable: durable}
	)
	if p, ok := s.Sink.(Pipeliner); ok && p.Pipelines() && r.cfg.PipelinedWrites > 1 {
		fl.p = p
	}
	flush := func() error {
		if linger != nil {
			linger.Stop()
			linger, lingerC = nil, nil
		}
		if len(batch) == 0 {
			return nil
		}
		// One item with records (beside position-only ones) is written
		// as it is; several are copied into one slice.
		var all []Record
		holding := 0
		for _, it := range batch {
			if len(it.records) > 0 {
				all = it.records
				holding++
			}
		}
		if holding > 1 {
			all = make([]Record, 0, recs)
			for _, it := range batch {
				all = append(all, it.records...)
			}
		}
		err := fl.write(ctx, s.Route.Apply(ForSink(s.Name, all)), batch)
		clear(batch)
		batch, recs, bytes = batch[:0], 0, 0
		return err
	}
	for {
		select {
		case it, ok := <-in:
			if !ok {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				if err := flush(); err != nil {
					return err
				}
				return fl.settleAll(ctx)
			}
			if recs > 0 && (len(it.records) >= sl.ad.size() || it.bytes >= r.cfg.BatchMaxBytes) {
				// An item that fills a write by itself (an incremental
				// snapshot's chunk) goes alone: the few records before it
				// are written first, not copied in front of it. Items are
				// marked durable in their order either way (Invariant 1).
				if err := flush(); err != nil {
					return err
				}
			}
			batch = append(batch, it)
			recs += len(it.records)
			bytes += it.bytes
			if recs >= sl.ad.size() || bytes >= r.cfg.BatchMaxBytes {
				if err := flush(); err != nil {
					return err
				}
			} else if linger == nil {
				linger = time.NewTimer(r.cfg.BatchLinger)
				lingerC = linger.C
			}
		case <-lingerC:
			linger, lingerC = nil, nil
			if err := flush(); err != nil {
				return err
			}
		case <-fl.headDone():
			if err := fl.settleHead(ctx); err != nil {
				return err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// inflight is a lane's writes to its sink. To a plain Sink each batch is
// written (with retries) before the next; to a Pipeliner, batches are
// started in order and settled in that order: a batch's items are marked
// durable only once it and every batch started before it are (Invariant
// 1). When a started batch fails (a transient error, a lost connection),
// every later started batch may have landed or not, so the lane waits for
// them all and writes them again one at a time, in order, through the
// retrying path: later changes of a key are never left behind an earlier
// one (Invariant 4 for consumers that read the topic in order), and the
// rewrite only duplicates what had landed.
type inflight struct {
	r       *Runtime
	s       NamedSink
	sl      *sinkLane
	p       Pipeliner // nil: write one batch at a time
	durable chan<- struct{}
	queue   []*started
}

type started struct {
	items  []*tracked
	recs   []Record
	p      Pending
	cancel context.CancelFunc
	t0     time.Time
}

// write writes (or starts) one batch: recs, the route's share of items.
// items is the lane's buffer: it is copied when kept.
func (f *inflight) write(ctx context.Context, recs []Record, items []*tracked) error {
	if len(recs) == 0 {
		if len(f.queue) == 0 {
			f.finish(items)
			return nil
		}
		// Nothing for this sink: durable once what was started before is.
		f.queue = append(f.queue, &started{items: slices.Clone(items), p: Settled(nil), cancel: func() {}, t0: time.Now()})
		return nil
	}
	if f.p == nil {
		if err := f.r.writeSink(ctx, f.s, f.sl, recs); err != nil {
			return err
		}
		f.finish(items)
		return nil
	}
	// Settle what is done first, so a failure is handled before more is
	// started, then wait for room.
	for len(f.queue) > 0 && (len(f.queue) >= f.r.cfg.PipelinedWrites || isDone(f.queue[0].p)) {
		if err := f.settleHead(ctx); err != nil {
			return err
		}
	}
	recs, err := f.r.dropQuarantined(ctx, f.s, f.sl, recs)
	if err != nil {
		return err
	}
	actx, cancel := context.WithTimeout(ctx, f.r.cfg.WriteTimeout)
	st := &started{items: slices.Clone(items), recs: recs, cancel: cancel, t0: time.Now()}
	var p Pending
	if len(recs) == 0 {
		p = Settled(nil)
	} else {
		err = guard(func() (err error) { p, err = f.p.Start(actx, recs); return err })
	}
	if err != nil {
		p = Settled(err) // settled like a failed write, in order
	}
	st.p = p
	f.queue = append(f.queue, st)
	return nil
}

func isDone(p Pending) bool {
	select {
	case <-p.Done():
		return true
	default:
		return false
	}
}

// headDone is the oldest started batch's Done; nil (never ready) when
// none is in flight.
func (f *inflight) headDone() <-chan struct{} {
	if len(f.queue) == 0 {
		return nil
	}
	return f.queue[0].p.Done()
}

// settleHead waits for the oldest started batch and marks it durable; on
// a failure it rewrites it and every later one, in order.
func (f *inflight) settleHead(ctx context.Context) error {
	h := f.queue[0]
	select {
	case <-h.p.Done():
	case <-ctx.Done():
		return ctx.Err()
	}
	err := h.p.Err()
	h.cancel()
	stage := "sink:" + f.s.Name
	var be *BatchError
	if errors.As(err, &be) && !slices.ContainsFunc(be.Failed, func(e RecordError) bool { return !e.Permanent }) {
		// Only permanent per-record failures: the rest is durable.
		if err := f.r.deadLetterFailed(ctx, f.s, h.recs, be); err != nil {
			return err
		}
		err = nil
	} else if err == nil && h.recs != nil {
		took := time.Since(h.t0)
		f.sl.ad.succeeded(len(h.recs), took)
		f.r.obs.SinkBatchLimit(f.s.Name, f.sl.ad.size())
		f.r.wrote(f.s.Name, stage, len(h.recs), took)
	}
	if err == nil {
		f.sl.healthy()
		f.queue[0] = nil
		f.queue = f.queue[1:]
		f.finish(h.items)
		return nil
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if IsFatal(err) {
		return fmt.Errorf("sink %s: %w", f.s.Name, err)
	}
	f.sl.failing(err)
	f.r.obs.SinkRetry(f.s.Name)
	f.r.log.Warn("pipelined sink write failed; writing it and the batches started after it again, in order",
		zap.String("sink", f.s.Name), zap.Int("batches", len(f.queue)), zap.Error(err))
	rest := f.queue
	f.queue = nil
	for _, st := range rest[1:] {
		select {
		case <-st.p.Done():
		case <-ctx.Done():
			return ctx.Err()
		}
		st.cancel()
	}
	for _, st := range rest {
		if len(st.recs) > 0 {
			if err := f.r.writeSink(ctx, f.s, f.sl, st.recs); err != nil {
				return err
			}
		}
		f.finish(st.items)
	}
	return nil
}

// settleAll settles every started batch.
func (f *inflight) settleAll(ctx context.Context) error {
	for len(f.queue) > 0 {
		if err := f.settleHead(ctx); err != nil {
			return err
		}
	}
	return nil
}

// finish marks items durable in this sink. With QuarantineHold, an item
// holding a record of a table quarantined in this sink is held instead:
// never finished, so no checkpoint passes it (Invariant 1) and a restart
// reads it again; it stays counted as undrained.
func (f *inflight) finish(items []*tracked) {
	for _, it := range items {
		if f.r.cfg.QuarantineHold && f.sl.holds(it.records) {
			f.sl.holding.Add(int64(len(it.records)))
			continue
		}
		f.sl.undrained.Add(-int64(len(it.records)))
		f.r.finish(it, f.durable)
	}
}

// finish records that one lane made it durable; the last lane releases it
// in the ledger and wakes the committer.
func (r *Runtime) finish(it *tracked, durable chan<- struct{}) {
	if it.pending.Add(-1) != 0 {
		return
	}
	r.ledger.done(it.seq)
	n, b := r.ledger.inFlight()
	r.obs.InFlight(n, b)
	now := time.Now()
	var newest time.Time
	for i := range it.records {
		rec := &it.records[i]
		if rec.Op == OpHeartbeat && !rec.EventTime.IsZero() {
			r.obs.EndToEnd(now.Sub(rec.EventTime))
		} else if rec.Op != OpRead && rec.EventTime.After(newest) {
			newest = rec.EventTime
		}
	}
	if !newest.IsZero() {
		r.obs.EndToEnd(now.Sub(newest))
	}
	select {
	case durable <- struct{}{}:
	default:
	}
}
