package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"go.uber.org/zap"
)

// read pulls batches from the source, registers them in the ledger (blocking
// at the in-flight cap, Invariant 6), runs the operators and hands them to
// the writer. It closes items when it returns.
func (r *Runtime) read(ctx context.Context, items chan<- item) error {
	defer close(items)
	for {
		b, err := r.src.Read(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		if len(b.Dead) > 0 {
			// Invariant 7: dead letters are durable before any later
			// position can be checkpointed.
			for i := range b.Dead {
				b.Dead[i].Pipeline = r.cfg.Pipeline
				if b.Dead[i].Stage == "" {
					b.Dead[i].Stage = "source"
				}
			}
			if err := r.putDLQ(ctx, "source", b.Dead); err != nil {
				return err
			}
		}
		if len(b.Records) == 0 && b.Pos == nil {
			continue
		}
		now := time.Now()
		r.obs.Records("source", len(b.Records))
		weight := int64(b.Weight())
		seq, err := r.ledger.acquire(ctx, len(b.Records), weight, b.Pos)
		if err != nil {
			return err
		}
		if r.tap != nil {
			r.tap.Read(&b)
		}
		recs := b.Records
		for _, op := range r.ops {
			t0 := time.Now()
			out, err := op.Operator.Process(ctx, recs)
			var rj *Rejects
			if errors.As(err, &rj) {
				if err := r.reject(ctx, op.Name, rj); err != nil {
					return err
				}
				err = nil
			}
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				// A transform failure on a batch is not attributable to one
				// record: stop rather than skip (nothing is acknowledged).
				return Fatal(fmt.Errorf("transform %s: %w", op.Name, err))
			}
			recs = out
			r.obs.BatchDuration("transform", time.Since(t0))
			r.obs.Records("transform", len(recs))
		}
		if len(recs) > len(b.Records) {
			// Operators added records (a join's fan-out): they count
			// against the in-flight cap too (Invariant 6).
			total := int64((&Batch{Records: recs}).Weight())
			if err := r.ledger.grow(ctx, seq, len(recs)-len(b.Records), max(total-weight, 0)); err != nil {
				return err
			}
			weight = max(total, weight)
		}
		recsN, bytesN := r.ledger.inFlight()
		r.obs.InFlight(recsN, bytesN)
		select {
		case items <- item{seq: seq, records: recs, bytes: weight, read: now}:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// reject stores the records operator op rejected in the DLQ (Invariant
// 7); they are acknowledged with their batch.
func (r *Runtime) reject(ctx context.Context, op string, rj *Rejects) error {
	stage := "transform:" + op
	letters := make([]DeadLetter, len(rj.Records))
	for i := range rj.Records {
		letters[i] = r.deadLetter(stage, &rj.Records[i].Record, rj.Records[i].Err)
	}
	return r.putDLQ(ctx, stage, letters)
}

// wrote counts n records a sink made durable in one write that took d.
func (r *Runtime) wrote(sink, stage string, n int, d time.Duration) {
	r.obs.BatchDuration(stage, d)
	r.obs.Records(stage, n)
	r.ledger.wrote(d)
	r.mu.Lock()
	r.written[sink] += int64(n)
	r.mu.Unlock()
}

// deadLetterFailed stores the permanent failures be reports for todo in
// the sink's DLQ (Invariant 7) and counts the records that were written;
// the caller retries the others.
func (r *Runtime) deadLetterFailed(ctx context.Context, s NamedSink, todo []Record, be *BatchError) error {
	stage := "sink:" + s.Name
	var letters []DeadLetter
	for _, f := range be.Failed {
		if f.Index < 0 || f.Index >= len(todo) {
			return Fatal(fmt.Errorf("sink %s: reported failure for record %d of %d", s.Name, f.Index, len(todo)))
		}
		if f.Permanent {
			letters = append(letters, r.deadLetter(stage, &todo[f.Index], f.Err))
		}
	}
	if len(letters) > 0 {
		if err := r.putDLQTo(ctx, s.DLQ, stage, letters); err != nil {
			return err
		}
	}
	ok := len(todo) - len(be.Failed)
	r.obs.Records(stage, ok)
	r.mu.Lock()
	r.written[s.Name] += int64(ok)
	r.mu.Unlock()
	return nil
}

// deadLetter describes a record for the DLQ.
func (r *Runtime) deadLetter(stage string, rec *Record, cause error) DeadLetter {
	dl := DeadLetter{Time: time.Now().UTC(), Pipeline: r.cfg.Pipeline, Stage: stage, Op: rec.Op.String(),
		Version: rec.Version.String(), Error: cause.Error()}
	if rec.Table != nil {
		dl.Table = rec.Table.ID.String()
	}
	if json.Valid(rec.Pos) {
		dl.Position = json.RawMessage(rec.Pos)
	}
	dl.Raw = MarshalRecord(rec)
	return dl
}

func (r *Runtime) putDLQ(ctx context.Context, stage string, letters []DeadLetter) error {
	return r.putDLQTo(ctx, nil, stage, letters)
}

// putDLQTo stores letters in dlq, or in the pipeline's queue when dlq is nil.
func (r *Runtime) putDLQTo(ctx context.Context, dlq DLQ, stage string, letters []DeadLetter) error {
	if dlq == nil {
		dlq = r.dlq
	}
	if dlq == nil {
		// Invariant 7: a poison record never vanishes silently.
		return Fatal(fmt.Errorf("%s: %d record(s) failed permanently and no dead-letter queue is configured: %s",
			stage, len(letters), letters[0].Error))
	}
	if err := dlq.Put(ctx, letters); err != nil {
		return Fatal(fmt.Errorf("dead-letter queue: %w", err))
	}
	r.obs.DeadLetters(stage, len(letters))
	for _, l := range letters {
		r.log.Warn("record sent to the dead-letter queue", zap.String("stage", stage), zap.String("table", l.Table),
			zap.String("version", l.Version), zap.String("error", l.Error))
	}
	return nil
}

// commitLoop commits the checkpoint every CheckpointInterval (and soon after
// durable progress), then acknowledges the source. It is the only goroutine
// that commits or acks (Invariant 1).
func (r *Runtime) commitLoop(ctx context.Context, durable <-chan struct{}) error {
	t := time.NewTicker(r.cfg.CheckpointInterval)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-durable:
			if time.Since(last) < r.cfg.CheckpointInterval {
				continue
			}
		}
		last = time.Now()
		if err := r.commit(ctx); err != nil {
			if IsFatal(err) {
				return err
			}
			r.log.Warn("checkpoint commit failed; will retry", zap.Error(err))
		}
	}
}

// commit stores the newest durable position and then acks the source.
func (r *Runtime) commit(ctx context.Context) error {
	if pos, covers := r.ledger.lowWater(); pos != nil {
		r.pendingPos, r.pendingCovers = pos, covers
	}
	if n := r.ledger.settled(); n > 0 {
		for _, op := range r.ops {
			if s, ok := op.Operator.(Settler); ok {
				s.Settled(n)
			}
		}
	}
	if r.pendingPos == nil {
		return nil
	}
	if !json.Valid(r.pendingPos) {
		return Fatal(fmt.Errorf("source produced a position that is not JSON: %q", r.pendingPos))
	}
	r.mu.Lock()
	seq := r.lastCP.Seq + 1
	r.mu.Unlock()
	cp := Checkpoint{Pipeline: r.cfg.Pipeline, Position: json.RawMessage(r.pendingPos), Seq: seq, CommittedAt: time.Now().UTC()}
	t0 := time.Now()
	// Invariant 5: the operators' own state covers the position before
	// the checkpoint names it.
	for _, op := range r.ops {
		if s, ok := op.Operator.(Syncer); ok {
			if err := s.Sync(ctx); err != nil {
				return fmt.Errorf("write the state of operator %s: %w", op.Name, err)
			}
		}
	}
	// Invariant 1: sink write (done: the ledger only yields durable
	// positions) → checkpoint commit → source ack.
	if err := r.store.Commit(ctx, cp); err != nil {
		return fmt.Errorf("commit checkpoint: %w", err)
	}
	r.obs.CheckpointCommitted(time.Since(t0), cp.CommittedAt, cp.Seq)
	if r.tap != nil {
		r.tap.Committed(r.pendingPos)
	}
	for _, op := range r.ops {
		if c, ok := op.Operator.(Checkpointed); ok {
			c.Checkpointed(r.pendingCovers)
		}
	}
	r.mu.Lock()
	r.lastCP = cp
	r.mu.Unlock()
	pos := r.pendingPos
	r.pendingPos = nil
	if err := r.src.Ack(ctx, pos); err != nil {
		r.log.Warn("source ack failed; the next checkpoint acks again", zap.Error(err))
	}
	return nil
}

// backoff is capped exponential backoff with full jitter.
type backoff struct {
	cur, max time.Duration
}

func newBackoff(initial, max time.Duration) *backoff { return &backoff{cur: initial, max: max} }

// next returns the next delay, uniformly in [cur/2, cur] (jitter, so
// retrying lanes and processes spread out), and doubles cur up to max.
func (b *backoff) next() time.Duration {
	d := b.cur/2 + time.Duration(rand.Int64N(int64(b.cur/2)+1))
	if b.cur < b.max {
		b.cur *= 2
		if b.cur > b.max {
			b.cur = b.max
		}
	}
	return d
}

// wait sleeps the next delay; it returns ctx's error when cancelled first.
func (b *backoff) wait(ctx context.Context) error {
	t := time.NewTimer(b.next())
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
