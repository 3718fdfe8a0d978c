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

	"github.com/go-mysql-org/go-mysql/client"

	"github.com/sluice-cdc/sluice/integration/harness"
	"github.com/sluice-cdc/sluice/sources/mysql"
)

// An incremental snapshot that a failover interrupts: two MariaDB servers
// in GTID replication behind a proxy, a table read in the smallest chunks under
// concurrent writes, and, while chunks remain, a switchover: the primary
// stops taking writes, the replica is promoted and the proxy moves to it
// and drops the connections. The stream resumes
// on the new server by GTID, a generation up, in the middle of a chunk's
// window; the writes go on against the new primary until the snapshot is
// over. DuckDB then equals the new primary row by row, and sluice verify
// finds the sink equal.
func TestIncrementalSnapshotAcrossAFailoverMariaDB(t *testing.T) {
	ctx := context.Background()
	primary, replica := mariadbPair(t, nil)
	addr := func(m *harness.MariaDB) string { return net.JoinHostPort(m.Host, strconv.Itoa(m.Port)) }
	const rows = 40000
	mariadbExec(t, primary, "", "CREATE DATABASE fs")
	mariadbExec(t, primary, "fs", "CREATE TABLE t (id INT PRIMARY KEY, v INT, note VARCHAR(40))",
		fmt.Sprintf("INSERT INTO t SELECT seq, 0, 'start' FROM seq_1_to_%d", rows))
	proxy := harness.ProxyT(t, addr(primary))
	dir := t.TempDir()
	cfg := writeConfig(t, dir, fmt.Sprintf(`pipeline: incfailover
source:
  mysql:
    dsn: mysql://root@%s
    tables: [fs.t]
    heartbeat_interval: 200ms
    reconnect_backoff: {initial: 50ms, max: 500ms}
    snapshot: {mode: incremental, parallel: 2, chunk_time: 50ms, max_chunk_rows: 64}
sinks:
  - duckdb: {path: ./sink.duckdb}
offsets: {dir: ./offsets}
runtime: {checkpoint_interval: 50ms}
`, proxy.Addr()))
	checkpoint := filepath.Join(dir, "offsets", "checkpoint.json")

	// Paced: the snapshot must outlast the failover.
	w := rowWriter{db: "fs", rows: rows, deletes: true, pause: 2 * time.Millisecond}
	run := func(m *harness.MariaDB, seed uint64, next int) (stop func()) { return w.start(t, m, seed, next, 0) }

	stop := run(primary, 1, 100000)
	d := startDaemon(t, cfg)
	d.waitAddr(t, time.Minute)
	waitFile(t, checkpoint, d)
	// A checkpoint in, some writes during the snapshot, most chunks to
	// come: the failover follows at once (the smallest chunks keep the
	// table pending for seconds; the test fails, never skips, if not).
	for from := w.writes.Load(); w.writes.Load() < from+20; {
		time.Sleep(5 * time.Millisecond)
	}
	if _, pending := snapshotPending(t, checkpoint); len(pending) == 0 {
		t.Fatalf("the snapshot finished before the failover; the table is too small for this machine")
	}
	stop()

	// A planned switchover: the primary stops taking writes (sluice's
	// watermarks too), the replica is promoted once it has everything,
	// and the proxy moves to it. (An unplanned one that loses
	// transactions the pipeline read stops it: the sinks may hold
	// changes the new primary never had.)
	lock, err := client.Connect(addr(primary), "root", "", "")
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if _, err := lock.Execute("FLUSH TABLES WITH READ LOCK"); err != nil {
		t.Fatal(err)
	}
	promote(t, primary, replica)
	proxy.SetTarget(addr(replica))
	proxy.Cut()
	if _, pending := snapshotPending(t, checkpoint); len(pending) == 0 {
		t.Fatalf("the snapshot finished before the failover; the table is too small for this machine")
	}
	proxy.Restore()

	stop = run(replica, 2, 10000000)
	waitSnapshotsOver(t, d, checkpoint)
	stop()
	waitCheckpointAt(t, d, checkpoint, binlogGTID(t, replica))
	d.signal(syscall.SIGTERM)
	if code := d.wait(t, time.Minute); code != 0 {
		t.Fatalf("exit %d:\n%s", code, d.logs())
	}
	n := assertSinkEqualsMySQL(t, ctx, mysql.Options{Pipeline: "verify", DSN: "mysql://root@" + addr(replica)},
		filepath.Join(dir, "sink.duckdb"), "fs", "t")
	// The config's address now reaches the new primary.
	expectVerifyEqual(t, cfg)
	t.Logf("%d rows equal after %d writes across the failover", n, w.writes.Load())
}

// An unplanned failover that loses a transaction the pipeline has
// already read and checkpointed: the replica stops replicating, the
// primary commits one more row, sluice streams and checkpoints it, and
// the replica is promoted without it. The new primary cannot serve the
// checkpoint; sluice must stop, non-zero, saying that the new server
// lacks what it read (the sinks hold a row the new primary never had),
// never stream on past the gap. The new primary runs with MariaDB's
// default gtid_strict_mode=OFF.
func TestMariaDBFailoverThatLostTransactionsStops(t *testing.T) {
	primary, replica := mariadbPair(t, map[string]string{"gtid_strict_mode": "OFF"})
	addr := func(m *harness.MariaDB) string { return net.JoinHostPort(m.Host, strconv.Itoa(m.Port)) }
	mariadbExec(t, primary, "", "CREATE DATABASE fl")
	mariadbExec(t, primary, "fl", "CREATE TABLE t (id INT PRIMARY KEY, v INT)", "INSERT INTO t VALUES (1, 1)")
	catchUp(t, primary, replica)
	proxy := harness.ProxyT(t, addr(primary))
	dir := t.TempDir()
	cfg := writeConfig(t, dir, fmt.Sprintf(`pipeline: lossy
source:
  mysql:
    dsn: mysql://root@%s
    tables: [fl.t]
    heartbeat_interval: 200ms
    reconnect_backoff: {initial: 50ms, max: 500ms}
sinks:
  - duckdb: {path: ./sink.duckdb}
offsets: {dir: ./offsets}
runtime: {checkpoint_interval: 50ms}
`, proxy.Addr()))
	checkpoint := filepath.Join(dir, "offsets", "checkpoint.json")
	d := startDaemon(t, cfg)
	d.waitAddr(t, time.Minute)
	waitFile(t, checkpoint, d)

	mariadbExec(t, replica, "", "STOP SLAVE")
	mariadbExec(t, primary, "fl", "INSERT INTO t VALUES (2, 2)") // never reaches the replica
	waitCheckpointAt(t, d, checkpoint, binlogGTID(t, primary))
	mariadbExec(t, replica, "", "RESET SLAVE ALL")
	mariadbExec(t, replica, "fl", "INSERT INTO t VALUES (3, 3)") // the new primary's own history
	proxy.SetTarget(addr(replica))
	proxy.Cut()
	proxy.Restore()
	code := d.wait(t, time.Minute)
	if code == 0 || !strings.Contains(d.logs(), "lacks transactions this pipeline already read") {
		t.Fatalf("exit %d after a failover that lost a transaction:\n%s", code, d.logs())
	}
}
