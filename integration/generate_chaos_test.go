package integration

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/sources/generate"
)

// The real binary, killed with SIGKILL at random moments and restarted,
// leaves both embedded sinks (DuckDB and the Bleve index) equal to the
// source feed: no gaps (the
// checkpoint never passes a record that is not durable) and no corruption
// from the replays (the version guard absorbs them).
func TestKill9DuringGenerateRunLeavesSinkEqualToFeed(t *testing.T) {
	dir := t.TempDir()
	opts := generate.Options{Seed: 42, Tables: 3, InitialRows: 2000, Changes: 60000, Rate: 15000, Batch: 250,
		Mix: generate.Mix{Insert: 30, Update: 55, Delete: 15}}
	cfg := filepath.Join(dir, "pipe.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf(`pipeline: chaos
source:
  generate:
    seed: %d
    initial_rows: %d
    changes: %d
    rate: %g
    batch: %d
    mix: {insert: %d, update: %d, delete: %d}
sinks:
  - duckdb: {path: ./sink.duckdb}
  - bleve: {path: ./index}
offsets: {dir: ./offsets}
runtime:
  checkpoint_interval: 50ms
  batch_linger: 20ms
  batch_max_records: 2000
  shutdown_timeout: 2m
`, opts.Seed, opts.InitialRows, opts.Changes, opts.Rate, opts.Batch, opts.Mix.Insert, opts.Mix.Update, opts.Mix.Delete)), 0o644)

	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	kills := 0
	for kills < 6 {
		d := startDaemon(t, cfg)
		d.waitAddr(t, 60*time.Second)
		// A random moment into the run, then SIGKILL: no drain, no final
		// checkpoint.
		wait := time.Duration(100+rng.IntN(900)) * time.Millisecond
		select {
		case <-d.done:
			t.Logf("run finished before the kill (exit %d)", d.exitCode())
		case <-time.After(wait):
			d.signal(syscall.SIGKILL)
			<-d.done
			kills++
		}
		if d.exitCode() == 0 {
			break
		}
	}
	t.Logf("killed %d times", kills)
	// The last run goes to the end of the bounded feed and exits 0.
	d := startDaemon(t, cfg)
	if code := d.wait(t, 5*time.Minute); code != 0 {
		t.Fatalf("final run exit %d:\n%s", code, d.logs())
	}
	if kills < 3 {
		t.Fatalf("only %d kills landed mid-run; the test proved nothing", kills)
	}

	// sluice verify compares every sink with the feed's final state.
	expectVerifyEqual(t, cfg)
	t.Logf("%d kills", kills)
}
