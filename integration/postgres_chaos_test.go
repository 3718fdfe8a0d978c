package integration

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-cdc/sluice/integration/harness"
)

const chaosSchema = `
CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
CREATE TABLE items (
  id    bigint PRIMARY KEY,
  name  text NOT NULL,
  qty   integer,
  price numeric(12,3),
  ratio double precision,
  tags  text[],
  at    timestamptz,
  day   date,
  data  jsonb,
  flag  boolean,
  m     mood,
  blob  bytea
);
CREATE TABLE events (
  a       integer,
  b       text,
  payload text,
  n       bigint,
  PRIMARY KEY (a, b)
);
INSERT INTO items
  SELECT g, 'item ' || g, g % 1000, (g % 9973) / 7.0, g / 3.0, ARRAY['a' || (g % 7), NULL],
         timestamptz '2024-01-01 00:00:00+00' + g * interval '1 minute', date '2020-01-01' + (g % 2000),
         jsonb_build_object('g', g, 'odd', g % 2 = 1), g % 3 = 0, (ARRAY['sad','ok','happy']::mood[])[1 + g % 3],
         decode(md5(g::text), 'hex')
  FROM generate_series(1, ITEMS) g;
INSERT INTO events SELECT g % 500, 'k' || (g / 500), repeat('p', g % 50), g FROM generate_series(1, EVENTS) g;
-- A deferrable key: two rows share a key inside a transaction (chaosSeats).
-- It cannot be the replica identity, hence FULL.
CREATE TABLE seats (
  id   integer PRIMARY KEY DEFERRABLE,
  name text NOT NULL,
  n    integer NOT NULL DEFAULT 0
);
ALTER TABLE seats REPLICA IDENTITY FULL;
INSERT INTO seats SELECT g, 'seat ' || g, 0 FROM generate_series(1, 200) g;
`

// chaosAdded are the columns the chaos workload adds to items as it goes,
// one every chaosAlterEvery transactions: each DEFAULT is a value the rows
// that existed before hold with no change event saying so (the last, a
// volatile one, a different value in each row), and each other is
// one that a sink once failed to fill (uuid, timestamptz, an array with a
// NULL, a quoted boolean, a BC date) or holds only in a fallback form
// (NaN in a numeric(p,s), -0).
var chaosAdded = []string{
	`c_uuid uuid DEFAULT 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'`,
	`c_ts timestamptz DEFAULT '2024-02-29 12:34:56.789012+05:30'`,
	`c_arr integer[] DEFAULT '{1,NULL,3}'`,
	`c_bool boolean DEFAULT 'true'`,
	`c_date date DEFAULT '0044-03-15 BC'`,
	`c_num numeric(10,2) DEFAULT 'NaN'`,
	`c_neg double precision DEFAULT '-0'`,
	`c_text text DEFAULT e'tab\there, quote '' and \\'`,
	// A volatile DEFAULT rewrites the table with no change event for its
	// rows: only the source's rewrite trigger and a re-read fill them.
	`c_rand double precision DEFAULT random()`,
}

// chaosRenames come after chaosAdded on primaries (a standby's source
// cannot create the trigger that announces them), once the initial load is
// over (chaosCounts.streaming; a load still reading would carry the new
// names anyway): a column renamed and an enum label renamed change what
// every row holds with no change event, and only the rename trigger and a
// re-read bring the sinks along. The workload never writes ratio (a value
// per row) nor 'sad'.
var chaosRenames = []string{
	`ALTER TABLE items RENAME COLUMN ratio TO ratio_renamed`,
	`ALTER TYPE mood RENAME VALUE 'sad' TO 'blue'`,
}

// runsNow reports whether the workload may run added[i] now: a statement
// of its own (chaosRenames, mysqlRenames) only once c.streaming holds.
func (c *chaosCounts) runsNow(added []string, i int) bool {
	return i < len(added) && (c.streaming.Load() || !strings.HasPrefix(added[i], "ALTER "))
}

