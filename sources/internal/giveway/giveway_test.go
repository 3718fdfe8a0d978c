package giveway

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A session listed at every poll is returned once it has waited after; one
// that drops out of a list starts over; a failed list is reported and the
// watch goes on; an ended context returns nothing.
func TestWatch(t *testing.T) {
	const after = 40 * time.Millisecond
	// Each poll is 10 ms after the one before, however late the ticker
	// fires on a busy machine.
	defer func(c func() time.Time) { clock = c }(clock)
	var ticks int
	base := time.Now()
	clock = func() time.Time { ticks++; return base.Add(time.Duration(ticks) * 10 * time.Millisecond) }
	polls := 0
	lists := [][]string{{"a", "b"}, {"b"}, nil, {"a", "b"}, {"a", "b"}, {"a", "b"}, {"a", "b"}, {"a", "b"}, {"a", "b"}}
	var seen []string
	failures := 0
	list := func(context.Context) ([]string, error) {
		polls++
		if polls == 3 {
			return nil, errors.New("connection reset")
		}
		if polls > len(lists) {
			return lists[len(lists)-1], nil
		}
		return lists[polls-1], nil
	}
	w, waited, ok := Watch(context.Background(), after, list, func(s string) string { return s },
		func(s string) { seen = append(seen, s) }, func(error) { failures++ })
	if !ok || w != "b" || waited < after {
		t.Fatalf("got %q after %s (ok %v), want b after at least %s", w, waited, ok, after)
	}
	// b was listed at polls 1, 2, 4…: the failed third poll is no gap.
	// a dropped out at poll 2 and came back, so it is seen twice.
	if failures != 1 || len(seen) != 3 || seen[0] != "a" || seen[1] != "b" || seen[2] != "a" {
		t.Fatalf("failures %d, seen %v; want 1 and [a b a]", failures, seen)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, ok := Watch(ctx, after, list, func(s string) string { return s }, func(string) {}, func(error) {}); ok {
		t.Fatal("a watch whose context ended returned a waiter")
	}
}
