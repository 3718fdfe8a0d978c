package pipeline

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.uber.org/zap"
)

// writeSink writes recs to one sink, in pieces of at most ad.size()
// records, each retried with backoff; permanent per-record failures go to
// the DLQ (Invariant 7). A piece that times out (see timedOut), is
// refused as too large or overloaded, or panics is split (see adaptive) before anything else is tried; a
// single record that still times out is retried like any transient
// failure (the target is slow or unreachable, not the record wrong), one
// refused as too large or that panics goes to the DLQ. Pieces are written
// in order and writeSink returns nil only when every record of recs is
// durable or dead-lettered, so its caller marks items durable only then
// (Invariant 1).
func (r *Runtime) writeSink(ctx context.Context, s NamedSink, sl *sinkLane, recs []Record) error {
	ad := sl.ad
	stage := "sink:" + s.Name
	b := newBackoff(r.cfg.RetryInitial, r.cfg.RetryMax)
	todo := recs
	for attempt := 1; len(todo) > 0; attempt++ {
		n := min(len(todo), ad.size())
		piece, err := r.dropQuarantined(ctx, s, sl, todo[:n])
		if err != nil {
			return err
		}
		if len(piece) == 0 {
			todo, attempt = todo[n:], 0
			continue
		}
		t0 := time.Now()
		actx, cancel := context.WithTimeout(ctx, r.cfg.WriteTimeout)
		err = guard(func() error { return s.Sink.Write(actx, piece) })
		slow := timedOut(ctx, actx, err)
		cancel()
		took := time.Since(t0)
		if err == nil {
			ad.succeeded(len(piece), took)
			r.obs.SinkBatchLimit(s.Name, ad.size())
			r.wrote(s.Name, stage, len(piece), took)
			sl.healthy()
			todo, attempt = todo[n:], 0
			b = newBackoff(r.cfg.RetryInitial, r.cfg.RetryMax)
			continue
		}
		r.obs.BatchDuration(stage, took)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if IsFatal(err) {
			return fmt.Errorf("sink %s: %w", s.Name, err)
		}
		var te *TableError
		if errors.As(err, &te) && !slow {
			// Quarantined from now on; the same window is written again
			// without the table's records.
			q := sl.quarantine(te.Table, te.Err)
			r.obs.SinkQuarantined(s.Name, len(sl.quarantined))
			if r.cfg.QuarantineHold {
				r.log.Error("sink refused a table permanently; its changes are held in the source's log (no checkpoint passes them) "+
					"and the other tables keep flowing until the in-flight cap fills; restart after the fix to deliver them",
					zap.String("sink", s.Name), zap.Stringer("table", q.Table), zap.String("error", q.Reason))
			} else {
				r.log.Error("sink refused a table permanently; its records go to the dead-letter queue and the other tables keep flowing "+
					"until a restart after the fix (then re-snapshot the table to recover the dead-lettered rows)",
					zap.String("sink", s.Name), zap.Stringer("table", q.Table), zap.String("error", q.Reason))
			}
			attempt = 0
			continue
		}
		var pe *PanicError
		if errors.As(err, &pe) {
			r.log.Error("sink panicked; isolating the record that caused it", zap.String("sink", s.Name),
				zap.Int("records", len(piece)), zap.Any("panic", pe.Value), zap.ByteString("stack", pe.Stack))
		}
		if slow || IsTooLarge(err) || pe != nil {
			if len(piece) > 1 {
				ad.split(len(piece))
				r.obs.SinkSplit(s.Name)
				r.obs.SinkRetry(s.Name) // the same records are written again
				r.obs.SinkBatchLimit(s.Name, ad.size())
				sl.failing(err)
				r.log.Warn("sink write split", zap.String("sink", s.Name), zap.Int("records", len(piece)),
					zap.Int("next", ad.size()), zap.Bool("timed_out", slow), zap.Error(err))
				attempt = 0
				continue
			}
			if !slow {
				// One record the target refuses for its size, or that
				// makes the sink panic: a poison record.
				err = &BatchError{Failed: []RecordError{{Index: 0, Err: err, Permanent: true}}}
			}
		}
		var be *BatchError
		if errors.As(err, &be) {
			var retry []Record
			for _, f := range be.Failed {
				if f.Index >= 0 && f.Index < len(piece) && !f.Permanent {
					retry = append(retry, piece[f.Index])
				}
			}
			if err := r.deadLetterFailed(ctx, s, piece, be); err != nil {
				return err
			}
			if len(retry) == 0 {
				todo, attempt = todo[n:], 0
				sl.healthy()
				continue
			}
			// The failed records go again before the rest, in order.
			todo = append(slices.Clip(retry), todo[n:]...)
			err = be
		}
		sl.failing(err)
		if r.cfg.RetryMaxAttempts > 0 && attempt >= r.cfg.RetryMaxAttempts {
			return fmt.Errorf("sink %s: giving up after %d attempts: %w", s.Name, attempt, err)
		}
		r.obs.SinkRetry(s.Name)
		r.log.Warn("sink write failed; retrying", zap.String("sink", s.Name), zap.Int("attempt", attempt),
			zap.Int("records", min(len(todo), ad.size())), zap.Error(err))
		if err := b.wait(ctx); err != nil {
			return err
		}
	}
	return nil
}

// dropQuarantined returns piece without the records of tables quarantined
// in this sink, which it stores in the sink's DLQ with the quarantine's
// reason (Invariant 7), or, with QuarantineHold, leaves to the source's
// log (the lane never finishes their items: see inflight.finish). piece
// itself is returned when nothing is held.
func (r *Runtime) dropQuarantined(ctx context.Context, s NamedSink, sl *sinkLane, piece []Record) ([]Record, error) {
	if len(sl.quarantined) == 0 {
		return piece, nil
	}
	var keep []Record
	var letters []DeadLetter
	dropped := false
	for i := range piece {
		q, held := sl.held(&piece[i])
		if !held {
			keep = append(keep, piece[i])
			continue
		}
		dropped = true
		if r.cfg.QuarantineHold {
			continue
		}
		letters = append(letters, r.deadLetter("sink:"+s.Name, &piece[i],
			fmt.Errorf("table %s is quarantined in sink %s since %s: %s", q.Table, s.Name, q.Since.UTC().Format(time.RFC3339), q.Reason)))
	}
	if !dropped {
		return piece, nil
	}
	if len(letters) > 0 {
		if err := r.putDLQTo(ctx, s.DLQ, "sink:"+s.Name, letters); err != nil {
			return nil, err
		}
	}
	return keep, nil
}
