package integration

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/integration/harness"
	"github.com/sluice-cdc/sluice/sources/mysql"
)

// snapshot.read_only on a read-only MariaDB replica, as a user who may
// write nothing: the incremental snapshot of two tables runs while the
// primary takes 400 transactions a second (updates, inserts, deletes,
// ALTER … ADD COLUMN DEFAULT and TRUNCATE inside chunk windows), its
// watermarks are GTID positions of the replica. Part way through the
// snapshot the address sluice uses moves to the primary, whose binlog
// files are numbered below the replica's, with the primary idle for 2 s
// around the move: the stream resumes there by GTID in a new epoch, and
// the snapshot goes on with watermarks of the new server (none may go
// out at the old server's offset before its first commit). DuckDB then
// equals the replica row by row and sluice verify finds the sink equal
// to the primary; the replica's binlog holds the primary's transactions
// only.
func TestReadOnlyIncrementalSnapshotOnAMariaDBReplica(t *testing.T) {
	ctx := context.Background()
	primary, replica := mariadbPair(t, map[string]string{"read_only": "ON"})
	const db, items, events = "rosnap", 20000, 5000
	if err := primary.Exec(ctx, "",
		"CREATE USER reader@'%' IDENTIFIED BY 'pw'",
		"GRANT SELECT, REPLICATION SLAVE, BINLOG MONITOR ON *.* TO reader@'%'",
		"CREATE DATABASE "+db); err != nil {
		t.Fatal(err)
	}
	if err := primary.Exec(ctx, db, strings.Split(strings.NewReplacer("ITEMS", fmt.Sprint(items), "EVENTS", fmt.Sprint(events)).Replace(mysqlChaosSchema), ";\n")...); err != nil {
		t.Fatal(err)
	}
	caughtUp := func() string {
		t.Helper()
		pos, err := primary.Query(ctx, "", "SELECT @@GLOBAL.gtid_binlog_pos")
		if err != nil {
			t.Fatal(err)
		}
		if got, err := replica.Query(ctx, "", fmt.Sprintf("SELECT MASTER_GTID_WAIT('%s', 120)", pos)); err != nil || got != "0" {
			t.Fatalf("the replica did not reach %s: %q %v", pos, got, err)
		}
		return pos
	}
	caughtUp()
	// The replica's binlog moves to file 000006, the primary's stays at
	// 000001: offsets on the primary sort below the replica's.
	for range 5 {
		if err := replica.Exec(ctx, "", "FLUSH NO_WRITE_TO_BINLOG BINARY LOGS"); err != nil {
			t.Fatal(err)
		}
	}

	raddr := net.JoinHostPort(replica.Host, strconv.Itoa(replica.Port))
	paddr := net.JoinHostPort(primary.Host, strconv.Itoa(primary.Port))
	proxy := harness.ProxyT(t, raddr)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "ro.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`pipeline: ro
source:
  mysql:
    dsn: mysql://reader:pw@%s
    tables: [%[2]s.items, %[2]s.events]
    heartbeat_interval: 1s
    status_interval: 1s
    reconnect_backoff: {initial: 50ms, max: 500ms}
    snapshot: {mode: incremental, read_only: true, parallel: 2, chunk_time: 50ms, max_chunk_rows: 1000}
sinks:
  - duckdb: {path: ./sink.duckdb}
offsets: {dir: ./offsets}
runtime: {checkpoint_interval: 100ms}
`, proxy.Addr(), db)), 0o644); err != nil {
		t.Fatal(err)
	}
	checkpoint := filepath.Join(dir, "offsets", "checkpoint.json")

	wctx, stopWork := context.WithCancel(ctx)
	defer stopWork()
	var work chaosCounts
	var ddl atomic.Bool
	ddl.Store(true)
	workErr := make(chan error, 1)
	// Not the last column: a replica runs the ALTER itself, and its
	// DEFAULT (UUID()) gives its rows other values than the primary's,
	// which this test compares the sink with.
	go func() {
		workErr <- mysqlWorkload(wctx, paddr, db, items, &work, &ddl, mysqlAdded[:len(mysqlAdded)-1], 400)
	}()

	d := startDaemon(t, cfg)
	d.waitAddr(t, time.Minute)
	waitUntil(t, d, 3*time.Minute, "a durable chunk", func() bool {
		ok, _ := snapshotPending(t, checkpoint)
		return ok && snapshotRowsDone(t, checkpoint) > 0
	})
	if loadedAll(t, checkpoint) {
		t.Fatal("the snapshot ended before the move to the primary; make its chunks smaller")
	}
	// The primary commits nothing from just before the move until 2 s
	// after the stream found the new server: windows that close
	// meanwhile have no commit of the new server to stand after, and a
	// watermark at the old server's (higher) offset would version its
	// chunk above every later change of those rows.
	work.hold.Store(true)
	waitUntil(t, d, time.Minute, "the workload to pause", work.held.Load)
	proxy.SetTarget(paddr)
	proxy.Cut()
	proxy.Restore()
	waitUntil(t, d, time.Minute, "the stream on the new server", func() bool {
		return strings.Contains(d.logs(), "reconnected to another server")
	})
	time.Sleep(2 * time.Second) // the idle period itself, not a wait for an event
	work.hold.Store(false)
	waitUntil(t, d, 3*time.Minute, "the snapshot of both tables", func() bool { return loadedAll(t, checkpoint) })
	work.waitDDL(t, d, 3)
	stopWork()
	if err := <-workErr; err != nil {
		t.Fatalf("workload: %v", err)
	}
	mark := caughtUp()
	waitCheckpointAt(t, d, checkpoint, mark)
	d.signal(syscall.SIGTERM)
	if code := d.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("exit %d:\n%s", code, d.logs())
	}
	duck := filepath.Join(dir, "sink.duckdb")
	opts := mysql.Options{Pipeline: "verify", DSN: "mysql://root@" + raddr}
	n1 := assertSinkEqualsMySQL(t, ctx, opts, duck, db, "items")
	n2 := assertSinkEqualsMySQL(t, ctx, opts, duck, db, "events")
	expectVerifyEqual(t, cfg)
	// Every GTID in the replica's binlog is the primary's (server 1): the
	// snapshot wrote nothing there.
	own, err := replica.Query(ctx, "", "SELECT @@GLOBAL.gtid_binlog_pos")
	if err != nil {
		t.Fatal(err)
	}
	if own != mark {
		t.Fatalf("the replica's binlog is at %s, the primary's at %s: something wrote on the replica", own, mark)
	}
	t.Logf("items: %d rows, events: %d rows equal; %d primary transactions during the run, %d ALTERs, %d TRUNCATEs",
		n1, n2, work.writes.Load(), work.alters.Load(), work.truncates.Load())
}
