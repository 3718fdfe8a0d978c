package pipeline

import (
	"context"
	"errors"
	"testing"
	"time"
)

// Retry delays grow exponentially from the initial delay up to the cap,
// each drawn at random from the upper half of its step (jitter), and a
// wait returns at once when its context is cancelled.
func TestBackoffIsCappedExponentialWithJitter(t *testing.T) {
	const initial, limit = 100 * time.Millisecond, time.Second
	steps := []time.Duration{100, 200, 400, 800, 1000, 1000, 1000}
	firsts := map[time.Duration]bool{}
	for range 200 {
		b := newBackoff(initial, limit)
		for i, step := range steps {
			step *= time.Millisecond
			d := b.next()
			if d < step/2 || d > step {
				t.Fatalf("delay %d is %v, want within [%v, %v]", i, d, step/2, step)
			}
			if i == 0 {
				firsts[d] = true
			}
		}
	}
	if len(firsts) < 50 {
		t.Fatalf("200 first delays took only %d values: no jitter", len(firsts))
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	b := newBackoff(time.Hour, time.Hour)
	if err := b.wait(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled wait returned %v", err)
	}
}
