// Package rangequeue is the unbounded FIFO an initial load's planner
// fills with key ranges while its readers take them: the planner never
// blocks on the readers, so a reader can plan and then read, and the
// readers start on the first ranges while the walk of the key goes on.
package rangequeue

import "sync"

// Queue is an unbounded FIFO of T, safe for concurrent use.
type Queue[T any] struct {
	mu     sync.Mutex
	cond   *sync.Cond
	items  []T
	closed bool
}

// New returns an empty, open queue.
func New[T any]() *Queue[T] {
	q := &Queue[T]{}
	q.cond = sync.NewCond(&q.mu)
	return q
}

// Push appends v; it never blocks. Pushing after Close is a programming
// error: the value may never be popped.
func (q *Queue[T]) Push(v T) {
	q.mu.Lock()
	q.items = append(q.items, v)
	q.mu.Unlock()
	q.cond.Signal()
}

// Close marks the end of the pushes: Pop returns false once the queue is
// drained. Closing twice is harmless. To stop the readers on
// cancellation, close the queue from context.AfterFunc.
func (q *Queue[T]) Close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.cond.Broadcast()
}

// Pop blocks until a value is queued or the queue is closed and drained;
// ok is false in the latter case. Values come out in push order.
func (q *Queue[T]) Pop() (v T, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.items) == 0 && !q.closed {
		q.cond.Wait()
	}
	if len(q.items) == 0 {
		return v, false
	}
	v = q.items[0]
	var zero T
	q.items[0] = zero // the ranges' memory goes with them
	q.items = q.items[1:]
	return v, true
}
