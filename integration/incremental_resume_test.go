package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-cdc/sluice/integration/harness"
	"github.com/sluice-cdc/sluice/pipeline"
)

// snapshotRowsDone sums the rows the checkpoint at path shows read by the
// snapshots in progress (0 when none is).
func snapshotRowsDone(t *testing.T, path string) int64 {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var env struct {
		Checkpoint pipeline.Checkpoint `json:"checkpoint"`
	}
	var pos struct {
		Snapshot struct {
			Tables []struct {
				Rows int64 `json:"rows"`
			} `json:"tables"`
		} `json:"snapshot"`
	}
	if err := json.Unmarshal(raw, &env); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(env.Checkpoint.Position, &pos); err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, tb := range pos.Snapshot.Tables {
		n += tb.Rows
	}
	return n
}

// A large table read by the incremental engine while a writer runs 2,000
// transactions a second, killed -9 twice mid-snapshot: each restart resumes
// from the chunk cursors of the last checkpoint, so what it reads again is
// only what had not become durable (the rows emitted after the last
// checkpoint, bounded by the windows in flight and the checkpoint
// interval), never the table again. SLUICE_SNAPSHOT_ROWS sets the size:
// 150,000 rows by default (CI); the 5,000,000 with
// SLUICE_SNAPSHOT_ROWS=5000000.
func TestIncrementalSnapshotResumesFromTheLastDurableChunk(t *testing.T) {
	rows := int64(150_000)
	if s := os.Getenv("SLUICE_SNAPSHOT_ROWS"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 10_000 {
			t.Fatalf("SLUICE_SNAPSHOT_ROWS=%q: want a number of at least 10000", s)
		}
		rows = n
	}
	pg := harness.PostgresT(t)
	ctx := context.Background()
	if err := pg.CreateDatabase(ctx, "big"); err != nil {
		t.Fatal(err)
	}
	if err := pg.Exec(ctx, "big",
		"CREATE TABLE items (id bigint PRIMARY KEY, v text NOT NULL, n int NOT NULL)",
		fmt.Sprintf("INSERT INTO items SELECT g, md5(g::text), 0 FROM generate_series(1, %d) g", rows),
		"CREATE TABLE events (a int, b text, payload text, n bigint, PRIMARY KEY (a, b))",
		"VACUUM ANALYZE items"); err != nil {
		t.Fatal(err)
	}
	dsn := pg.DSN("big")
	dir := t.TempDir()
	cfg := filepath.Join(dir, "big.yaml")
	const maxChunk, inFlight = 4096, 10_000
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`pipeline: big
source:
  postgres:
    dsn: %s
    tables: [public.items, public.events]
    heartbeat_interval: 1s
    snapshot: {mode: incremental, parallel: 2, chunk_time: 200ms, max_chunk_rows: %d}
sinks:
  - duckdb: {path: ./sink.duckdb}
offsets: {dir: ./offsets}
runtime: {checkpoint_interval: 100ms, max_in_flight_records: %d}
`, dsn, maxChunk, inFlight)), 0o644); err != nil {
		t.Fatal(err)
	}
	checkpoint := filepath.Join(dir, "offsets", "checkpoint.json")

	// 2,000 transactions a second: updates anywhere in the table, inserts
	// above it, deletes.
	wctx, stopWork := context.WithCancel(ctx)
	defer stopWork()
	var writes atomic.Int64
	workErr := make(chan error, 1)
	go func() {
		conn, err := pgx.Connect(wctx, dsn)
		if err != nil {
			workErr <- err
			return
		}
		defer conn.Close(context.Background())
		rng := rand.New(rand.NewPCG(5, 6))
		tick := time.NewTicker(time.Second / 2000)
		defer tick.Stop()
		next := rows
		for {
			select {
			case <-wctx.Done():
				workErr <- nil
				return
			case <-tick.C:
			}
			id := 1 + rng.Int64N(rows)
			var q string
			switch rng.IntN(10) {
			case 0:
				next++
				q = fmt.Sprintf("INSERT INTO items VALUES (%d, 'new', 1)", next)
			case 1:
				q = fmt.Sprintf("DELETE FROM items WHERE id = %d", id)
			default:
				q = fmt.Sprintf("UPDATE items SET n = n + 1 WHERE id = %d", id)
			}
			if _, err := conn.Exec(wctx, q); err != nil {
				if wctx.Err() != nil {
					workErr <- nil
				} else {
					workErr <- err
				}
				return
			}
			writes.Add(1)
		}
	}()

	var durable int64 // rows the last checkpoint shows read
	for kill := 1; kill <= 2; kill++ {
		d := startDaemon(t, cfg)
		base := "http://" + d.waitAddr(t, 2*time.Minute)
		// Kill once this run has made a third of the table durable.
		target := durable + rows/3
		waitUntil(t, d, 5*time.Minute, fmt.Sprintf("%d rows durable", target), func() bool {
			_, err := os.Stat(checkpoint)
			return err == nil && snapshotRowsDone(t, checkpoint) >= target
		})
		emitted := int64(metricSum(t, base, "sluice_snapshot_rows_total"))
		d.signal(syscall.SIGKILL)
		<-d.done
		now := snapshotRowsDone(t, checkpoint)
		if _, pending := snapshotPending(t, checkpoint); len(pending) == 0 || now == 0 {
			t.Fatalf("kill %d landed after the snapshot (%d rows durable, pending %v): make the table larger", kill, now, pending)
		}
		// What this run emitted beyond what became durable is read again
		// by the next; the rest is never read twice.
		again := durable + emitted - now
		// Not durable at a kill: the records in flight between the engine
		// and the sink (max_in_flight_records) and the chunks of the two
		// windows waiting for their high watermark, plus one more chunk
		// being handed over.
		bound := int64(inFlight + 3*maxChunk)
		t.Logf("kill %d: %d rows durable (this run emitted at least %d), %d to read again (bound %d)", kill, now, emitted, again, bound)
		if again > bound {
			t.Fatalf("kill %d: %d rows emitted but not durable would be read again, more than the %d in flight", kill, again, bound)
		}
		if now <= durable {
			t.Fatalf("kill %d: the run made nothing durable (%d then %d)", kill, durable, now)
		}
		durable = now
	}

	// Final run: the snapshot finishes, the writer stops, the checkpoint
	// confirms a last transaction; DuckDB then equals the table.
	d := startDaemon(t, cfg)
	d.waitAddr(t, 2*time.Minute)
	// The rest of the table, with the writer's backlog in the stream: the
	// chunks wait for their high watermarks to come through it.
	waitUntil(t, d, 5*time.Minute+time.Duration(rows/2000)*time.Second, "the snapshot to finish", func() bool { return loadedAll(t, checkpoint) })
	stopWork()
	if err := <-workErr; err != nil {
		t.Fatalf("writer: %v", err)
	}
	mark := commitMarkOn(t, ctx, dsn, `INSERT INTO events VALUES (-1, 'mark', 'mark', 0) ON CONFLICT (a, b) DO UPDATE SET n = events.n + 1`)
	waitSlotConfirmed(t, ctx, dsn, "sluice_big", mark, d)
	d.signal(syscall.SIGTERM)
	if code := d.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("final run exit %d:\n%s", code, d.logs())
	}
	n := assertSinkEqualsSource(t, ctx, dsn, "big", filepath.Join(dir, "sink.duckdb"), "public", "items")
	expectVerifyEqual(t, cfg)
	t.Logf("%d rows equal after 2 kills mid-snapshot and %d writer transactions", n, writes.Load())
}
