package daemon

import (
	"testing"

	"github.com/sluice-cdc/sluice/config"
)

func TestMemoryLimitFollowsTheCaps(t *testing.T) {
	rt := config.Runtime{MaxInFlightBytes: 64 << 20, BatchMaxBytes: 16 << 20}
	if got, want := memoryLimit(rt), int64(128<<20); got != want {
		t.Errorf("derived limit = %d MiB, want %d MiB", got>>20, want>>20)
	}
	rt.MemoryLimit = 1 << 30
	if got := memoryLimit(rt); got != 1<<30 {
		t.Errorf("explicit limit = %d, want 1GiB", got)
	}
}
