package integration

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-cdc/sluice/integration/harness"
)

// A schema change during the initial load, with the sink cut off so that
// the load stands still holding its table locks: after 10 s the load
// gives way, and the ALTER and a query queued behind it complete while the
// daemon keeps running. The daemon starts the pipeline again from its
// checkpoint in the same process (one load, no second), reads the rest of
// the table in chunks once the sink is back, streams the changes made
// meanwhile, and sluice verify finds the sink equal to the table.
func TestPostgresLoadGivesWayAndTheDaemonCarriesOn(t *testing.T) {
	pg := harness.PostgresT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := pg.CreateDatabase(ctx, "gw"); err != nil {
		t.Fatal(err)
	}
	if err := pg.Exec(ctx, "gw", "CREATE TABLE gw_items (id int PRIMARY KEY, v text NOT NULL)",
		"INSERT INTO gw_items SELECT g, 'v' || g FROM generate_series(1, 200000) g", "ANALYZE gw_items"); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, pg.DSN("gw"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	giveWay(t, ctx, giveWayCase{
		source: fmt.Sprintf(`postgres: {dsn: "%s", tables: [public.gw_items], heartbeat_interval: 200ms, snapshot: {chunk_rows: 5000}}`,
			pg.DSN("gw")),
		alter: "ALTER TABLE gw_items ADD COLUMN note text",
		query: "SELECT count(*) FROM gw_items",
		exec:  func(sql string) <-chan error { return async(func() error { return pg.Exec(ctx, "gw", sql) }) },
		waiting: func() bool {
			var waiting bool
			err := conn.QueryRow(ctx, "SELECT count(*) > 0 FROM pg_locks WHERE NOT granted AND relation = 'gw_items'::regclass").Scan(&waiting)
			if err != nil {
				t.Fatal(err)
			}
			return waiting
		},
		writes: []string{"UPDATE gw_items SET note = 'n' || id WHERE id % 997 = 0", "DELETE FROM gw_items WHERE id % 1009 = 0",
			"INSERT INTO gw_items SELECT g, 'late', 'x' FROM generate_series(200001, 200100) g"},
		write: func(sqls ...string) error { return pg.Exec(ctx, "gw", sqls...) },
		caughtUp: func(d *daemonProc, _ string) {
			mark := commitMarkOn(t, ctx, pg.DSN("gw"), "UPDATE gw_items SET v = 'last' WHERE id = 1")
			waitSlotConfirmed(t, ctx, pg.DSN("gw"), "sluice_gw", mark, d)
		},
	})
}

// The same on MariaDB, where the load that stands still finds the ALTER
// in the process list.
func TestMariaDBLoadGivesWayAndTheDaemonCarriesOn(t *testing.T) {
	m := harness.MariaDBT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := m.Exec(ctx, "", "CREATE DATABASE gwm", "CREATE TABLE gwm.items (id int PRIMARY KEY, v varchar(40) NOT NULL)",
		"INSERT INTO gwm.items SELECT seq, CONCAT('v', seq) FROM gwm.seq_1_to_200000"); err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort(m.Host, strconv.Itoa(m.Port))
	giveWay(t, ctx, giveWayCase{
		source: fmt.Sprintf(`mysql: {dsn: "mysql://root@%s", tables: [gwm.items], heartbeat_interval: 1s, snapshot: {chunk_rows: 50000}}`, addr),
		alter:  "ALTER TABLE gwm.items ADD COLUMN note varchar(20)",
		query:  "SELECT count(*) FROM gwm.items",
		exec:   func(sql string) <-chan error { return async(func() error { return m.Exec(ctx, "", sql) }) },
		waiting: func() bool {
			n, err := m.Query(ctx, "", "SELECT count(*) FROM information_schema.PROCESSLIST WHERE STATE = 'Waiting for table metadata lock' AND INFO LIKE 'ALTER%'")
			if err != nil {
				t.Fatal(err)
			}
			return strings.TrimSpace(n) != "0"
		},
		writes: []string{"UPDATE gwm.items SET note = CONCAT('n', id) WHERE id % 997 = 0", "DELETE FROM gwm.items WHERE id % 1009 = 0",
			"INSERT INTO gwm.items SELECT seq, 'late', 'x' FROM gwm.seq_200001_to_200100"},
		write: func(sqls ...string) error { return m.Exec(ctx, "", sqls...) },
		caughtUp: func(d *daemonProc, checkpoint string) {
			mark, err := m.Query(ctx, "", "SELECT @@GLOBAL.gtid_binlog_pos")
			if err != nil {
				t.Fatal(err)
			}
			waitCheckpointAt(t, d, checkpoint, strings.TrimSpace(mark))
		},
	})
}

// giveWayCase is a source for giveWay.
type giveWayCase struct {
	source       string                    // the source's YAML
	alter, query string                    // a schema change, and a query that queues behind it
	exec         func(string) <-chan error // runs a statement on a connection of its own
	waiting      func() bool               // whether the schema change waits for a lock
	writes       []string                  // changes made once the sink is back
	write        func(...string) error
	caughtUp     func(d *daemonProc, checkpoint string) // waits until the checkpoint covers every change so far
}

func giveWay(t *testing.T, ctx context.Context, c giveWayCase) {
	rd := harness.RedisT(t)
	proxy := harness.ProxyT(t, rd.Addr())
	dir := t.TempDir()
	cfg := writeConfig(t, dir, fmt.Sprintf(`pipeline: gw
source:
  %s
sinks:
  - redis: {name: cache, addr: "%s"}
offsets: {dir: ./offsets}
runtime: {checkpoint_interval: 50ms, max_in_flight_records: 4000, batch_max_records: 2000, write_timeout: 2s, retry: {initial: 50ms, max: 500ms}}
`, c.source, proxy.Addr()))
	d := startDaemon(t, cfg)
	d.waitAddr(t, 2*time.Minute)
	checkpoint := filepath.Join(dir, "offsets", "checkpoint.json")
	waitUntil(t, d, 2*time.Minute, "load progress", func() bool {
		p, ok := loadProgress(checkpoint)
		return ok && p[0] > 0
	})
	// The sink is cut off: the in-flight cap fills, and the load stands
	// still with its transactions (and their locks) open.
	proxy.Cut()
	if p, _ := loadProgress(checkpoint); p[1] == 0 {
		t.Fatal("the load finished before the sink was cut off; the table is too small to test giving way")
	}

	start := time.Now()
	altered := c.exec(c.alter)
	waitUntil(t, d, time.Minute, "the ALTER waiting for the load", c.waiting)
	queued := c.exec(c.query)
	for what, ch := range map[string]<-chan error{"the ALTER": altered, "the query queued behind it": queued} {
		select {
		case err := <-ch:
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
		case <-d.done:
			t.Fatalf("the daemon exited (%d) while %s waited:\n%s", d.exitCode(), what, d.logs())
		case <-ctx.Done():
			t.Fatalf("%s still waits: the load did not give way:\n%s", what, d.logs())
		}
	}
	t.Logf("the ALTER waited %s", time.Since(start).Round(100*time.Millisecond))

	// The sink is back: the pipeline reads what the load queued before it
	// gave way, meets its error and starts again, and the restart resumes
	// the load in chunks and streams the changes made since it began, the
	// new column's too.
	proxy.Restore()
	if err := c.write(c.writes...); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, d, 2*time.Minute, "the restart", func() bool {
		return strings.Contains(d.wholeLog(), "starting the pipeline again from its last checkpoint")
	})
	waitUntil(t, d, 3*time.Minute, "the resumed load's end", func() bool {
		p, ok := loadProgress(checkpoint)
		return ok && p[1] == 0
	})
	c.caughtUp(d, checkpoint)
	d.signal(syscall.SIGTERM)
	if code := d.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("exit %d:\n%s", code, d.logs())
	}
	logs := d.wholeLog()
	if n := strings.Count(logs, `"msg":"initial load started"`); n != 1 {
		t.Fatalf("%d initial loads: want the one the restart resumed, not a second:\n%s", n, d.logs())
	}
	// The watcher gives way (gave way to …), or on MariaDB the walk of
	// the key, still running on a busy machine, waits for the ALTER itself
	// (Lock wait timeout): either way the load gave way.
	if !strings.Contains(logs, "gave way to") && !strings.Contains(logs, "Lock wait timeout") {
		t.Fatalf("the log does not say the load gave way:\n%s", d.logs())
	}
	expectVerifyEqual(t, cfg)
}

// async runs f on a goroutine of its own and reports its outcome.
func async(f func() error) <-chan error {
	out := make(chan error, 1)
	go func() { out <- f() }()
	return out
}
