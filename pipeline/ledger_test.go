package pipeline

import (
	"context"
	"errors"
	"testing"
)

// Invariant 6 for operator output: records an operator adds to a batch
// wait for room under the cap like source records, until the batch is
// alone in flight; cancellation ends the wait.
func TestLedgerGrowWaitsForRoom(t *testing.T) {
	ctx := context.Background()
	l := newLedger(10, 1<<20)
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
	if pos := l.lowWater(); string(pos) != "b" {
		t.Fatalf("low water %q", pos)
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
