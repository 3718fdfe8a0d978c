package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/integration/harness"
)

// The incremental snapshot on a PostgreSQL 16 hot standby, which takes no
// writes: the slot, the stream and every chunk are on the standby, and
// each watermark is a WAL position the standby replayed (sources/postgres
// marks.go), met by the stream between two transactions. The primary
// takes the chaos workload at 400 transactions a second (inserts,
// updates, deletes, key updates, columns added with DEFAULTs, truncates,
// all replayed on the standby while chunks are read there). The daemon is
// killed with SIGKILL once while the tables are still being read and
// resumes from its checkpoint's chunks; in the incremental run the standby
// is then promoted part way through the snapshot, and the workload moves
// to it. With the primary idle, a filtered
// re-snapshot then completes on keepalives alone. DuckDB equals the
// standby row by row, and sluice verify (against the standby) finds it
// equal.
func TestReadOnlyIncrementalSnapshotOnAPostgres16Standby(t *testing.T) {
	primary := harness.Postgres16T(t, harness.PostgresOptions{})
	standby := primary.StandbyT(t)
	for _, mode := range []string{"initial", "incremental"} {
		// The last run promotes the standby.
		t.Run(mode, func(t *testing.T) { standbySnapshot(t, primary, standby, mode, mode == "incremental") })
	}
}

// standbySnapshot runs the test above with snapshot mode mode (initial:
// the fast load from the slot's exported snapshot, imported on the
// standby, killed part way and resumed incrementally); with promote, the
// standby is promoted while the tables are read after the restart.
func standbySnapshot(t *testing.T, primary, standby *harness.Postgres, mode string, promote bool) {
	ctx := context.Background()
	db := "stby_" + mode
	const items, events = 60000, 10000
	if err := primary.CreateDatabase(ctx, db); err != nil {
		t.Fatal(err)
	}
	if err := primary.Exec(ctx, db, strings.NewReplacer("ITEMS", fmt.Sprint(items), "EVENTS", fmt.Sprint(events)).Replace(chaosSchema),
		// The publication is made on the primary: the standby cannot.
		"CREATE PUBLICATION sluice_"+db+" FOR TABLE items, events"); err != nil {
		t.Fatal(err)
	}

	if err := standby.CatchUp(ctx, primary); err != nil {
		t.Fatal(err)
	}
	sdsn, pdsn := standby.DSN(db), primary.DSN(db)

	// A slot made on a standby waits for the primary's next record of
	// running transactions; the primary writes one every 15 s on its
	// own, this writes them sooner.
	sctx, stopSnapshots := context.WithCancel(ctx)
	defer stopSnapshots()
	go func() {
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-sctx.Done():
				return
			case <-tick.C:
				_ = primary.Exec(sctx, "postgres", "SELECT pg_log_standby_snapshot()")
			}
		}
	}()

	dir := t.TempDir()
	cfg := filepath.Join(dir, "stby.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`pipeline: %s
source:
  postgres:
    dsn: %s
    tables: [public.items, public.events]
    heartbeat_interval: 1s
    status_interval: 1s
    snapshot: {mode: %s, parallel: 2, chunk_rows: 4000, chunk_time: 50ms, max_chunk_rows: 1000}
sinks:
  - duckdb: {path: ./sink.duckdb}
offsets: {dir: ./offsets}
runtime: {checkpoint_interval: 100ms}
`, db, sdsn, mode)), 0o644); err != nil {
		t.Fatal(err)
	}
	checkpoint := filepath.Join(dir, "offsets", "checkpoint.json")

	var work chaosCounts
	workErr := make(chan error, 1)
	startWork := func(dsn string, maxID int64) context.CancelFunc {
		wctx, stop := context.WithCancel(ctx)
		// Not the last column, whose volatile DEFAULT rewrites items: on a
		// PostgreSQL 16 standby the rewrite's recovery conflict can
		// invalidate the logical slot (it did once in CI, with
		// hot_standby_feedback on); the rewrite is tested on primaries.
		go func() { workErr <- chaosWorkload(wctx, dsn, maxID, &work, chaosAdded[:len(chaosAdded)-1], 400) }()
		return stop
	}
	stopWork := startWork(pdsn, items)
	defer func() { stopWork() }()

	d := startDaemon(t, cfg)
	d.waitAddr(t, 2*time.Minute)
	waitUntil(t, d, 3*time.Minute, "a durable chunk", func() bool {
		ok, _ := snapshotPending(t, checkpoint)
		return ok && snapshotRowsDone(t, checkpoint) > 0
	})
	if loadedAll(t, checkpoint) {
		t.Fatal("the snapshot ended before the kill; make its chunks smaller")
	}
	if !strings.Contains(d.logs(), "hot standby: no heartbeat messages") {
		t.Fatalf("the source did not see a standby:\n%s", d.logs())
	}
	done := snapshotRowsDone(t, checkpoint)
	d.kill()

	d = startDaemon(t, cfg)
	addr := d.waitAddr(t, 2*time.Minute)
	if promote {
		// The standby becomes the primary while the tables are read:
		// watermarks registered at replayed positions are met on the
		// new timeline, later ones are insert positions, and the
		// workload moves to the promoted server (its new rows above
		// every id the old primary used).
		waitUntil(t, d, 3*time.Minute, "chunks after the restart", func() bool { return snapshotRowsDone(t, checkpoint) > done })
		if loadedAll(t, checkpoint) {
			t.Fatal("the snapshot ended before the promotion; make its chunks smaller")
		}
		stopWork()
		if err := <-workErr; err != nil {
			t.Fatalf("workload: %v", err)
		}
		if err := standby.CatchUp(ctx, primary); err != nil {
			t.Fatal(err)
		}
		if err := standby.Exec(ctx, "postgres", "SELECT pg_promote(true, 60)"); err != nil {
			t.Fatal(err)
		}
		pdsn = sdsn
		stopWork = startWork(pdsn, 10*items)
	}
	waitUntil(t, d, 5*time.Minute, "the snapshot of both tables", func() bool { return loadedAll(t, checkpoint) })
	work.waitDDL(t, d, 3)
	stopWork()
	if err := <-workErr; err != nil {
		t.Fatalf("workload: %v", err)
	}
	mark := commitMark(t, ctx, pdsn)
	waitSlotConfirmed(t, ctx, sdsn, "sluice_"+db, mark, d)

	// With the primary idle (no commit, no record of running
	// transactions), a re-snapshot's watermarks are met by the stream's
	// keepalives alone.
	stopSnapshots()
	cmd := exec.Command(sluiceBinary(t), "snapshot", "-c", cfg, "--addr", addr, "--table", "public.items", "--where", "id % 2 = 0")
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "snapshot of public.items queued") {
		t.Fatalf("sluice snapshot: %v\n%s", err, out)
	}
	waitSnapshotDone(t, d, addr, "public.items", "id % 2 = 0")
	d.signal(syscall.SIGTERM)
	if code := d.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("exit %d:\n%s", code, d.logs())
	}
	duck := filepath.Join(dir, "sink.duckdb")
	n1 := assertSinkEqualsSource(t, ctx, sdsn, db, duck, "public", "items")
	n2 := assertSinkEqualsSource(t, ctx, sdsn, db, duck, "public", "events")
	expectVerifyEqual(t, cfg)
	t.Logf("items: %d rows, events: %d rows equal; killed after %d snapshot rows were durable; promoted: %v; %d primary transactions, %d ALTERs, %d TRUNCATEs",
		n1, n2, done, promote, work.writes.Load(), work.alters.Load(), work.truncates.Load())
}
