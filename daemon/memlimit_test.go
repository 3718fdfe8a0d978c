package daemon

import (
	"testing"

	"github.com/sluice-cdc/sluice/config"
)

func TestMemoryLimitFollowsTheCaps(t *testing.T) {
	pg := &config.PostgresSource{Snapshot: config.Snapshot{Mode: "initial", Parallel: 2, MaxChunkBytes: 8 << 20}}
	cfg := &config.Config{Runtime: config.Runtime{MaxInFlightBytes: 64 << 20, BatchMaxBytes: 16 << 20}}
	cfg.Source.Postgres = pg
	if got, want := MemoryLimit(cfg), int64(160<<20); got != want {
		t.Errorf("derived limit = %d MiB, want %d MiB (in flight, two batches, fixed heap, two windows' chunks twice)", got>>20, want>>20)
	}
	pg.Snapshot.Mode = "never"
	if got, want := MemoryLimit(cfg), int64(128<<20); got != want {
		t.Errorf("derived limit without snapshots = %d MiB, want %d MiB", got>>20, want>>20)
	}
	cfg.Source.Postgres = nil
	cfg.Source.MySQL = &config.MySQLSource{Snapshot: config.MySQLSnapshot{Mode: "incremental", Parallel: 4, MaxChunkBytes: 1 << 20}}
	if got, want := MemoryLimit(cfg), int64(136<<20); got != want {
		t.Errorf("derived limit (MySQL, 4 windows of 1MiB) = %d MiB, want %d MiB", got>>20, want>>20)
	}
	cfg.Runtime.MemoryLimit = 1 << 30
	if got := MemoryLimit(cfg); got != 1<<30 {
		t.Errorf("explicit limit = %d, want 1GiB", got)
	}
}
