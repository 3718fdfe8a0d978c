package integration

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/daemon"
	"github.com/sluice-cdc/sluice/integration/harness"
	"github.com/sluice-cdc/sluice/sources/generate"
)

// A stop whose drain cannot finish — the bounded source ends, or SIGTERM
// arrives, while the only sink is unreachable — exits with
// daemon.ExitUndrained (never 0), names the sink and how many records it
// holds; the checkpoint covers only what was durable, so a restart with
// the sink back completes the feed.
func TestStopWithSinkDownExitsUndrained(t *testing.T) {
	for _, c := range []struct {
		name    string
		changes int64
		stop    func(t *testing.T, d *daemonProc, base string)
	}{
		{"source ends", 6000, func(*testing.T, *daemonProc, string) {}},
		{"SIGTERM", 1000000, func(t *testing.T, d *daemonProc, base string) {
			waitUntil(t, d, time.Minute, "failed writes", func() bool { return sinkRetries(t, base) >= 1 })
			d.signal(syscall.SIGTERM)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			rd := harness.RedisT(t)
			proxy := harness.ProxyT(t, rd.Addr())
			dir := t.TempDir()
			opts := generate.Options{Seed: 5, Tables: 2, InitialRows: 200, Changes: c.changes, Rate: 2000, Batch: 50,
				Mix: generate.Mix{Insert: 30, Update: 55, Delete: 15}}
			cfg := writeConfig(t, dir, fmt.Sprintf(`pipeline: outage
source:
  generate: {seed: %d, tables: %d, initial_rows: %d, changes: %d, rate: %g, batch: %d, mix: {insert: 30, update: 55, delete: 15}}
sinks:
  - redis: {addr: "%s"}
offsets: {dir: ./offsets}
runtime: {checkpoint_interval: 50ms, shutdown_timeout: 1s, write_timeout: 2s, retry: {initial: 50ms, max: 200ms}}
`, opts.Seed, opts.Tables, opts.InitialRows, opts.Changes, opts.Rate, opts.Batch, proxy.Addr()))
			d := startDaemon(t, cfg)
			base := "http://" + d.waitAddr(t, time.Minute)
			waitUntil(t, d, time.Minute, "first checkpoints", func() bool { return statusOf(t, base).CheckpointSeq >= 2 })
			proxy.Cut()
			c.stop(t, d, base)
			if code := d.wait(t, 2*time.Minute); code != daemon.ExitUndrained {
				t.Fatalf("exit %d with the sink down, want %d:\n%s", code, daemon.ExitUndrained, d.logs())
			}
			if logs := d.logs(); !strings.Contains(logs, "sink redis holds") || !strings.Contains(logs, "not durable") {
				t.Fatalf("the error does not name the sink and its undrained records:\n%s", logs)
			}
			if c.changes > 100000 {
				return // the endless feed is not run to its end
			}
			proxy.Restore()
			d = startDaemon(t, cfg)
			if code := d.wait(t, 2*time.Minute); code != 0 {
				t.Fatalf("exit %d after the sink came back:\n%s", code, d.logs())
			}
			expectVerifyEqual(t, cfg)
		})
	}
}
