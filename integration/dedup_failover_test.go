package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-cdc/sluice/integration/harness"
)

// MariaDB → dedup → Redis, killed -9 with the dedup's decisions written
// ahead of a sink that had not taken them, and resumed on the replica
// promoted in the meantime: the replay comes a generation up, from a
// binlog of another server, and must get the decisions the first run
// made (dedup Invariant D4). The changes carry commit times set by the
// test, so the TTLs run out where the test says:
//
//	A   row 10 takes e5 (t0), row 11 takes it once 10's hold ran out (t0+100s); checkpoint, stop
//	B   Redis pauses writes; row 11 is deleted (t0+110s: passes), row 12 takes e5
//	    (t0+200s), row 11 comes back with e5 (t0+210s: a duplicate of 12's, dropped,
//	    and remembered as one); kill -9 once the dedup dropped it
//	C   the replica is promoted and the config points at it; the replay of the
//	    delete must pass again
//
// Deciding the replayed delete again from the state would drop it (row 11
// is a remembered duplicate by then), and Redis would keep row 11 of step
// A for good.
func TestDedupReplayFromAnotherServerMariaDB(t *testing.T) {
	ctx := context.Background()
	primary, replica := mariadbPair(t, nil)
	rd := harness.RedisT(t)
	addr := func(m *harness.MariaDB) string { return net.JoinHostPort(m.Host, strconv.Itoa(m.Port)) }
	if err := primary.Exec(ctx, "", "CREATE DATABASE d"); err != nil {
		t.Fatal(err)
	}
	if err := primary.Exec(ctx, "d", "CREATE TABLE d.outbox (id INT PRIMARY KEY, event_id VARCHAR(20))",
		"CREATE TABLE d.plain (id INT PRIMARY KEY, v INT)"); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	config := func(m *harness.MariaDB) string {
		return writeConfig(t, dir, fmt.Sprintf(`pipeline: dedupfailover
source:
  mysql:
    dsn: mysql://root@%s
    tables: [d.outbox, d.plain]
transforms:
  - dedup: {tables: [d.outbox], key: after.event_id, ttl: 1m}
sinks:
  - redis: {name: cache, addr: "%s", format: json}
offsets: {dir: ./offsets}
runtime: {checkpoint_interval: 50ms}
`, addr(m), rd.Addr()))
	}
	checkpoint := filepath.Join(dir, "offsets", "checkpoint.json")
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Unix()
	// at runs the statements on m as committed at t0 + s seconds.
	at := func(m *harness.MariaDB, s int64, stmts ...string) {
		t.Helper()
		mariadbExec(t, m, "d", append([]string{fmt.Sprintf("SET timestamp = %d", t0+s)}, stmts...)...)
	}
	gtid := func(m *harness.MariaDB) string { t.Helper(); return binlogGTID(t, m) }

	// A: through a checkpoint, then a clean stop.
	cfg := config(primary)
	d := startDaemon(t, cfg)
	d.waitAddr(t, time.Minute)
	waitUntil(t, d, 2*time.Minute, "the initial load", func() bool { return loadedAll(t, checkpoint) })
	at(primary, 0, "INSERT INTO outbox VALUES (10, 'e5')", "INSERT INTO plain VALUES (1, 1)")
	at(primary, 100, "INSERT INTO outbox VALUES (11, 'e5')")
	waitCheckpointAt(t, d, checkpoint, gtid(primary))
	d.signal(syscall.SIGTERM)
	if code := d.wait(t, time.Minute); code != 0 {
		t.Fatalf("exit %d:\n%s", code, d.logs())
	}

	// B: the sink takes nothing; the dedup decides and writes its state.
	d = startDaemon(t, cfg)
	base := "http://" + d.waitAddr(t, time.Minute)
	waitUntil(t, d, time.Minute, "ready", func() bool { return getJSON(t, base+"/readyz", nil) == http.StatusOK })
	rc := goredis.NewClient(&goredis.Options{Addr: rd.Addr()})
	defer rc.Close()
	if err := rc.Do(ctx, "CLIENT", "PAUSE", "600000", "WRITE").Err(); err != nil {
		t.Fatal(err)
	}
	at(primary, 110, "DELETE FROM outbox WHERE id = 11")
	at(primary, 200, "INSERT INTO outbox VALUES (12, 'e5')", "INSERT INTO plain VALUES (2, 2)")
	at(primary, 210, "INSERT INTO outbox VALUES (11, 'e5')")
	waitUntil(t, d, time.Minute, "the dedup to drop row 11's return", func() bool {
		return metricValue(t, base, `sluice_dedup_dropped_total{`) >= 1
	})
	d.kill()
	d.wait(t, time.Minute)
	if err := rc.Do(ctx, "CLIENT", "UNPAUSE").Err(); err != nil {
		t.Fatal(err)
	}
	if live := outboxRows(t, ctx, rc); live["11"] != true {
		t.Fatalf("row 11's delete reached Redis before the kill (rows %v): the replay would not matter", live)
	}

	// C: the replica, promoted once it has everything, replays B.
	promote(t, primary, replica)
	cfg = config(replica)
	d = startDaemon(t, cfg)
	d.waitAddr(t, time.Minute)
	at(replica, 220, "INSERT INTO plain VALUES (3, 3)")
	waitCheckpointAt(t, d, checkpoint, gtid(replica))
	d.signal(syscall.SIGTERM)
	if code := d.wait(t, time.Minute); code != 0 {
		t.Fatalf("exit %d:\n%s", code, d.logs())
	}
	if b, err := os.ReadFile(checkpoint); err != nil || strings.Contains(string(b), `"epoch":0`) {
		t.Fatalf("the run on the replica stayed in epoch 0 (%v): %s", err, b)
	}
	// Rows 10 and 12 hold e5 in turn; row 11 was deleted, and its return
	// is a duplicate.
	if live := outboxRows(t, ctx, rc); len(live) != 2 || !live["10"] || !live["12"] {
		t.Fatalf("Redis holds outbox rows %v, want 10 and 12 (the replayed delete of 11 must pass as it did the first time)", live)
	}
	expectVerifyEqual(t, cfg)
}

// outboxRows returns the ids of the outbox rows Redis holds live.
func outboxRows(t *testing.T, ctx context.Context, rc *goredis.Client) map[string]bool {
	t.Helper()
	keys, err := rc.Keys(ctx, "d.outbox:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	live := map[string]bool{}
	for _, k := range keys {
		v, err := rc.Get(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		var row map[string]any
		if err := json.Unmarshal([]byte(v), &row); err != nil {
			t.Fatalf("%s: %v", k, err)
		}
		if row["_deleted"] != true {
			live[strings.TrimPrefix(k, "d.outbox:")] = true
		}
	}
	return live
}

// metricValue is the sum of the /metrics samples whose line starts with
// prefix (a metric name and "{", or a whole series).
func metricValue(t *testing.T, base, prefix string) float64 {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		if v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64); err == nil {
			sum += v
		}
	}
	return sum
}
