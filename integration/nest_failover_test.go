package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-cdc/sluice/integration/harness"
)

// MariaDB → nest (orders with their items) → Redis, killed -9 with the
// nest's state written ahead of a sink that had not taken its documents,
// and resumed on the replica promoted in the meantime: the replay comes a
// generation up, from another server's binlog, and is applied again over
// a state that already holds it (nest Invariant N1).
//
//	A   orders 1 and 2, item 7 in order 1; checkpoint, stop
//	B   Redis pauses writes; item 7 moves to order 2, item 9 is added to
//	    order 2; kill -9 once the nest has handled them
//	C   the replica is promoted and the config points at it
//
// Re-applied, the move finds item 7 already in order 2: order 1's
// document, which still lists item 7 in Redis, is written again only
// from the moves the first server's run recorded.
func TestNestReplayFromAnotherServerMariaDB(t *testing.T) {
	ctx := context.Background()
	primary, replica := mariadbPair(t, nil)
	rd := harness.RedisT(t)
	addr := func(m *harness.MariaDB) string { return net.JoinHostPort(m.Host, strconv.Itoa(m.Port)) }
	mariadbExec(t, primary, "", "CREATE DATABASE n")
	mariadbExec(t, primary, "n", "CREATE TABLE orders (id INT PRIMARY KEY, note VARCHAR(20))",
		"CREATE TABLE items (id INT PRIMARY KEY, order_id INT, sku VARCHAR(20))")
	dir := t.TempDir()
	config := func(m *harness.MariaDB) string {
		return writeConfig(t, dir, fmt.Sprintf(`pipeline: nestfailover
source:
  mysql:
    dsn: mysql://root@%s
    tables: [n.orders, n.items]
transforms:
  - nest:
      output: n.order_docs
      parent: n.orders
      children:
        - {table: n.items, on: [order_id], as: items, order_by: [id], columns: [id, sku]}
sinks:
  - redis: {name: cache, addr: "%s", format: json, tables: [n.order_docs]}
  - duckdb: {path: ./sink.duckdb, tables: [n.orders, n.items]}
offsets: {dir: ./offsets}
runtime: {checkpoint_interval: 50ms}
`, addr(m), rd.Addr()))
	}
	checkpoint := filepath.Join(dir, "offsets", "checkpoint.json")
	rc := goredis.NewClient(&goredis.Options{Addr: rd.Addr()})
	defer rc.Close()

	// A: through a checkpoint, then a clean stop.
	cfg := config(primary)
	d := startDaemon(t, cfg)
	d.waitAddr(t, time.Minute)
	waitUntil(t, d, 2*time.Minute, "the initial load", func() bool { return loadedAll(t, checkpoint) })
	mariadbExec(t, primary, "n", "INSERT INTO orders VALUES (1, 'a'), (2, 'b')", "INSERT INTO items VALUES (7, 1, 's7')")
	waitCheckpointAt(t, d, checkpoint, binlogGTID(t, primary))
	d.signal(syscall.SIGTERM)
	if code := d.wait(t, time.Minute); code != 0 {
		t.Fatalf("exit %d:\n%s", code, d.logs())
	}
	if got := orderItems(t, ctx, rc); !slices.Equal(got["1"], []string{"s7"}) {
		t.Fatalf("after the first run Redis holds %v", got)
	}

	// B: the sink takes nothing; the nest applies the changes and writes
	// its state.
	d = startDaemon(t, cfg)
	base := "http://" + d.waitAddr(t, time.Minute)
	waitUntil(t, d, time.Minute, "ready", func() bool { return getJSON(t, base+"/readyz", nil) == http.StatusOK })
	if err := rc.Do(ctx, "CLIENT", "PAUSE", "600000", "WRITE").Err(); err != nil {
		t.Fatal(err)
	}
	transformed := func() float64 {
		return metricValue(t, base, `sluice_records_total{pipeline="nestfailover",stage="transform"}`)
	}
	before := transformed()
	mariadbExec(t, primary, "n", "UPDATE items SET order_id = 2 WHERE id = 7", "INSERT INTO items VALUES (9, 2, 's9')")
	// Two changes in, and at least their three documents out.
	waitUntil(t, d, time.Minute, "the nest to handle the changes", func() bool { return transformed() >= before+5 })
	d.kill()
	d.wait(t, time.Minute)
	if err := rc.Do(ctx, "CLIENT", "UNPAUSE").Err(); err != nil {
		t.Fatal(err)
	}
	if got := orderItems(t, ctx, rc); !slices.Equal(got["1"], []string{"s7"}) {
		t.Fatalf("order 1's new document reached Redis before the kill (%v): the replay would not matter", got)
	}

	// C: the replica, promoted once it has everything, replays B.
	promote(t, primary, replica)
	cfg = config(replica)
	d = startDaemon(t, cfg)
	d.waitAddr(t, time.Minute)
	mariadbExec(t, replica, "n", "INSERT INTO orders VALUES (3, 'c')")
	waitCheckpointAt(t, d, checkpoint, binlogGTID(t, replica))
	d.signal(syscall.SIGTERM)
	if code := d.wait(t, time.Minute); code != 0 {
		t.Fatalf("exit %d:\n%s", code, d.logs())
	}
	want := map[string][]string{"1": {}, "2": {"s7", "s9"}, "3": {}}
	if got := orderItems(t, ctx, rc); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("Redis holds the documents %v, want %v (order 1 must lose item 7, as the move did on the first server)", got, want)
	}
	expectVerifyEqual(t, cfg) // the captured tables, in DuckDB
}

// orderItems returns, per order document Redis holds live, the skus of
// its items.
func orderItems(t *testing.T, ctx context.Context, rc *goredis.Client) map[string][]string {
	t.Helper()
	keys, err := rc.Keys(ctx, "n.order_docs:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, k := range keys {
		v, err := rc.Get(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			Deleted bool `json:"_deleted"`
			Items   any  `json:"items"`
		}
		if err := json.Unmarshal([]byte(v), &doc); err != nil {
			t.Fatalf("%s: %v", k, err)
		}
		if doc.Deleted {
			continue
		}
		var items []struct {
			SKU string `json:"sku"`
		}
		switch x := doc.Items.(type) {
		case string: // the array as JSON text
			if err := json.Unmarshal([]byte(x), &items); err != nil {
				t.Fatalf("%s: items %q: %v", k, x, err)
			}
		case nil:
		default:
			b, _ := json.Marshal(x)
			if err := json.Unmarshal(b, &items); err != nil {
				t.Fatalf("%s: items %s: %v", k, b, err)
			}
		}
		skus := []string{}
		for _, it := range items {
			skus = append(skus, it.SKU)
		}
		out[k[len("n.order_docs:"):]] = skus
	}
	return out
}
