package integration

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-cdc/sluice/integration/harness"
)

// MariaDB → Kafka in exactly-once mode across a failover. A first run
// streams inserts and stops at a checkpoint; a second commits updates to
// Kafka (single-row transactions, then one of five rows) and is killed -9
// before any checkpoint covers them; the replica, promoted, takes the
// config's address and a third run replays the updates from its binlog in
// a new epoch, above the high-water mark. The mark's position (GTIDs,
// which name a transaction on both servers) must show them committed: a
// read_committed consumer sees every change exactly once, and the topic
// folded by key equals the new primary.
func TestMariaDBExactlyOnceAcrossAFailover(t *testing.T) {
	harness.SkipShort(t, "starts two MariaDB servers, a Kafka broker and a schema registry")
	primary, replica := mariadbPair(t, nil)
	k, reg, err := sharedKafka()
	if err != nil {
		harness.SkipOrFail(t, err)
	}
	ctx := context.Background()
	addr := func(m *harness.MariaDB) string { return net.JoinHostPort(m.Host, strconv.Itoa(m.Port)) }
	if err := primary.Exec(ctx, "", "CREATE DATABASE eof"); err != nil {
		t.Fatal(err)
	}
	if err := primary.Exec(ctx, "eof", "CREATE TABLE eof.t (id INT PRIMARY KEY, v INT)"); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	checkpoint := dir + "/offsets/checkpoint.json"
	config := func(m *harness.MariaDB, interval string) string {
		return writeConfig(t, dir, fmt.Sprintf(`pipeline: eof
source:
  mysql:
    dsn: mysql://root@%s
    tables: [eof.t]
sinks:
  - kafka:
      brokers: [%s]
      exactly_once: true
      create_topics: {partitions: 2, compact: true}
      registry: {url: %s}
offsets: {dir: ./offsets}
runtime: {checkpoint_interval: %s}
`, addr(m), k.Addr(), reg.URL(), interval))
	}
	exec := func(m *harness.MariaDB, stmts ...string) { t.Helper(); mariadbExec(t, m, "eof", stmts...) }
	gtid := func(m *harness.MariaDB) string { t.Helper(); return binlogGTID(t, m) }
	const topic = "eof.eof.t"
	rh := newRegistryHTTP(reg)
	// waitFor waits until the topic, read committed and folded by key,
	// has row id with value v.
	waitFor := func(d *daemonProc, id, v string) {
		t.Helper()
		deadline := time.Now().Add(2 * time.Minute)
		for {
			eoWaitDecided(t, k, topic)
			if got := foldGeneric(t, rh, eoReadTopic(t, k, topic, kgo.ReadCommitted())); got[id] == v {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("row %s = %s never reached Kafka:\n%s", id, v, d.logs())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	// 1: inserts, through a checkpoint, then a clean stop.
	d := startDaemon(t, config(primary, "50ms"))
	d.waitAddr(t, 2*time.Minute)
	waitFile(t, checkpoint, d)
	for i := 1; i <= 20; i++ {
		exec(primary, fmt.Sprintf("INSERT INTO t VALUES (%d, %d)", i, i))
	}
	waitCheckpointAt(t, d, checkpoint, gtid(primary))
	d.signal(syscall.SIGTERM)
	if code := d.wait(t, time.Minute); code != 0 {
		t.Fatalf("exit %d:\n%s", code, d.logs())
	}

	// 2: updates committed to Kafka, no checkpoint, kill -9.
	d = startDaemon(t, config(primary, "1h"))
	d.waitAddr(t, 2*time.Minute)
	eoWaitLog(t, d, "exactly-once mode", 2*time.Minute)
	for i := 1; i <= 20; i++ {
		exec(primary, fmt.Sprintf("UPDATE t SET v = %d WHERE id = %d", 100+i, i))
	}
	exec(primary, "UPDATE t SET v = v + 1000 WHERE id <= 5")
	waitFor(d, "5", "1105")
	d.kill()
	d.wait(t, time.Minute)

	// 3: the replica, promoted once it has everything, replays them.
	promote(t, primary, replica)
	d = startDaemon(t, config(replica, "50ms"))
	d.waitAddr(t, 2*time.Minute)
	exec(replica, "INSERT INTO t VALUES (999, 999)")
	waitFor(d, "999", "999")
	waitCheckpointAt(t, d, checkpoint, gtid(replica))
	d.signal(syscall.SIGTERM)
	if code := d.wait(t, time.Minute); code != 0 {
		t.Fatalf("exit %d:\n%s", code, d.logs())
	}
	if skipped := eoSkipped(eoFullLog(d)); skipped != 25 {
		t.Errorf("the run on the replica dropped %d changes as committed, want the 25 updates it replayed", skipped)
	}

	// Every change once: 21 inserts, 25 updates, each (id, op, value)
	// unique by construction.
	decode := genericAvro(t, rh)
	seen := map[string]int{}
	var dups []string
	for _, r := range eoReadTopic(t, k, topic, kgo.ReadCommitted()) {
		if r.Value == nil {
			continue // a tombstone
		}
		op, _ := recHeader(r, "sluice.op")
		after, _ := unwrapUnion(decode(r.Value)["after"]).(map[string]any)
		ev := fmt.Sprintf("%s %v=%v", op, decode(r.Key)["id"], unwrapUnion(after["v"]))
		if seen[ev]++; seen[ev] == 2 {
			dups = append(dups, ev)
		}
	}
	slices.Sort(dups)
	if len(dups) > 0 || len(seen) != 46 {
		t.Fatalf("%d distinct changes in Kafka (want 46), %d written twice: %v", len(seen), len(dups), dups)
	}
	want := map[string]string{"999": "999"}
	for i := 1; i <= 20; i++ {
		want[strconv.Itoa(i)] = strconv.Itoa(100 + i + map[bool]int{true: 1000}[i <= 5])
	}
	got := foldGeneric(t, rh, eoReadTopic(t, k, topic, kgo.ReadCommitted()))
	for id, v := range want {
		if got[id] != v {
			t.Errorf("row %s: Kafka holds %q, the database %q", id, got[id], v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("Kafka holds %d rows, the database %d", len(got), len(want))
	}
}
