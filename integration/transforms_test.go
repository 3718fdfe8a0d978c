package integration

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-cdc/sluice/integration/harness"
)

// Postgres → filter + project + mask + compute + route → two search
// indexes (Bleve) and DuckDB, under concurrent writes that flip rows in
// and out of the filter, between the routes, change keys and delete,
// with kill -9 at random moments. In the end `sluice verify` finds every
// sink equal to the source's rows as they leave the transforms, and, read
// directly, each index holds exactly the rows its route sends it, DuckDB
// has the projected, masked and computed columns, and nothing went to the
// dead-letter queue.
func TestTransformsIntoTwoIndexesAndDuckDB(t *testing.T) {
	pg := harness.PostgresT(t)
	ctx := context.Background()
	if err := pg.CreateDatabase(ctx, "crm"); err != nil {
		t.Fatal(err)
	}
	if err := pg.Exec(ctx, "crm",
		`CREATE TABLE customers (id bigint PRIMARY KEY, name text NOT NULL, email text, phone text, country text,
			vip boolean NOT NULL DEFAULT false, balance numeric(20,2), notes text)`,
		`INSERT INTO customers SELECT g, 'customer ' || g, 'user' || g || '@example.com', '+49 30 ' || (1000000 + g),
			(ARRAY['DE','FR','XX',NULL])[1 + g % 4], g % 5 = 0, CASE WHEN g % 7 = 0 THEN NULL ELSE g * 1.25 END, 'internal ' || g
			FROM generate_series(1, 3000) g`,
	); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SLUICE_TEST_MASK_KEY", "a-test-key-of-no-value")
	dir := t.TempDir()
	text := fmt.Sprintf(`pipeline: shaped
source:
  postgres:
    dsn: %s
    tables: [public.customers]
transforms:
  - filter:
      tables: [public.customers]
      where: after.country != "XX"
  - project: {drop: [notes]}
  - mask: {columns: [email], with: email}
  - mask: {columns: [phone], with: hmac, secret_env: SLUICE_TEST_MASK_KEY}
  - compute:
      column: balance_cents
      type: decimal(24,0)
      expr: (after.balance ?? decimal("0")) * 100
  - route:
      rules: [{when: after.vip, sinks: [search_vip, warehouse]}]
      otherwise: [search_main, warehouse]
sinks:
  - bleve: {name: search_main, path: ./main.bleve}
  - bleve: {name: search_vip, path: ./vip.bleve}
  - duckdb: {name: warehouse, path: ./warehouse.duckdb}
offsets: {dir: ./offsets}
runtime: {checkpoint_interval: 50ms}
`, pg.DSN("crm"))
	cfg := writeConfig(t, dir, text)

	// The initial load first, so that the changes below reach the sinks
	// through the stream (a load redone after a kill would clear what
	// earlier runs wrote).
	checkpoint := filepath.Join(dir, "offsets", "checkpoint.json")
	d := startDaemon(t, cfg)
	d.waitAddr(t, time.Minute)
	waitUntil(t, d, 2*time.Minute, "the initial load", func() bool { return loadedAll(t, checkpoint) })

	// The writer: small transactions of random changes, about 500 a
	// second, until stopped (one writer at a time).
	var writes atomic.Int64
	next := int64(10000)
	startWriter := func() (stop func()) {
		var halt atomic.Bool
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); writeCustomers(t, ctx, pg.DSN("crm"), &halt, &writes, &next) }()
		return func() { halt.Store(true); wg.Wait() }
	}
	stopWriter := startWriter()
	defer func() { stopWriter() }()

	// kill -9 at random moments of the stream, each after the run made
	// progress durable.
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 21))
	kills := harness.Trials(3)
	var logs strings.Builder
	d = killAfterCheckpoints(t, d, cfg, checkpoint, kills, 800*time.Millisecond, rng, func(i int, d *daemonProc) {
		logs.WriteString(d.logs())
		t.Logf("kill %d of %d after %d writes", i+1, kills, writes.Load())
	})
	// The last run streams a while under the writes before they stop.
	waitCheckpoints(t, d, checkpoint, 2)
	stopWriter()
	stopDrained(t, ctx, d, pg.DSN("crm"), "sluice_shaped", `UPDATE customers SET name = 'last' WHERE id = (SELECT min(id) FROM customers)`, &logs)

	expectVerifyEqual(t, cfg)

	// Read directly: each index holds the rows its route sends it.
	excluded := "'XX'"
	count := func(where string) int {
		var n int
		if err := pgxQueryRow(ctx, pg.DSN("crm"), `SELECT count(*) FROM customers WHERE (country IS NULL OR country NOT IN (`+excluded+`)) AND `+where, &n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	indexes := func() (vip, plain int) {
		t.Helper()
		vip, plain = count("vip"), count("NOT vip")
		if got := runSearch(t, cfg, 0, "--sink", "search_vip", "--table", "public.customers", "--size", "1", "*").Total; int(got) != vip || vip == 0 {
			t.Errorf("search_vip holds %d rows, the source %d VIP rows outside %s", got, vip, excluded)
		}
		if got := runSearch(t, cfg, 0, "--sink", "search_main", "--table", "public.customers", "--size", "1", "*").Total; int(got) != plain || plain == 0 {
			t.Errorf("search_main holds %d rows, the source %d other rows outside %s", got, plain, excluded)
		}
		return vip, plain
	}
	vip, plain := indexes()
	db, err := sql.Open("duckdb", filepath.Join(dir, "warehouse.duckdb"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var live, unmasked, wrongCents, notes int
	if err := db.QueryRow(`SELECT count(*), count(*) FILTER (WHERE email NOT LIKE '_***@%'),
		count(*) FILTER (WHERE balance_cents IS DISTINCT FROM coalesce(balance, 0) * 100)
		FROM main.public_customers WHERE NOT _sluice_deleted`).Scan(&live, &unmasked, &wrongCents); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRow(`SELECT count(*) FROM information_schema.columns WHERE table_name = 'public_customers' AND column_name = 'notes'`).Scan(&notes); err != nil {
		t.Fatal(err)
	}
	if live != vip+plain || unmasked != 0 || wrongCents != 0 || notes != 0 {
		t.Fatalf("warehouse: %d live rows (want %d), %d unmasked emails, %d wrong balance_cents, notes column %d", live, vip+plain, unmasked, wrongCents, notes)
	}
	t.Logf("%d writes, %d kills; %d VIP rows, %d others", writes.Load(), kills, vip, plain)

	// The filter changes to leave FR rows out too. A re-snapshot of the
	// table reads every row again, under the writer (rows flip in and out
	// of the filter inside the chunks' windows): the rows the new filter
	// excludes leave every sink (pipeline.Record.Replaces, at the read's
	// version, below the changes after it: Invariant 4), so verify finds
	// the sinks equal to the new rules and each index holds what they
	// send it.
	db.Close() // DuckDB's file lock: the daemon opens it next
	cfg = writeConfig(t, dir, strings.Replace(text, `where: after.country != "XX"`, `where: after.country != "XX" && after.country != "FR"`, 1))
	excluded = "'XX', 'FR'"
	d = startDaemon(t, cfg)
	addr := d.waitAddr(t, time.Minute)
	waitUntil(t, d, time.Minute, "ready", func() bool { return getJSON(t, "http://"+addr+"/readyz", nil) == 200 })
	cmd := exec.Command(sluiceBinary(t), "snapshot", "-c", cfg, "--addr", addr, "--table", "public.customers")
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "snapshot of public.customers queued") {
		t.Fatalf("sluice snapshot: %v\n%s", err, out)
	}
	stopWriter = startWriter()
	waitSnapshotDone(t, d, addr, "public.customers", "")
	stopWriter()
	stopDrained(t, ctx, d, pg.DSN("crm"), "sluice_shaped", `UPDATE customers SET name = 'last again' WHERE id = (SELECT min(id) FROM customers)`, &logs)
	expectVerifyEqual(t, cfg)
	vip, plain = indexes()
	t.Logf("after the filter change and a re-snapshot under writes (%d writes in all): %d VIP rows, %d others", writes.Load(), vip, plain)
}

// writeCustomers is the transforms test's writer: small transactions of
// random changes to customers, about 500 a second, until halt; next is
// the highest id it inserted or moved a row to.
func writeCustomers(t *testing.T, ctx context.Context, dsn string, halt *atomic.Bool, writes *atomic.Int64, next *int64) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Error(err)
		return
	}
	defer conn.Close(ctx)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 20))
	pace := time.NewTicker(2 * time.Millisecond)
	defer pace.Stop()
	for !halt.Load() {
		<-pace.C
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Error(err)
			return
		}
		for range 1 + rng.IntN(4) {
			id := 1 + rng.Int64N(3000)
			var q string
			switch rng.IntN(8) {
			case 0:
				q = fmt.Sprintf(`UPDATE customers SET vip = NOT vip WHERE id = %d`, id)
			case 1:
				q = fmt.Sprintf(`UPDATE customers SET country = CASE WHEN country = 'XX' THEN 'DE' ELSE 'XX' END WHERE id = %d`, id)
			case 2:
				q = fmt.Sprintf(`UPDATE customers SET email = 'new%d@example.org', balance = balance + 0.25, phone = NULL WHERE id = %d`, rng.IntN(1000), id)
			case 3:
				q = fmt.Sprintf(`DELETE FROM customers WHERE id = %d`, id)
			case 4:
				*next++
				q = fmt.Sprintf(`INSERT INTO customers VALUES (%d, 'new', NULL, '123', 'FR', %t, 99999999999999999.99, 'x')`, *next, rng.IntN(2) == 0)
			case 5:
				*next++
				q = fmt.Sprintf(`UPDATE customers SET id = %d WHERE id = %d`, *next, id) // a key change
			case 6:
				q = fmt.Sprintf(`UPDATE customers SET notes = repeat('n', 3000), name = 'renamed %d' WHERE id = %d`, id, id)
			default:
				q = fmt.Sprintf(`UPDATE customers SET vip = true, country = 'DE' WHERE id = %d`, id)
			}
			if _, err := tx.Exec(ctx, q); err != nil {
				t.Error(err)
				_ = tx.Rollback(ctx)
				return
			}
		}
		if err := tx.Commit(ctx); err != nil {
			t.Error(err)
			return
		}
		writes.Add(1)
	}
}

