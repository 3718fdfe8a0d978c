package daemon

import (
	"math"
	"runtime/debug"
	"testing"

	"go.uber.org/zap"

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

func TestMemoryLimitSetsTheCollectorsPercent(t *testing.T) {
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	gcPercent := func() int { p := debug.SetGCPercent(100); debug.SetGCPercent(p); return p }

	t.Setenv("GOMEMLIMIT", "")
	t.Setenv("GOGC", "")
	setMemoryLimit(300<<20, zap.NewNop())
	if got := debug.SetMemoryLimit(-1); got != 300<<20 {
		t.Errorf("memory limit = %d, want 300MiB", got)
	}
	if got := gcPercent(); got != GCPercent {
		t.Errorf("GOGC under the daemon's limit = %d, want %d", got, GCPercent)
	}

	// GOGC in the environment wins.
	t.Setenv("GOGC", "150")
	debug.SetGCPercent(150)
	setMemoryLimit(300<<20, zap.NewNop())
	if got := gcPercent(); got != 150 {
		t.Errorf("GOGC with GOGC=150 in the environment = %d, want 150", got)
	}

	// A limit from GOMEMLIMIT (or GOMEMLIMIT=off) keeps Go's defaults.
	t.Setenv("GOMEMLIMIT", "off")
	t.Setenv("GOGC", "")
	debug.SetGCPercent(100)
	debug.SetMemoryLimit(math.MaxInt64)
	setMemoryLimit(300<<20, zap.NewNop())
	if got := debug.SetMemoryLimit(-1); got != math.MaxInt64 {
		t.Errorf("memory limit with GOMEMLIMIT=off = %d, want none", got)
	}
	if got := gcPercent(); got != 100 {
		t.Errorf("GOGC with GOMEMLIMIT set = %d, want Go's 100", got)
	}
}
