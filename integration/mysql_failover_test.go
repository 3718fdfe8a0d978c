package integration

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/client"

	"github.com/sluice-cdc/sluice/integration/harness"
)

// A failover behind the address sluice uses: two MariaDB servers in GTID
// replication behind a proxy, the primary's binlog files numbered higher
// than the replica's (so the replica's versions would sort below what the
// sink holds), a stream under concurrent writes; the replica is promoted,
// the proxy moves to it and drops the connections, writes go on against
// it. The stream resumes on the new server by GTID, in a new epoch, and
// the sink ends equal to the new primary; a reload there afterwards
// (--reset-offsets) lands above what the sink holds too.
func TestMariaDBFailoverBehindAProxy(t *testing.T) {
	ctx := context.Background()
	primary, replica := mariadbPair(t, nil)
	addr := func(m *harness.MariaDB) string { return net.JoinHostPort(m.Host, strconv.Itoa(m.Port)) }
	const rows = 500
	if err := primary.Exec(ctx, "", "CREATE DATABASE f"); err != nil {
		t.Fatal(err)
	}
	if err := primary.Exec(ctx, "f", "CREATE TABLE f.t (id INT PRIMARY KEY, v INT, note VARCHAR(40))",
		fmt.Sprintf("INSERT INTO f.t SELECT seq, 0, 'start' FROM seq_1_to_%d", rows)); err != nil {
		t.Fatal(err)
	}
	// The primary's binlog moves to file 000006 (not replicated: the
	// replica stays at 000001).
	for range 5 {
		if err := primary.Exec(ctx, "", "FLUSH NO_WRITE_TO_BINLOG BINARY LOGS"); err != nil {
			t.Fatal(err)
		}
	}
	proxy := harness.ProxyT(t, addr(primary))
	dir := t.TempDir()
	cfg := writeConfig(t, dir, fmt.Sprintf(`pipeline: failover
source:
  mysql:
    dsn: mysql://root@%s
    tables: [f.t]
    heartbeat_interval: 200ms
    reconnect_backoff: {initial: 50ms, max: 500ms}
sinks:
  - duckdb: {path: ./sink.duckdb}
offsets: {dir: ./offsets}
runtime: {checkpoint_interval: 50ms}
`, proxy.Addr()))
	checkpoint := filepath.Join(dir, "offsets", "checkpoint.json")

	w := rowWriter{db: "f", rows: rows}
	run := func(m *harness.MariaDB, seed uint64, next int) (stop func()) { return w.start(t, m, seed, next, 300) }

	stop := run(primary, 1, 100000)
	d := startDaemon(t, cfg)
	d.waitAddr(t, time.Minute)
	waitFile(t, checkpoint, d)
	stop()

	// Promote the replica once it has everything, move the proxy to it.
	promote(t, primary, replica)
	proxy.SetTarget(addr(replica))
	proxy.Cut()
	proxy.Restore()

	stop = run(replica, 2, 10000000)
	stop()
	mark, err := replica.Query(ctx, "", "SELECT @@GLOBAL.gtid_binlog_pos")
	if err != nil {
		t.Fatal(err)
	}
	waitCheckpointAt(t, d, checkpoint, mark)
	if !strings.Contains(d.logs(), "reconnected to another server") {
		t.Fatalf("the stream never noticed the new server:\n%s", d.logs())
	}
	d.signal(syscall.SIGTERM)
	if code := d.wait(t, time.Minute); code != 0 {
		t.Fatalf("exit %d:\n%s", code, d.logs())
	}
	// The config's address now reaches the new primary.
	expectVerifyEqual(t, cfg)

	// A reload on the new primary (--reset-offsets), under writes: its
	// binlog is still at file 1, below the old primary's 6, and the
	// sink holds epoch 1. Without an epoch above what the sink recorded
	// the load's rows and every later change would sort below it.
	d = startDaemon(t, cfg, "--reset-offsets")
	d.waitAddr(t, time.Minute)
	stop = run(replica, 3, 20000000)
	waitFile(t, checkpoint, d)
	stop()
	if mark, err = replica.Query(ctx, "", "SELECT @@GLOBAL.gtid_binlog_pos"); err != nil {
		t.Fatal(err)
	}
	waitCheckpointAt(t, d, checkpoint, mark)
	d.signal(syscall.SIGTERM)
	if code := d.wait(t, time.Minute); code != 0 {
		t.Fatalf("exit %d after the reload:\n%s", code, d.logs())
	}
	if !strings.Contains(d.logs(), `"epoch":2`) {
		t.Errorf("the reload did not move to epoch 2:\n%s", d.logs())
	}
	expectVerifyEqual(t, cfg)
	t.Logf("%d writes across the failover and the reload", w.writes.Load())
}

