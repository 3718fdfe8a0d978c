// Package handoff is the queue between a source's log reader goroutine and
// its Read, shared by the Postgres and MySQL sources: Read blocks for the
// next item, then merges the whole transactions already queued behind it
// into one batch.
//
// Invariant 2 (DESIGN.md): a batch carries a position only when it ends
// with a transaction's last chunk, so items with a nil position (the
// first chunks of a large transaction) are never merged with what follows
// them, and a merged batch carries the position of its last transaction.
package handoff

import (
	"context"
	"errors"

	"github.com/sluice-cdc/sluice/pipeline"
)

// Part is what Read takes from a queued item.
type Part struct {
	Records []pipeline.Record
	Dead    []pipeline.DeadLetter
	// Pos is set only on a transaction's last chunk (or a heartbeat or
	// keepalive position), nil on the chunks before it.
	Pos pipeline.Position
}

// Queue reads the items a reader goroutine sends on Out. It is used from
// Read's goroutine only.
type Queue[T any] struct {
	out     <-chan T
	done    <-chan struct{}
	failure func() error
	part    func(*T) Part
	closed  string
	peeked  *T // taken from out but left for the next batch
}

// New is a queue over out, whose reader closes done when it stops, with
// failure saying why (nil: closed on purpose; the error then says closed,
// prefixed by name). part views an item.
func New[T any](name string, out <-chan T, done <-chan struct{}, failure func() error, part func(*T) Part) *Queue[T] {
	return &Queue[T]{out: out, done: done, failure: failure, part: part, closed: name + ": closed"}
}

// Next blocks until an item is queued, the reader stopped (its failure,
// after every item it queued was taken) or ctx ends. A queued item wins
// over a stop or a cancelled ctx.
func (q *Queue[T]) Next(ctx context.Context) (T, error) {
	if q.peeked != nil {
		it := *q.peeked
		q.peeked = nil
		return it, nil
	}
	select {
	case it := <-q.out:
		return it, nil
	default:
	}
	var zero T
	select {
	case it := <-q.out:
		return it, nil
	case <-q.done:
		// Deliver what the reader queued before it stopped.
		select {
		case it := <-q.out:
			return it, nil
		default:
		}
		if err := q.failure(); err != nil {
			return zero, err
		}
		return zero, errors.New(q.closed)
	case <-ctx.Done():
		return zero, ctx.Err()
	}
}

// Batch makes first, and the whole transactions already queued behind it
// (without waiting for more), one batch of at most max records: first alone
// when it is not a transaction's last chunk (Invariant 2). handOver sees
// every item taken, in order. An item that does not fit waits for the
// next Next.
func (q *Queue[T]) Batch(first T, max int, handOver func(*T)) pipeline.Batch {
	p := q.part(&first)
	handOver(&first)
	b := pipeline.Batch{Records: p.Records, Dead: p.Dead, Pos: p.Pos}
	var more []T
	n := len(b.Records)
	for b.Pos != nil && n < max {
		var nx T
		select {
		case nx = <-q.out:
		default:
			return q.merge(b, n, more, handOver)
		}
		np := q.part(&nx)
		if np.Pos == nil || n+len(np.Records) > max {
			q.peeked = &nx
			break
		}
		more = append(more, nx)
		n += len(np.Records)
	}
	return q.merge(b, n, more, handOver)
}

// merge appends more to b in one allocation of n records.
func (q *Queue[T]) merge(b pipeline.Batch, n int, more []T, handOver func(*T)) pipeline.Batch {
	if len(more) == 0 {
		return b
	}
	recs := append(make([]pipeline.Record, 0, n), b.Records...)
	for i := range more {
		p := q.part(&more[i])
		recs = append(recs, p.Records...)
		b.Dead = append(b.Dead, p.Dead...)
		b.Pos = p.Pos
		handOver(&more[i])
	}
	b.Records = recs
	return b
}
