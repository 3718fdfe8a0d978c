package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/sluice-cdc/sluice/integration/harness"
)

// bounceWorkload writes small transactions to kv until ctx ends, paced at
// about one per millisecond.
func bounceWorkload(ctx context.Context, dsn string, rows int, writes *atomic.Int64) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	rng := rand.New(rand.NewPCG(5, 8))
	next := int64(rows)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		id := 1 + rng.Int64N(next)
		var err error
		switch n := rng.IntN(20); {
		case n < 11:
			_, err = conn.Exec(ctx, `UPDATE kv SET n = n + 1, s = 'u' || (n + 1) WHERE id = $1`, id)
		case n < 14:
			next++
			_, err = conn.Exec(ctx, `INSERT INTO kv VALUES ($1, 0, 'new')`, next)
		case n < 16:
			_, err = conn.Exec(ctx, `DELETE FROM kv WHERE id = $1`, id)
		case n < 17:
			// Re-insert a key that may have been deleted.
			_, err = conn.Exec(ctx, `INSERT INTO kv VALUES ($1, 100, 'again') ON CONFLICT (id) DO UPDATE SET n = kv.n + 100`, id)
		default:
			// Several changes to a few keys in one transaction.
			_, err = conn.Exec(ctx, `UPDATE kv SET n = n + 1, s = s || '+' WHERE id BETWEEN $1 AND $1 + 3`, id)
			if err == nil {
				_, err = conn.Exec(ctx, `UPDATE kv SET n = n * 2 WHERE id = $1`, id)
			}
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		writes.Add(1)
	}
}

// The broker dies (SIGKILL) under a write workload and stays down for 20
// s while PostgreSQL keeps changing: the slot's confirmed position never
// passes what was written before the kill (nothing unacknowledged is
// confirmed), the binary keeps retrying instead of failing, and once the
// broker is back on the same directory and ports the pipeline catches up:
// folded by key and version, Kafka equals PostgreSQL, and within a key no
// change ever arrives after a newer one (replays of a retried batch are
// duplicates, allowed).
func TestKafkaBrokerRestartMidStream(t *testing.T) {
	// The broker is restarted: this test has its own.
	pg := harness.PostgresT(t)
	k, reg := privateKafka(t)
	ctx := context.Background()
	if err := pg.CreateDatabase(ctx, "kbounce"); err != nil {
		t.Fatal(err)
	}
	const rows = 2000
	if err := pg.Exec(ctx, "kbounce",
		`CREATE TABLE kv (id bigint PRIMARY KEY, n bigint NOT NULL, s text)`,
		fmt.Sprintf(`INSERT INTO kv SELECT g, 0, 's' || g FROM generate_series(1, %d) g`, rows)); err != nil {
		t.Fatal(err)
	}
	dsn := pg.DSN("kbounce")
	dir := t.TempDir()
	offsets := filepath.Join(dir, "offsets")
	cfg := writeConfig(t, dir, fmt.Sprintf(`pipeline: kbounce
source:
  postgres:
    dsn: %s
    tables: [public.kv]
    heartbeat_interval: 1s
    status_interval: 1s
sinks:
  - kafka:
      brokers: [%s]
      create_topics: {partitions: 3, compact: true}
      producer: {delivery_timeout: 5s}
      registry: {url: %s}
offsets: {dir: %s}
runtime:
  checkpoint_interval: 100ms
  retry: {initial: 100ms, max: 2s}
`, dsn, k.Addr(), reg.URL(), offsets))
	d := startDaemon(t, cfg)
	d.waitAddr(t, time.Minute)
	waitFile(t, filepath.Join(offsets, "checkpoint.json"), d)

	wctx, stopWork := context.WithCancel(ctx)
	defer stopWork()
	var writes atomic.Int64
	workErr := make(chan error, 1)
	go func() { workErr <- bounceWorkload(wctx, dsn, rows, &writes) }()

	// Streaming under load: a transaction committed now is confirmed.
	mark := commitMarkOn(t, ctx, dsn, `UPDATE kv SET s = 'before kill' WHERE id = 1`)
	waitSlotConfirmed(t, ctx, dsn, "sluice_kbounce", mark, d)

	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	k.Kill()
	// Everything the broker acknowledged was committed before this
	// point, so the slot may be confirmed up to here and no further.
	var killLSN string
	if err := conn.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&killLSN); err != nil {
		t.Fatal(err)
	}
	atKill := slotConfirmed(t, ctx, conn, "sluice_kbounce")
	writesAtKill := writes.Load()
	const outage = 20 * time.Second
	end := time.Now().Add(outage)
	polls := 0
	for time.Now().Before(end) {
		select {
		case <-d.done:
			t.Fatalf("daemon exited (%d) while the broker was down:\n%s", d.exitCode(), d.logs())
		case <-time.After(2 * time.Second):
		}
		c := slotConfirmed(t, ctx, conn, "sluice_kbounce")
		polls++
		if !lsnLE(t, ctx, conn, c, killLSN) {
			t.Fatalf("broker down: slot confirmed %s, past %s (WAL position at the kill; confirmed then: %s)", c, killLSN, atKill)
		}
	}
	during := writes.Load() - writesAtKill
	last := slotConfirmed(t, ctx, conn, "sluice_kbounce")
	t.Logf("broker down %s: %d workload transactions; slot confirmed %s at the kill, %s at the end (bound %s, %d polls)",
		outage, during, atKill, last, killLSN, polls)
	if during < 100 {
		t.Errorf("only %d workload transactions while the broker was down", during)
	}

	rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	restart := time.Now()
	if err := k.Restart(rctx); err != nil {
		t.Fatalf("restart broker: %v\n%s", err, k.Log())
	}
	t.Logf("broker back in %s", time.Since(restart).Round(time.Millisecond))
	// The pipeline catches up while the workload goes on, then drains.
	mark = commitMarkOn(t, ctx, dsn, `UPDATE kv SET s = 'after restart' WHERE id = 2`)
	waitSlotConfirmed(t, ctx, dsn, "sluice_kbounce", mark, d)
	stopWork()
	if err := <-workErr; err != nil {
		t.Fatalf("workload: %v", err)
	}
	mark = commitMarkOn(t, ctx, dsn, `UPDATE kv SET s = 'final' WHERE id = 3`)
	waitSlotConfirmed(t, ctx, dsn, "sluice_kbounce", mark, d)
	d.signal(syscall.SIGTERM)
	if code := d.wait(t, time.Minute); code != 0 {
		t.Fatalf("exit %d:\n%s", code, d.logs())
	}

	table, want := pgRows(t, ctx, dsn, "kbounce", "public", "kv")
	dec := newAvroDecoder(t, newRegistryHTTP(reg), "kbounce", table)
	recs := readTopic(t, k, "kbounce.public.kv")
	events := dec.decode(t, recs)
	replayed := checkKeyOrder(t, events)
	diffState(t, table, want, fold(events), "kv")
	expectVerifyEqual(t, cfg)
	t.Logf("%d workload transactions, %d records, %d rows equal; %d keys saw replayed (duplicate) changes",
		writes.Load(), len(recs), len(want), replayed)
}
