package integration

import (
	"context"
	"fmt"
	"maps"
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
	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-cdc/sluice/integration/harness"
	"github.com/sluice-cdc/sluice/schema"
)

// MariaDB's parallel initial load (two readers, each at its own binlog
// offset) into Kafka in exactly-once mode, with clients inserting new
// rows and updating old ones the whole time: a read_committed consumer
// folding the topics by key ends equal to MariaDB. Stream changes
// committed between the readers' snapshots sort below the later reader's
// rows and are written after them; the sink's high-water mark must not
// skip them, nor the groups of an aggregate over b that stem from them
// (its groups that stem from b's rows alone are snapshot records too).
func TestMariaDBParallelLoadExactlyOnce(t *testing.T) {
	m, k, reg := withKafka(t, func(ctx context.Context) (*harness.MariaDB, error) {
		return harness.StartMariaDB(ctx, harness.MariaDBOptions{})
	})
	ctx := context.Background()
	const rows = 20000
	if err := m.Exec(ctx, "", "CREATE DATABASE meo"); err != nil {
		t.Fatal(err)
	}
	if err := m.Exec(ctx, "meo",
		"CREATE TABLE meo.a (id INT PRIMARY KEY, v VARCHAR(40))",
		"CREATE TABLE meo.b (id INT PRIMARY KEY, v VARCHAR(40), g INT NOT NULL DEFAULT 0)",
		fmt.Sprintf("INSERT INTO meo.a SELECT seq, CONCAT('a', seq) FROM seq_1_to_%d", rows),
		fmt.Sprintf("INSERT INTO meo.b SELECT seq, CONCAT('b', seq), seq %% 7 FROM seq_1_to_%d", rows)); err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort(m.Host, strconv.Itoa(m.Port))
	dir := t.TempDir()
	cfg := writeConfig(t, dir, fmt.Sprintf(`pipeline: meo
source:
  mysql:
    dsn: mysql://root@%s
    tables: [meo.a, meo.b]
    snapshot: {parallel: 2, chunk_rows: 1000}
transforms:
  - aggregate:
      output: meo.b_totals
      table: meo.b
      group_by: [g]
      aggregates: [n = count()]
sinks:
  - kafka:
      brokers: [%s]
      exactly_once: true
      create_topics: {partitions: 2, compact: true}
      registry: {url: %s}
offsets: {dir: ./offsets}
runtime: {checkpoint_interval: 200ms}
`, addr, k.Addr(), reg.URL()))

	// Committing clients from before the load to after it: single-row
	// inserts of new keys and updates of old ones, on both tables.
	wctx, stopWrites := context.WithCancel(ctx)
	var writes atomic.Int64
	var writers sync.WaitGroup
	for w := range 3 {
		writers.Add(1)
		go func() {
			defer writers.Done()
			c, err := client.Connect(addr, "root", "", "meo")
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			for i := 0; wctx.Err() == nil; i++ {
				table := []string{"a", "b"}[i%2]
				q := fmt.Sprintf("INSERT INTO %s (id, v) VALUES (%d, 'new %d')", table, 100000+w*1000000+i, i)
				if i%3 == 2 {
					q = fmt.Sprintf("UPDATE %s SET v = 'upd %d' WHERE id = %d", table, i, 1+(i*7919)%rows)
				}
				if table == "b" && i%6 == 3 {
					q = fmt.Sprintf("UPDATE b SET g = %d WHERE id = %d", i%11, 1+(i*104729)%rows) // moves a row between groups
				}
				if _, err := c.Execute(q); err != nil {
					t.Error(err)
					return
				}
				writes.Add(1)
			}
		}()
	}
	d := startDaemon(t, cfg)
	d.waitAddr(t, 2*time.Minute)
	waitFile(t, filepath.Join(dir, "offsets", "checkpoint.json"), d)
	for from := writes.Load(); writes.Load() < from+500; {
		time.Sleep(10 * time.Millisecond) // let the stream phase see writes too
	}
	stopWrites()
	writers.Wait()
	if err := m.Exec(ctx, "meo", "INSERT INTO a VALUES (-1, 'mark')"); err != nil {
		t.Fatal(err)
	}
	rh := newRegistryHTTP(reg)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		eoWaitDecided(t, k, "meo.meo.a")
		if _, ok := foldGeneric(t, rh, eoReadTopic(t, k, "meo.meo.a", kgo.ReadCommitted()))["-1"]; ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the mark row never reached Kafka:\n%s", d.logs())
		}
		time.Sleep(200 * time.Millisecond)
	}
	d.signal(syscall.SIGTERM)
	if code := d.wait(t, time.Minute); code != 0 {
		t.Fatalf("exit %d:\n%s", code, d.logs())
	}
	for _, table := range []string{"a", "b"} {
		topic := "meo.meo." + table
		eoWaitDecided(t, k, topic)
		got := foldGeneric(t, rh, eoReadTopic(t, k, topic, kgo.ReadCommitted()))
		want := pairs(t, m, "meo", fmt.Sprintf("SELECT CONCAT(id, '=', v) FROM %s", table))
		missing, differ := 0, 0
		var example string
		for id, v := range want {
			g, ok := got[id]
			switch {
			case !ok:
				missing++
				example = fmt.Sprintf("key %s missing (MariaDB %q)", id, v)
			case g != v:
				differ++
				example = fmt.Sprintf("key %s: Kafka %q, MariaDB %q", id, g, v)
			}
		}
		if missing > 0 || differ > 0 || len(got) != len(want) {
			t.Fatalf("%s: Kafka holds %d rows, MariaDB %d: %d missing, %d differ (%s)", topic, len(got), len(want), missing, differ, example)
		}
		t.Logf("%s: %d rows equal to MariaDB after %d concurrent writes", topic, len(got), writes.Load())
	}
	eoWaitDecided(t, k, "meo.meo.b_totals")
	got := foldColumns(t, rh, eoReadTopic(t, k, "meo.meo.b_totals", kgo.ReadCommitted()), "g", "n")
	if want := pairs(t, m, "meo", "SELECT CONCAT(g, '=', count(*)) FROM b GROUP BY g"); !maps.Equal(got, want) {
		t.Fatalf("the aggregate's groups in Kafka %v, GROUP BY in MariaDB %v", got, want)
	}
	t.Logf("meo.meo.b_totals: %d groups equal to GROUP BY", len(got))
}