// mariadbPair starts two MariaDB servers at once, the second (server_id
// 2, with extra settings) replicating the first by GTID, and stops both
// when the test ends.
func mariadbPair(t *testing.T, replicaSettings map[string]string) (primary, replica *harness.MariaDB) {
	t.Helper()
	ctx := context.Background()
	var (
		wg         sync.WaitGroup
		perr, rerr error
	)
	settings := map[string]string{"server_id": "2"}
	maps.Copy(settings, replicaSettings)
	wg.Add(2)
	go func() { defer wg.Done(); primary, perr = harness.StartMariaDB(ctx, harness.MariaDBOptions{}) }()
	go func() {
		defer wg.Done()
		replica, rerr = harness.StartMariaDB(ctx, harness.MariaDBOptions{Settings: settings})
	}()
	wg.Wait()
	for _, m := range []*harness.MariaDB{primary, replica} {
		if m != nil {
			t.Cleanup(func() { _ = m.Stop() })
		}
	}
	if perr != nil || rerr != nil {
		harness.SkipOrFail(t, fmt.Errorf("primary: %v; replica: %v", perr, rerr))
	}
	if err := replica.Exec(ctx, "", fmt.Sprintf("CHANGE MASTER TO MASTER_HOST='%s', MASTER_PORT=%d, MASTER_USER='root', MASTER_USE_GTID=slave_pos",
		primary.Host, primary.Port), "START SLAVE"); err != nil {
		t.Fatal(err)
	}
	return primary, replica
}

// mariadbExec runs stmts on m's database db in one session (in order, so
// a SET applies to the statements after it).
func mariadbExec(t *testing.T, m *harness.MariaDB, db string, stmts ...string) {
	t.Helper()
	c, err := client.Connect(net.JoinHostPort(m.Host, strconv.Itoa(m.Port)), "root", "", db)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, q := range stmts {
		if _, err := c.Execute(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// catchUp waits until replica has every transaction primary logged.
func catchUp(t *testing.T, primary, replica *harness.MariaDB) {
	t.Helper()
	pos := binlogGTID(t, primary)
	if got, err := replica.Query(context.Background(), "", fmt.Sprintf("SELECT MASTER_GTID_WAIT('%s', 60)", pos)); err != nil || got != "0" {
		t.Fatalf("replica did not catch up with %s: %q %v", pos, got, err)
	}
}

// promote makes replica a primary once it has caught up with primary.
func promote(t *testing.T, primary, replica *harness.MariaDB) {
	t.Helper()
	catchUp(t, primary, replica)
	mariadbExec(t, replica, "", "STOP SLAVE", "RESET SLAVE ALL")
}

// binlogGTID is m's @@GLOBAL.gtid_binlog_pos.
func binlogGTID(t *testing.T, m *harness.MariaDB) string {
	t.Helper()
	pos, err := m.Query(context.Background(), "", "SELECT @@GLOBAL.gtid_binlog_pos")
	if err != nil {
		t.Fatal(err)
	}
	return pos
}

// rowWriter writes to table t (id INT PRIMARY KEY, v INT, note) of db:
// updates of random rows among the first rows, inserts of new ones from
// next on and, with deletes, deletes, paced by pause between writes.
type rowWriter struct {
	db      string
	rows    int
	deletes bool
	pause   time.Duration
	writes  atomic.Int64
}

// start writes on m from a goroutine until the returned stop is called,
// once warm writes are done.
func (w *rowWriter) start(t *testing.T, m *harness.MariaDB, seed uint64, next int, warm int64) (stop func()) {
	t.Helper()
	addr := net.JoinHostPort(m.Host, strconv.Itoa(m.Port))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.write(ctx, addr, seed, next) }()
	for from := w.writes.Load(); w.writes.Load() < from+warm; {
		select {
		case err := <-done:
			cancel()
			t.Fatalf("writes on %s: %v", addr, err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	return func() {
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("writes on %s: %v", addr, err)
		}
	}
}

func (w *rowWriter) write(ctx context.Context, addr string, seed uint64, next int) error {
	c, err := client.Connect(addr, "root", "", w.db)
	if err != nil {
		return err
	}
	defer c.Close()
	rng := rand.New(rand.NewPCG(seed, 1))
	for ctx.Err() == nil {
		id := 1 + rng.IntN(w.rows)
		q := fmt.Sprintf("UPDATE t SET v = v + 1, note = 'seed %d' WHERE id = %d", seed, id)
		switch k := rng.IntN(10); {
		case k < 2:
			q = fmt.Sprintf("INSERT INTO t VALUES (%d, 0, 'new')", next)
			next++
		case k == 2 && w.deletes:
			q = fmt.Sprintf("DELETE FROM t WHERE id = %d", id)
		}
		if _, err := c.Execute(q); err != nil {
			return err
		}
		w.writes.Add(1)
		if w.pause > 0 {
			time.Sleep(w.pause) // pacing, not synchronisation
		}
	}
	return nil
}
