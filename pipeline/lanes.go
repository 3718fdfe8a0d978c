package pipeline

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
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
			if err := r.lane(ctx, s, out, durable); err != nil {
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
			for _, l := range lanes {
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
// sink's route and marks each item durable for this sink.
func (r *Runtime) lane(ctx context.Context, s NamedSink, in <-chan *tracked, durable chan<- struct{}) error {
	var (
		batch   []*tracked
		recs    int
		bytes   int64
		linger  *time.Timer
		lingerC <-chan time.Time
	)
	flush := func() error {
		if linger != nil {
			linger.Stop()
			linger, lingerC = nil, nil
		}
		if len(batch) == 0 {
			return nil
		}
		all := batch[0].records
		if len(batch) > 1 {
			all = make([]Record, 0, recs)
			for _, it := range batch {
				all = append(all, it.records...)
			}
		}
		if sent := s.Route.Apply(all); len(sent) > 0 {
			if err := r.writeSink(ctx, s, sent); err != nil {
				return err
			}
		}
		for _, it := range batch {
			r.finish(it, durable)
		}
		clear(batch)
		batch, recs, bytes = batch[:0], 0, 0
		return nil
	}
	for {
		select {
		case it, ok := <-in:
			if !ok {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				return flush()
			}
			batch = append(batch, it)
			recs += len(it.records)
			bytes += it.bytes
			if recs >= r.cfg.BatchMaxRecords || bytes >= r.cfg.BatchMaxBytes {
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
		case <-ctx.Done():
			return ctx.Err()
		}
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