// pairs runs a query of "key=value" rows on db and returns them as a map.
func pairs(t *testing.T, m *harness.MariaDB, db, query string) map[string]string {
	t.Helper()
	res, err := m.Query(context.Background(), db, query)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, line := range strings.Split(res, "\n") {
		k, v, _ := strings.Cut(line, "=")
		out[k] = v
	}
	return out
}

// foldGeneric decodes records of a table topic with the registry's
// schemas alone (as a generic consumer does) and folds them by key: the
// newest sluice.version wins; a tombstone or delete removes the key.
// Values are the "v" column as text, keyed by the "id" column.
func foldGeneric(t *testing.T, rh *registryHTTP, recs []*kgo.Record) map[string]string {
	t.Helper()
	return foldColumns(t, rh, recs, "id", "v")
}

// foldColumns is foldGeneric keyed by column keyCol, with column valCol
// as text for values.
func foldColumns(t *testing.T, rh *registryHTTP, recs []*kgo.Record, keyCol, valCol string) map[string]string {
	t.Helper()
	decode := genericAvro(t, rh)
	type held struct {
		version string
		v       string
		live    bool
	}
	state := map[string]held{}
	for _, r := range recs {
		ver, _ := recHeader(r, "sluice.version")
		key := fmt.Sprint(decode(r.Key)[keyCol])
		if h, ok := state[key]; ok && h.version >= ver {
			continue
		}
		if r.Value == nil {
			state[key] = held{version: ver}
			continue
		}
		env := decode(r.Value)
		after, _ := unwrapUnion(env["after"]).(map[string]any)
		if after == nil {
			state[key] = held{version: ver}
			continue
		}
		state[key] = held{version: ver, v: fmt.Sprint(unwrapUnion(after[valCol])), live: true}
	}
	out := map[string]string{}
	for k, h := range state {
		if h.live {
			out[k] = h.v
		}
	}
	return out
}

// genericAvro returns a decoder of framed Avro keys and values, their
// schemas fetched from the registry once each.
func genericAvro(t *testing.T, rh *registryHTTP) func(framed []byte) map[string]any {
	t.Helper()
	parsed := map[int]avro.Schema{}
	return func(framed []byte) map[string]any {
		id, payload, err := schema.Unframe(framed)
		if err != nil {
			t.Fatal(err)
		}
		s, ok := parsed[id]
		if !ok {
			if s, err = schema.ParseSchemaText(rh.schemaByID(t, id)); err != nil {
				t.Fatal(err)
			}
			parsed[id] = s
		}
		var out map[string]any
		if err := avro.Unmarshal(s, payload, &out); err != nil {
			t.Fatal(err)
		}
		return out
	}
}

// unwrapUnion returns the value of a decoded Avro union ({"string": x}),
// or v itself.
func unwrapUnion(v any) any {
	if m, ok := v.(map[string]any); ok && len(m) == 1 {
		for _, x := range m {
			return x
		}
	}
	return v
}
