package pipeline

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"
)

// Invariant 6 for operator output: records an operator adds to a batch
// wait for room under the cap like source records, until the batch is
// alone in flight; cancellation ends the wait.
func TestLedgerGrowWaitsForRoom(t *testing.T) {
	ctx := context.Background()
	l := newLedger(10, 1<<20, pacing{})
	a, _ := l.acquire(ctx, 6, 60, nil)
	b, _ := l.acquire(ctx, 3, 30, Position("b"))
	grown := make(chan error, 1)
	go func() { grown <- l.grow(ctx, b, 5, 50) }()
	l.done(a)
	if err := <-grown; err != nil {
		t.Fatal(err)
	}
	if n, bytes := l.inFlight(); n != 8 || bytes != 80 {
		t.Fatalf("in flight %d records, %d bytes; want 8, 80", n, bytes)
	}
	// Alone in flight, a batch grows past the cap at once.
	if err := l.grow(ctx, b, 100, 1000); err != nil {
		t.Fatal(err)
	}
	if n, _ := l.inFlight(); n != 108 {
		t.Fatalf("in flight %d, want 108", n)
	}
	l.done(b)
	if n, bytes := l.inFlight(); n != 0 || bytes != 0 {
		t.Fatalf("after done: %d records, %d bytes in flight", n, bytes)
	}
	if pos, covers := l.lowWater(); string(pos) != "b" || covers != b {
		t.Fatalf("low water %q covering %d batches, want b covering %d", pos, covers, b)
	}

	c, _ := l.acquire(ctx, 9, 0, nil)
	d, _ := l.acquire(ctx, 1, 0, nil)
	cctx, cancel := context.WithCancel(ctx)
	go func() { grown <- l.grow(cctx, d, 5, 0) }()
	cancel()
	if err := <-grown; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled grow: %v", err)
	}
	l.done(c)
	l.done(d)
}

// The record cap follows the sinks while the source waits at it: the
// durable rate over a window times hold, at least floor; a window in which
// the source never waited lifts it back to the configured cap.
func TestLedgerPacesTheRecordCapBySinkThroughput(t *testing.T) {
	ctx := context.Background()
	now := time.Unix(1000, 0)
	l := newLedger(10_000, 1<<40, pacing{hold: 4 * time.Second, window: 2 * time.Second, floor: 1000,
		now: func() time.Time { return now }})
	limit := func() int { l.mu.Lock(); defer l.mu.Unlock(); return l.limit }
	// blocked starts an acquire of n and returns once it waits at the cap.
	blocked := func(n int) chan uint64 {
		got := make(chan uint64, 1)
		go func() {
			seq, err := l.acquire(ctx, n, 1, nil)
			if err != nil {
				t.Error(err)
			}
			got <- seq
		}()
		for {
			l.mu.Lock()
			w := l.waited
			l.mu.Unlock()
			if w {
				return got
			}
			runtime.Gosched()
		}
	}

	now = now.Add(time.Hour) // idle time before the backlog does not count
	full, _ := l.acquire(ctx, 10_000, 1, nil)
	next := blocked(10)
	now = now.Add(5 * time.Second)
	l.done(full) // 10,000 durable in 5 s while the source waited: 2,000/s
	if got := limit(); got != 8000 {
		t.Fatalf("cap %d after 2,000 records/s with the source waiting; want 8,000 (4 s of them)", got)
	}
	small := <-next
	now = now.Add(3 * time.Second)
	l.done(small) // a window without waiting
	if got := limit(); got != 10_000 {
		t.Fatalf("cap %d after a window the source never waited in; want 10,000", got)
	}
	full, _ = l.acquire(ctx, 10_000, 1, nil)
	next = blocked(5000)
	now = now.Add(100 * time.Second)
	l.done(full) // 100 records/s: 400 in 4 s, below the floor
	if got := limit(); got != 1000 {
		t.Fatalf("cap %d at 100 records/s; want the floor, 1,000", got)
	}
	// A batch larger than the cap is still admitted alone.
	last := <-next
	// Writes slower than hold stretch it: 5,000 records in 10 s, whose
	// write took 6 s, hold 12 s of them, not 4.
	waiter := blocked(6000)
	l.wrote(6 * time.Second)
	now = now.Add(10 * time.Second)
	l.done(last)
	if got := limit(); got != 6000 {
		t.Fatalf("cap %d at 500 records/s with 6 s writes; want 6,000 (12 s of them)", got)
	}
	l.done(<-waiter)
	if n, _ := l.inFlight(); n != 0 {
		t.Fatalf("%d records in flight", n)
	}
	// Without pacing the cap never moves.
	fixed := newLedger(10, 1<<20, pacing{})
	a, _ := fixed.acquire(ctx, 10, 1, nil)
	fixed.done(a)
	if fixed.limit != 10 {
		t.Fatalf("unpaced cap %d", fixed.limit)
	}
}

// A position covers the batches up to its own: durable batches after it
// that carry none (a transaction not yet ended) are handed again after a
// restart, so lowWater does not count them.
func TestLowWaterCoversUpToItsPosition(t *testing.T) {
	ctx := context.Background()
	l := newLedger(100, 1<<20, pacing{})
	a, _ := l.acquire(ctx, 1, 10, Position("a"))
	b, _ := l.acquire(ctx, 1, 10, nil)
	l.done(a)
	l.done(b)
	if pos, covers := l.lowWater(); string(pos) != "a" || covers != a {
		t.Fatalf("low water %q covering %d batches, want a covering %d", pos, covers, a)
	}
	c, _ := l.acquire(ctx, 1, 10, Position("c"))
	l.done(c)
	if pos, covers := l.lowWater(); string(pos) != "c" || covers != c {
		t.Fatalf("low water %q covering %d batches, want c covering %d", pos, covers, c)
	}
}
