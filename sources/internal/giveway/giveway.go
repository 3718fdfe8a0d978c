// Package giveway is the watch an initial load keeps on the sessions
// waiting for the locks its long transactions hold. Those locks last
// until the load ends, and every later statement on a table queues
// behind a schema change waiting for them: once a session has waited long
// enough, the load gives way (it fails, ends its transactions at once,
// and is started again; the restart reads the rest in chunks, each in a
// short transaction).
package giveway

import (
	"context"
	"time"
)

// clock is the time of a poll (a var for tests).
var clock = time.Now

// Watch lists the waiting sessions (list) at every poll, min(1s, after/4),
// until ctx ends, and returns the first one that was in every list for at
// least after (counted from the poll that first listed it), keyed by key,
// with how long it waited; ok is false when ctx ended first. seen is
// called with each session the first time it is listed; failed with a
// list's error (the next poll tries again: watching never ends the load
// on its own account).
func Watch[W any, K comparable](ctx context.Context, after time.Duration, list func(context.Context) ([]W, error),
	key func(W) K, seen func(W), failed func(error)) (w W, waited time.Duration, ok bool) {
	tick := time.NewTicker(min(time.Second, after/4))
	defer tick.Stop()
	since := map[K]time.Time{}
	for {
		select {
		case <-ctx.Done():
			return w, 0, false
		case <-tick.C:
		}
		now := clock()
		waiting, err := list(ctx)
		if err != nil {
			if ctx.Err() == nil {
				failed(err)
			}
			continue
		}
		next := make(map[K]time.Time, len(waiting))
		for _, w := range waiting {
			k := key(w)
			t, ok := since[k]
			if !ok {
				t = now
				seen(w)
			}
			next[k] = t
			if waited := now.Sub(t); waited >= after {
				return w, waited, true
			}
		}
		since = next
	}
}