// chaosSeats are the workload's transactions on seats, whose key is
// DEFERRABLE: every key moved one up (row k sits on k+1 before row k+1
// leaves it), or the upper half of them, two keys swapped, and a new row that lands on a
// held key and moves on, leaving the key to the row that held it.
var chaosSeats = []string{
	`UPDATE seats SET id = id + 1, n = n + 1`,
	`UPDATE seats SET id = id + 1 WHERE id > (SELECT percentile_disc(0.5) WITHIN GROUP (ORDER BY id) FROM seats)`,
	`WITH p AS (SELECT id FROM seats ORDER BY random() LIMIT 2)
	 UPDATE seats SET id = CASE id WHEN (SELECT min(id) FROM p) THEN (SELECT max(id) FROM p) ELSE (SELECT min(id) FROM p) END, n = n + 10
	 WHERE id IN (SELECT id FROM p)`,
	`BEGIN; SET CONSTRAINTS ALL DEFERRED;
	 INSERT INTO seats SELECT min(id), 'visitor', -1 FROM seats;
	 UPDATE seats SET id = (SELECT max(id) + 1 FROM seats), name = 'was a visitor' WHERE name = 'visitor';
	 COMMIT`,
}

const (
	chaosAlterEvery    = 150
	chaosTruncateEvery = 1500
)

// chaosCounts are what the chaos workload did: transactions, and of them
// the ALTERs and TRUNCATEs.
type chaosCounts struct {
	writes, alters, truncates atomic.Int64
	// hold pauses the MySQL workload between two transactions while
	// set; held reports it is paused.
	hold, held atomic.Bool
	// streaming is set once the initial load is over.
	streaming atomic.Bool
}

