package memtrim

import (
	"context"
	"time"
)

// Run trims at once and then every interval until ctx ends. It is a no-op
// on systems without /proc/self/smaps.
func Run(ctx context.Context, interval time.Duration) {
	Trim()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			Trim()
		}
	}
}
