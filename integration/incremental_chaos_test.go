package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/integration/harness"
	"github.com/sluice-cdc/sluice/pipeline"
)

// snapshotPending reads the checkpoint at path: whether one exists, and
// the tables whose incremental snapshot it shows unfinished.
func snapshotPending(t *testing.T, path string) (exists bool, pending []string) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		return false, nil
	}
	var env struct {
		Checkpoint pipeline.Checkpoint `json:"checkpoint"`
	}
	if err := json.Unmarshal(raw, &env); err != nil {
		return false, nil // a torn read of a file being replaced
	}
	var pos struct {
		Snapshot *struct {
			Tables []struct {
				Schema string `json:"schema"`
				Table  string `json:"table"`
			} `json:"tables"`
		} `json:"snapshot"`
	}
	if err := json.Unmarshal(env.Checkpoint.Position, &pos); err != nil || pos.Snapshot == nil {
		t.Fatalf("checkpoint position %s carries no snapshot progress (%v)", env.Checkpoint.Position, err)
	}
	for _, tb := range pos.Snapshot.Tables {
		pending = append(pending, tb.Schema+"."+tb.Table)
	}
	return true, pending
}

// snapshot.mode incremental under kill -9: harness.Trials(8) kills at
// random moments, half while the tables are still being read in chunks
// (each run resumes from the chunks its checkpoint covers), under the
// concurrent workload of the chaos test (inserts, updates, deletes, key
// updates, columns added with DEFAULTs, truncates) paced to 400
// transactions a second: a chunk is emitted when its high watermark comes
// through the stream, so a stream that falls behind slows the snapshot
// with it. DuckDB then equals
// PostgreSQL row by row, and sluice verify finds both sinks equal.
func TestKill9DuringIncrementalSnapshotPostgres(t *testing.T) {
	pg := harness.PostgresT(t)
	ctx := context.Background()
	for _, db := range []string{"inc", "inc_target"} {
		if err := pg.CreateDatabase(ctx, db); err != nil {
			t.Fatal(err)
		}
	}
	const items, events = 60000, 20000
	if err := pg.Exec(ctx, "inc", strings.NewReplacer("ITEMS", fmt.Sprint(items), "EVENTS", fmt.Sprint(events)).Replace(chaosSchema)); err != nil {
		t.Fatal(err)
	}
	dsn := pg.DSN("inc")
	dir := t.TempDir()
	cfg := filepath.Join(dir, "pg.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`pipeline: pginc
source:
  postgres:
    dsn: %s
    tables: [public.items, public.events]
    heartbeat_interval: 1s
    status_interval: 1s
    snapshot: {mode: incremental, parallel: 2, chunk_time: 50ms, max_chunk_rows: 2000}
sinks:
  - duckdb: {path: ./sink.duckdb}
  - postgres: {dsn: "%s"}
offsets: {dir: ./offsets}
runtime: {checkpoint_interval: 100ms}
`, dsn, pg.DSN("inc_target"))), 0o644); err != nil {
		t.Fatal(err)
	}
	checkpoint := filepath.Join(dir, "offsets", "checkpoint.json")

	wctx, stopWork := context.WithCancel(ctx)
	defer stopWork()
	var work chaosCounts
	workErr := make(chan error, 1)
	go func() { workErr <- chaosWorkload(wctx, dsn, items, &work, true, 400) }()

	snapKills, streamKills := killAtRandom(t, cfg, func() bool {
		ok, pending := snapshotPending(t, checkpoint)
		return ok && len(pending) == 0
	})
	t.Logf("%d kills during the incremental snapshot, %d after it, %d workload transactions so far", snapKills, streamKills, work.writes.Load())

	d := startDaemon(t, cfg)
	d.waitAddr(t, 2*time.Minute)
	work.waitDDL(t, d)
	stopWork()
	if err := <-workErr; err != nil {
		t.Fatalf("workload: %v", err)
	}
	mark := commitMark(t, ctx, dsn)
	waitSlotConfirmed(t, ctx, dsn, "sluice_pginc", mark, d)
	d.signal(syscall.SIGTERM)
	if code := d.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("final run exit %d:\n%s", code, d.logs())
	}
	duck := filepath.Join(dir, "sink.duckdb")
	n1 := assertSinkEqualsSource(t, ctx, dsn, "inc", duck, "public", "items")
	n2 := assertSinkEqualsSource(t, ctx, dsn, "inc", duck, "public", "events")
	expectVerifyEqual(t, cfg)
	t.Logf("items: %d rows, events: %d rows equal in DuckDB and the Postgres sink after %d kills, %d transactions, %d columns added, %d truncates",
		n1, n2, snapKills+streamKills, work.writes.Load(), work.alters.Load(), work.truncates.Load())
}