// waitDDL waits, while the daemon d runs, until the workload has run at
// least alters ALTERs and a TRUNCATE (however slow the machine, the test
// then exercises them), and fails when that takes over 3 minutes.
func (c *chaosCounts) waitDDL(t *testing.T, d *daemonProc, alters int64) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for c.alters.Load() < alters || c.truncates.Load() < 1 {
		select {
		case <-d.done:
			t.Fatalf("daemon exited (%d) while the workload ran its schema changes:\n%s", d.exitCode(), d.logs())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the workload ran %d ALTERs and %d TRUNCATEs in 3 minutes", c.alters.Load(), c.truncates.Load())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// chaosWorkload keeps writing small transactions until ctx ends, counting
// them into c: inserts, updates, deletes, primary-key updates, upserts,
// transactions across both tables and key moves under seats' deferrable
// key (chaosSeats); with added (not nil), also an ALTER TABLE items ADD
// COLUMN … DEFAULT of each of added in turn (chaosAdded, or a part of it;
// an entry that starts with ALTER runs as it is: chaosRenames)
// every chaosAlterEvery transactions and a TRUNCATE events every
// chaosTruncateEvery. perSecond > 0 paces it to that many transactions a
// second.
func chaosWorkload(ctx context.Context, dsn string, maxID int64, c *chaosCounts, added []string, perSecond int) error {
	ddl := added != nil
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	rng := rand.New(rand.NewPCG(7, 11))
	next := maxID
	var pace <-chan time.Time
	if perSecond > 0 {
		tick := time.NewTicker(time.Second / time.Duration(perSecond))
		defer tick.Stop()
		pace = tick.C
	}
	for op := 1; ctx.Err() == nil; op++ {
		if pace != nil {
			select {
			case <-pace:
			case <-ctx.Done():
				return nil
			}
		}
		var err error
		id := 1 + rng.Int64N(next)
		switch n := rng.IntN(13); {
		case ddl && op%chaosAlterEvery == 0 && c.runsNow(added, int(c.alters.Load())):
			stmt := added[c.alters.Load()]
			if !strings.HasPrefix(stmt, "ALTER ") {
				stmt = `ALTER TABLE items ADD COLUMN ` + stmt
			}
			if _, err = conn.Exec(ctx, stmt); err == nil {
				c.alters.Add(1)
			}
		case ddl && op%chaosTruncateEvery == 0:
			if _, err = conn.Exec(ctx, `TRUNCATE events`); err == nil {
				c.truncates.Add(1)
			}
		case n < 3:
			next++
			_, err = conn.Exec(ctx, `INSERT INTO items (id, name, qty, price, tags, at, data, flag, m)
				VALUES ($1::bigint, 'new ' || $1::bigint::text, $2, $3, ARRAY['n'], now(), '{"new": true}', true, 'happy')`, next, rng.IntN(100), float64(rng.IntN(100000))/1000)
		case n < 7:
			_, err = conn.Exec(ctx, `UPDATE items SET qty = coalesce(qty, 0) + 1, price = price + 0.001, tags = array_append(tags, 'u'), m = 'ok' WHERE id = $1`, id)
		case n < 8:
			_, err = conn.Exec(ctx, `DELETE FROM items WHERE id = $1`, id)
		case n < 9:
			// A primary-key update.
			next++
			_, err = conn.Exec(ctx, `UPDATE items SET id = $2 WHERE id = $1`, id, next)
		case n == 12:
			_, err = conn.Exec(ctx, chaosSeats[rng.IntN(len(chaosSeats))])
		case n < 10:
			_, err = conn.Exec(ctx, `INSERT INTO events VALUES ($1, $2, 'w', $3) ON CONFLICT (a, b) DO UPDATE SET n = events.n + 1, payload = events.payload || 'x'`,
				rng.IntN(600), fmt.Sprintf("w%d", rng.IntN(50)), rng.Int64())
		default:
			// A multi-statement transaction across both tables.
			tx, terr := conn.Begin(ctx)
			if terr != nil {
				err = terr
				break
			}
			_, err = tx.Exec(ctx, `UPDATE items SET name = name || '+' WHERE id BETWEEN $1 AND $1 + 20`, id)
			if err == nil {
				_, err = tx.Exec(ctx, `DELETE FROM events WHERE a = $1 AND b = (SELECT min(b) FROM events WHERE a = $1)`, rng.IntN(500))
			}
			if err == nil {
				err = tx.Commit(ctx)
			} else {
				_ = tx.Rollback(ctx)
			}
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		c.writes.Add(1)
	}
	return nil
}

// harness.Trials(8) kill -9 of the real binary at random moments — up to
// half during the initial load (each restart reads the rest of it in
// chunks), the rest during the stream — under a
// concurrent write workload that also adds columns with DEFAULTs and
// truncates (chaosWorkload); the DuckDB copy then equals PostgreSQL row by
// row, and sluice verify finds both sinks (DuckDB and Postgres) equal to
// it. Ranges of 3,000 rows make the load's key walk (which queues ranges
// as it finds them) run beside the reads, so kills land mid-walk too.
func TestKill9DuringLoadAndStreamPostgres(t *testing.T) {
	// Paced like the incremental test: a load killed part way resumes in
	// chunks, which wait for their high watermarks to come through the
	// stream, and an unpaced workload on a shared machine can outrun the
	// sinks for good.
	runPostgresChaos(t, postgresChaos{name: "chaos", items: 150000, events: 30000, snapshot: "{parallel: 2, chunk_rows: 3000}", perSecond: 400,
		loaded: loadedAll})
}

// loadedAll reports whether the checkpoint at path shows every table
// read: a kill before that lands during the load, whose batches are
// checkpointed with the ranges left (a restart reads those in chunks).
func loadedAll(t *testing.T, checkpoint string) bool {
	ok, pending := snapshotPending(t, checkpoint)
	return ok && len(pending) == 0
}

// postgresChaos is one kill -9 chaos run of the Postgres source.
type postgresChaos struct {
	name          string // database, pipeline and slot name
	items, events int
	snapshot      string // the source's snapshot settings (YAML)
	perSecond     int    // workload pace; 0 unpaced
	// loaded reports whether the table copy is over, from the checkpoint
	// file: kills before it count as load kills.
	loaded func(t *testing.T, checkpoint string) bool
}

// runPostgresChaos runs c: the workload from before the first start,
// killAtRandom, a final run that sees at least 3 ALTERs and a TRUNCATE
// and confirms a last transaction, then DuckDB compared row by row and
// sluice verify over both sinks.
func runPostgresChaos(t *testing.T, c postgresChaos) {
	pg := harness.PostgresT(t)
	ctx := context.Background()
	for _, db := range []string{c.name, c.name + "_target"} {
		if err := pg.CreateDatabase(ctx, db); err != nil {
			t.Fatal(err)
		}
	}
	if err := pg.Exec(ctx, c.name, strings.NewReplacer("ITEMS", fmt.Sprint(c.items), "EVENTS", fmt.Sprint(c.events)).Replace(chaosSchema)); err != nil {
		t.Fatal(err)
	}
	dsn := pg.DSN(c.name)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "pg.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`pipeline: pg%s
source:
  postgres:
    dsn: %s
    tables: [public.items, public.events, public.seats]
    heartbeat_interval: 1s
    status_interval: 1s
    snapshot: %s
sinks:
  - duckdb: {path: ./sink.duckdb}
  - postgres: {dsn: "%s"}
offsets: {dir: ./offsets}
runtime: {checkpoint_interval: 100ms}
`, c.name, dsn, c.snapshot, pg.DSN(c.name+"_target"))), 0o644); err != nil {
		t.Fatal(err)
	}
	checkpoint := filepath.Join(dir, "offsets", "checkpoint.json")

	wctx, stopWork := context.WithCancel(ctx)
	defer stopWork()
	var work chaosCounts
	workErr := make(chan error, 1)
	all := append(slices.Clone(chaosAdded), chaosRenames...)
	go func() { workErr <- chaosWorkload(wctx, dsn, int64(c.items), &work, all, c.perSecond) }()

	loadKills, streamKills := killAtRandom(t, cfg, checkpoint, func() bool {
		loaded := c.loaded(t, checkpoint)
		if loaded {
			work.streaming.Store(true)
		}
		return loaded
	})
	t.Logf("%d kills during the load, %d during the stream, %d workload transactions so far", loadKills, streamKills, work.writes.Load())

	// Final run: stop the workload, let sluice confirm the last
	// transaction (it only confirms what DuckDB holds), then stop it.
	d := startDaemon(t, cfg)
	d.waitAddr(t, 2*time.Minute)
	time.Sleep(500 * time.Millisecond) // some live traffic on the final run too
	waitSnapshotsOver(t, d, checkpoint)
	work.streaming.Store(true)
	work.waitDDL(t, d, int64(len(all)))
	stopWork()
	if err := <-workErr; err != nil {
		t.Fatalf("workload: %v", err)
	}
	mark := commitMark(t, ctx, dsn)
	waitSlotConfirmed(t, ctx, dsn, "sluice_pg"+c.name, mark, d)
	waitSnapshotsOver(t, d, checkpoint)
	d.signal(syscall.SIGTERM)
	if code := d.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("final run exit %d:\n%s", code, d.logs())
	}
	if a := work.alters.Load(); a < 3 || work.truncates.Load() < 1 {
		t.Fatalf("the workload ran %d ALTERs and %d TRUNCATEs in %d transactions: too few to test schema changes under kills",
			a, work.truncates.Load(), work.writes.Load())
	}
	duck := filepath.Join(dir, "sink.duckdb")
	n1 := assertSinkEqualsSource(t, ctx, dsn, c.name, duck, "public", "items")
	n2 := assertSinkEqualsSource(t, ctx, dsn, c.name, duck, "public", "events")
	n3 := assertSinkEqualsSource(t, ctx, dsn, c.name, duck, "public", "seats")
	expectVerifyEqual(t, cfg)
	t.Logf("items: %d rows, events: %d rows, seats: %d rows equal in DuckDB and the Postgres sink after %d kills, %d transactions, %d ALTERs (columns added with a DEFAULT, renames), %d truncates",
		n1, n2, n3, loadKills+streamKills, work.writes.Load(), work.alters.Load(), work.truncates.Load())
}

// commitMark commits a change to a captured table and returns an LSN inside
// its transaction.
func commitMark(t *testing.T, ctx context.Context, dsn string) string {
	return commitMarkOn(t, ctx, dsn, `INSERT INTO events VALUES (-1, 'mark', 'mark', 0) ON CONFLICT (a, b) DO UPDATE SET n = events.n + 1`)
}

// commitMarkOn runs stmt in a transaction and returns an LSN inside it:
// once a slot's confirmed position passes it, the transaction is durable.
func commitMarkOn(t *testing.T, ctx context.Context, dsn, stmt string) string {
	t.Helper()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, stmt); err != nil {
		t.Fatal(err)
	}
	var lsn string
	if err := tx.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&lsn); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	return lsn
}

// waitSlotConfirmed polls until the slot's confirmed position passes lsn.
func waitSlotConfirmed(t *testing.T, ctx context.Context, dsn, slot, lsn string, d *daemonProc) {
	t.Helper()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	deadline := time.Now().Add(3 * time.Minute)
	for {
		var ok bool
		err := conn.QueryRow(ctx, `SELECT coalesce(confirmed_flush_lsn > $2::pg_lsn, false) FROM pg_replication_slots WHERE slot_name = $1`, slot, lsn).Scan(&ok)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			t.Fatal(err)
		}
		if ok {
			return
		}
		select {
		case <-d.done:
			t.Fatalf("daemon exited (%d) before confirming %s:\n%s", d.exitCode(), lsn, d.logs())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("slot never confirmed %s:\n%s", lsn, d.logs())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
