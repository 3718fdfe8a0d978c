package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-cdc/sluice/integration/harness"
	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/sinks/bleve"
	"github.com/sluice-cdc/sluice/sinks/search"
)

// Issue #16, scenario 4: a re-snapshot below what the sinks hold. A
// pipeline streams cluster A into every sink kind (PostgreSQL, DuckDB,
// Redis, Bleve, OpenSearch, Elasticsearch, exactly-once Kafka) after A's
// WAL has grown; then the source is restored into a new cluster B, whose
// LSNs start low again, with other contents, and the pipeline is rerun
// with --reset-offsets as the error for a foreign cluster advises, under
// concurrent writes on B. Every sink must end equal to B. Without a
// generation above what the sinks recorded, B's truncate barriers, rows
// and changes sort below A's: the sinks keep A's rows (and the
// exactly-once sink drops B's changes as already written). Then a row
// changed behind sluice's back in OpenSearch, Elasticsearch and Bleve is
// found by sluice verify with its key and column (the verify test does
// the same for PostgreSQL, Redis and DuckDB).
func TestResnapshotFromARestoredClusterLandsAboveWhatSinksHold(t *testing.T) {
	pgA, k, reg := kafkaStack(t)
	osn, es := sharedSearch(t, harness.OpenSearch), sharedSearch(t, harness.Elasticsearch)
	pgB := harness.PostgresT(t)
	rd := harness.RedisT(t)
	ctx := context.Background()
	for _, db := range []string{"rsrc", "rdst"} {
		if err := pgA.CreateDatabase(ctx, db); err != nil {
			t.Fatal(err)
		}
	}
	if err := pgB.CreateDatabase(ctx, "rsrc"); err != nil {
		t.Fatal(err)
	}
	const schema = `CREATE TABLE restored_items (id int PRIMARY KEY, v text NOT NULL, n int NOT NULL)`
	// Cluster A: 300 rows, then WAL grown past what B will reach.
	if err := pgA.Exec(ctx, "rsrc", schema, `INSERT INTO restored_items SELECT g, 'a' || g, g FROM generate_series(1, 300) g`); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if err := pgA.Exec(ctx, "rsrc", `UPDATE restored_items SET n = n + 1 WHERE id % 7 = 0`, `SELECT pg_switch_wal()`); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	config := func(srcDSN string) string {
		return writeConfig(t, dir, fmt.Sprintf(`pipeline: rs
source:
  postgres:
    dsn: %s
    tables: [public.restored_items]
    heartbeat_interval: 200ms
sinks:
  - postgres: {name: pg, dsn: "%s"}
  - duckdb: {name: duck, path: ./sink.duckdb}
  - redis: {name: cache, addr: "%s"}
  - bleve: {name: local, path: ./sink.bleve}
  - opensearch: {name: os_rs, urls: ["%s"], index_template: "rs.{table}"}
  - elasticsearch: {name: es_rs, urls: ["%s"], index_template: "rs.{table}"}
  - kafka:
      name: events
      brokers: [%s]
      exactly_once: true
      create_topics: {partitions: 2, compact: true}
      producer: {delivery_timeout: 10s}
      registry: {url: %s}
offsets: {dir: ./offsets}
runtime: {checkpoint_interval: 100ms}
`, srcDSN, pgA.DSN("rdst"), rd.Addr(), osn.URL, es.URL, k.Addr(), reg.URL()))
	}
	stop := func(d *daemonProc, dsn string) {
		t.Helper()
		mark := commitMarkOn(t, ctx, dsn, `UPDATE restored_items SET n = n WHERE id = 1`)
		waitSlotConfirmed(t, ctx, dsn, "sluice_rs", mark, d)
		d.signal(syscall.SIGTERM)
		if code := d.wait(t, 2*time.Minute); code != 0 {
			t.Fatalf("exit %d:\n%s", code, d.logs())
		}
	}

	cfg := config(pgA.DSN("rsrc"))
	d := startDaemon(t, cfg)
	d.waitAddr(t, 2*time.Minute)
	waitFile(t, filepath.Join(dir, "offsets", "checkpoint.json"), d)
	// Streamed changes at A's high LSNs.
	if err := pgA.Exec(ctx, "rsrc", `UPDATE restored_items SET v = v || '+' WHERE id <= 50`); err != nil {
		t.Fatal(err)
	}
	stop(d, pgA.DSN("rsrc"))
	highA := currentLSN(t, ctx, pgA.DSN("rsrc"))
	expectVerifyEqual(t, cfg, "--sink", "pg")

	// Cluster B: an older backup restored — rows 251..300 never existed,
	// others differ — and written to while the new load runs.
	if err := pgB.Exec(ctx, "rsrc", schema, `INSERT INTO restored_items SELECT g, 'b' || g, -g FROM generate_series(1, 250) g`); err != nil {
		t.Fatal(err)
	}
	wctx, stopWrites := context.WithCancel(ctx)
	var writes atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		c, err := pgx.Connect(ctx, pgB.DSN("rsrc"))
		if err != nil {
			t.Error(err)
			return
		}
		defer c.Close(ctx)
		rng := rand.New(rand.NewPCG(16, 4))
		for next := 1000; wctx.Err() == nil; {
			id := 1 + rng.IntN(250)
			var err error
			switch rng.IntN(6) {
			case 0:
				_, err = c.Exec(ctx, `DELETE FROM restored_items WHERE id = $1`, id)
			case 1:
				_, err = c.Exec(ctx, `INSERT INTO restored_items VALUES ($1, 'new', 0)`, next)
				next++
			default:
				_, err = c.Exec(ctx, `UPDATE restored_items SET v = v || '.', n = n + 1 WHERE id = $1`, id)
			}
			if err != nil && wctx.Err() == nil {
				t.Error(err)
				return
			}
			writes.Add(1)
			time.Sleep(2 * time.Millisecond) // a steady load, not a saturating one
		}
	}()
	cfg = config(pgB.DSN("rsrc"))
	d = startDaemon(t, cfg, "--reset-offsets")
	d.waitAddr(t, 2*time.Minute)
	waitFile(t, filepath.Join(dir, "offsets", "checkpoint.json"), d)
	for writes.Load() < 300 {
		select {
		case <-d.done:
			t.Fatalf("daemon exited (%d):\n%s", d.exitCode(), d.logs())
		case <-time.After(10 * time.Millisecond): // the writer's pace
		}
	}
	stopWrites()
	wg.Wait()
	lowB := currentLSN(t, ctx, pgB.DSN("rsrc"))
	if !lsnBelow(t, ctx, pgB.DSN("rsrc"), lowB, highA) {
		t.Fatalf("cluster B's WAL (%s) is not below A's (%s): the test would not test anything", lowB, highA)
	}
	stop(d, pgB.DSN("rsrc"))
	if !strings.Contains(d.logs(), `"generation":1`) {
		t.Errorf("the rerun did not log generation 1:\n%s", d.logs())
	}

	for _, sink := range []string{"pg", "duck", "cache", "local", "os_rs", "es_rs"} {
		expectVerifyEqual(t, cfg, "--sink", sink)
	}
	table, want := pgRows(t, ctx, pgB.DSN("rsrc"), "rsrc", "public", "restored_items")
	topic := "rs.public.restored_items"
	evs := newAvroDecoder(t, newRegistryHTTP(reg), "rs", table).decode(t, eoReadTopic(t, k, topic, kgo.ReadCommitted()))
	// A compacted topic holds no keyless snapshot barrier (README): keys
	// only A had stay until a tombstone comes. Every one of them must be
	// A's (generation 0); every key B has must hold B's row.
	got, newest := fold(evs), map[string]uint64{}
	for _, ev := range evs {
		newest[ev.key] = max(newest[ev.key], ev.version[0])
	}
	stale := 0
	for key := range got {
		if _, ok := want[key]; !ok {
			if newest[key] != 0 {
				t.Errorf("%s: key %s is not in cluster B but holds a row of generation %d", topic, key, newest[key])
			}
			delete(got, key)
			stale++
		}
	}
	diffState(t, table, want, got, topic)
	t.Logf("A's WAL at %s, B's at %s; %d concurrent writes on B; %d rows; %d keys only A had left in the compacted topic",
		highA, lowB, writes.Load(), len(want), stale)

	// A row changed behind sluice's back in the sinks the verify test
	// does not tamper with (OpenSearch, Elasticsearch, Bleve): verify
	// names the key and the column.
	var key string
	for k := range want {
		if key == "" || k < key {
			key = k
		}
	}
	row := append([]any(nil), want[key]...)
	orig := row[1]
	row[1] = "tampered"
	behind := pipeline.Record{Op: pipeline.OpUpdate, Table: table, After: row, Version: pipeline.Version{1, 0xFFFFFFFF, 0, 2}}
	for _, c := range []struct {
		name string
		sink pipeline.Sink
	}{
		{"os_rs", search.New(search.Options{Name: "os_rs", Kind: "opensearch", URLs: []string{osn.URL}, IndexTemplate: "rs.{table}"}, nil)},
		{"es_rs", search.New(search.Options{Name: "es_rs", Kind: "elasticsearch", URLs: []string{es.URL}, IndexTemplate: "rs.{table}"}, nil)},
		{"local", bleve.New(bleve.Options{Name: "local", Path: filepath.Join(dir, "sink.bleve")}, nil)},
	} {
		if err := c.sink.Open(ctx); err != nil {
			t.Fatal(err)
		}
		if err := c.sink.Write(ctx, []pipeline.Record{behind}); err != nil {
			t.Fatal(err)
		}
		if err := c.sink.Close(ctx); err != nil {
			t.Fatal(err)
		}
		code, out := runVerify(t, cfg, "--sink", c.name, "--settle", "1s") // stopped: nothing to wait for
		if wantDiff := fmt.Sprintf(`key %s column v: source string:"%s", sink string:"tampered"`, key, orig); code != 1 || !strings.Contains(out, wantDiff) {
			t.Errorf("verify after tampering with %s: exit %d, want 1 and %q\n%s", c.name, code, wantDiff, out)
		}
	}
}

// currentLSN is the server's current WAL write position.
func currentLSN(t *testing.T, ctx context.Context, dsn string) string {
	t.Helper()
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	var lsn string
	if err := c.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&lsn); err != nil {
		t.Fatal(err)
	}
	return lsn
}

// lsnBelow reports a < b as pg_lsn values.
func lsnBelow(t *testing.T, ctx context.Context, dsn, a, b string) bool {
	t.Helper()
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	var below bool
	if err := c.QueryRow(ctx, `SELECT $1::pg_lsn < $2::pg_lsn`, a, b).Scan(&below); err != nil {
		t.Fatal(err)
	}
	return below
}