// stopDrained commits markSQL on dsn, waits until the pipeline's slot
// confirmed it (everything before it is in the sinks), stops the daemon
// with SIGTERM and adds its logs to logs (the earlier runs'); a non-zero
// exit or a record sent to the dead-letter queue in any run fails the
// test.
func stopDrained(t *testing.T, ctx context.Context, d *daemonProc, dsn, slot, markSQL string, logs *strings.Builder) {
	t.Helper()
	mark := commitMarkOn(t, ctx, dsn, markSQL)
	waitSlotConfirmed(t, ctx, dsn, slot, mark, d)
	d.signal(syscall.SIGTERM)
	if code := d.wait(t, time.Minute); code != 0 {
		t.Fatalf("exit %d:\n%s", code, d.logs())
	}
	logs.WriteString(d.logs())
	if strings.Contains(logs.String(), "record sent to the dead-letter queue") {
		t.Fatalf("a record went to the dead-letter queue:\n%s", logs.String())
	}
}

// killAfterCheckpoints kill -9s the daemon kills times, each at a random
// moment up to 200 ms + spread after its checkpoint file changed, and
// starts it again; after each kill it calls each with the killed daemon.
// It returns the daemon running last.
func killAfterCheckpoints(t *testing.T, d *daemonProc, cfg, checkpoint string, kills int, spread time.Duration, rng *rand.Rand,
	each func(i int, d *daemonProc)) *daemonProc {
	t.Helper()
	for i := range kills {
		waitCheckpoints(t, d, checkpoint, 1)
		time.Sleep(200*time.Millisecond + time.Duration(rng.Int64N(int64(spread)))) // a random moment after it
		d.kill()
		each(i, d)
		d = startDaemon(t, cfg)
		d.waitAddr(t, time.Minute)
	}
	return d
}

// waitCheckpoints waits until the checkpoint file changed n times.
func waitCheckpoints(t *testing.T, d *daemonProc, checkpoint string, n int) {
	t.Helper()
	for range n {
		before := fileStamp(checkpoint)
		waitUntil(t, d, 2*time.Minute, "checkpoint progress", func() bool { return fileStamp(checkpoint) != before })
	}
}

// fileStamp is a file's modification time and size, "" when absent.
func fileStamp(path string) string {
	st, err := os.Stat(path)
	if err != nil {
		return ""
	}
	return fmt.Sprintf("%d/%d", st.ModTime().UnixNano(), st.Size())
}

// pgxQueryRow runs one query on its own connection.
func pgxQueryRow(ctx context.Context, dsn, q string, into ...any) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	return conn.QueryRow(ctx, q).Scan(into...)
}
