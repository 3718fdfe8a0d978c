package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-cdc/sluice/integration/harness"
)

// bigTxRows is the size of the streamed transaction: 300,000 rows in CI
// (about 20 MiB of changes, twenty times the spill threshold);
// SLUICE_BIGTX_ROWS=2000000 runs it at the size the issue named.
func bigTxRows(t *testing.T) int {
	if s := os.Getenv("SLUICE_BIGTX_ROWS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	return 300_000
}

// A large transaction (bigTxRows), which the server streams while it is still
// in progress (pgoutput streaming, a small logical_decoding_work_mem), is
// spilled to disk past the memory threshold and applied only at its
// commit; a rolled-back one of the same kind leaves no trace in the sink
// and no spill file behind.
func TestLargeStreamedTransactionSpillsAndRollbackLeavesNoTrace(t *testing.T) {
	n := bigTxRows(t)
	pg := harness.PostgresT(t, harness.PostgresOptions{Settings: map[string]string{"logical_decoding_work_mem": "64kB"}})
	ctx := context.Background()
	if err := pg.CreateDatabase(ctx, "big"); err != nil {
		t.Fatal(err)
	}
	if err := pg.Exec(ctx, "big", `CREATE TABLE big (id bigint PRIMARY KEY, v integer, note text)`,
		`INSERT INTO big VALUES (-1, 0, 'seed')`); err != nil {
		t.Fatal(err)
	}
	dsn := pg.DSN("big")
	dir := t.TempDir()
	cfg := filepath.Join(dir, "pg.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf(`pipeline: big
source:
  postgres:
    dsn: %s
    tables: [public.big]
    streaming: true
    spill_threshold: 1MiB
sinks:
  - duckdb: {path: ./sink.duckdb}
offsets: {dir: ./offsets}
runtime: {checkpoint_interval: 200ms}
`, dsn)), 0o644)
	d := startDaemon(t, cfg)
	d.waitAddr(t, time.Minute)
	waitFile(t, filepath.Join(dir, "offsets", "checkpoint.json"), d)

	// The rolled-back transaction first: the server streams part of it
	// before the abort, so sluice buffers (and spills) and must drop it.
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO big SELECT g, g % 7, 'rolled back' FROM generate_series(1, $1) g`, n/4); err != nil {
		t.Fatal(err)
	}
	spill := filepath.Join(dir, "offsets", "spill")
	waitSpill(t, spill, d) // streamed and spilled while still open
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	// The committed one.
	if _, err := conn.Exec(ctx, `INSERT INTO big SELECT g, g % 7, 'committed' FROM generate_series(1, $1) g`, n); err != nil {
		t.Fatal(err)
	}
	mark := commitMarkOn(t, ctx, dsn, `UPDATE big SET v = 1 WHERE id = -1`)
	waitSlotConfirmed(t, ctx, dsn, "sluice_big", mark, d)
	d.signal(syscall.SIGTERM)
	if code := d.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("exit %d:\n%s", code, d.logs())
	}
	if left, _ := os.ReadDir(spill); len(left) != 0 {
		t.Fatalf("spill files left behind: %v", left)
	}
	if got := assertSinkEqualsSource(t, ctx, dsn, "big", filepath.Join(dir, "sink.duckdb"), "public", "big"); got != n+1 {
		t.Fatalf("%d rows compared, want %d", got, n+1)
	}
	expectVerifyEqual(t, cfg)
}

// waitSpill polls until a spill file exists in dir.
func waitSpill(t *testing.T, dir string, d *daemonProc) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if entries, _ := os.ReadDir(dir); len(entries) > 0 {
			return
		}
		select {
		case <-d.done:
			t.Fatalf("daemon exited (%d):\n%s", d.exitCode(), d.logs())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no spill file in %s:\n%s", dir, d.logs())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
