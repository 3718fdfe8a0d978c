package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/integration/harness"
	"github.com/sluice-cdc/sluice/sources/generate"
)

// One pipeline writes the same feed to DuckDB, PostgreSQL and Redis
// (configured through the YAML file), survives two kill -9, and each sink
// then equals the feed.
func TestOneFeedIntoDuckDBPostgresAndRedis(t *testing.T) {
	pg := harness.PostgresT(t)
	rd := harness.RedisT(t)
	ctx := context.Background()
	if err := pg.CreateDatabase(ctx, "analytics"); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	opts := generate.Options{Seed: 5, Tables: 3, InitialRows: 500, Changes: 20000, Rate: 8000, Batch: 200,
		Mix: generate.Mix{Insert: 30, Update: 55, Delete: 15}}
	cfg := filepath.Join(dir, "multi.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf(`pipeline: multi
source:
  generate: {seed: %d, initial_rows: %d, changes: %d, rate: %g, batch: %d, mix: {insert: 30, update: 55, delete: 15}}
sinks:
  - duckdb: {path: ./sink.duckdb}
  - postgres: {dsn: "%s"}
  - redis: {addr: "%s", format: json}
offsets: {dir: ./offsets}
runtime: {checkpoint_interval: 50ms}
`, opts.Seed, opts.InitialRows, opts.Changes, opts.Rate, opts.Batch, pg.DSN("analytics"), rd.Addr())), 0o644)

	for i := 0; i < 2; i++ {
		d := startDaemon(t, cfg)
		d.waitAddr(t, time.Minute)
		time.Sleep(time.Duration(300+400*i) * time.Millisecond) // a moment into the run
		d.signal(syscall.SIGKILL)
		<-d.done
	}
	d := startDaemon(t, cfg)
	if code := d.wait(t, 5*time.Minute); code != 0 {
		t.Fatalf("final run exit %d:\n%s", code, d.logs())
	}

	// sluice verify compares every sink with the feed's final state.
	expectVerifyEqual(t, cfg)
}
