package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-cdc/sluice/integration/harness"
)

// TestDebeziumPostgresCapturesRows captures 2,000 inserts with the Debezium
// runner: 1,000 written before it starts (read from the slot's backlog) and
// 1,000 after it reported ready.
func TestDebeziumPostgresCapturesRows(t *testing.T) {
	harness.SkipShort(t, "starts PostgreSQL, Kafka and a JVM")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	pg, err := harness.StartPostgres(ctx, harness.PostgresOptions{})
	if err != nil {
		harness.SkipOrFail(t, err)
	}
	defer pg.Stop()
	k := debeziumKafka(ctx, t)

	if err := pg.CreateDatabase(ctx, "dbz"); err != nil {
		t.Fatal(err)
	}
	if err := pg.Exec(ctx, "dbz",
		"CREATE TABLE public.items (id bigint PRIMARY KEY, name text NOT NULL, qty int NOT NULL)",
		"CREATE PUBLICATION dbz_pub FOR TABLE public.items",
		"SELECT pg_create_logical_replication_slot('dbz_slot', 'pgoutput')",
	); err != nil {
		t.Fatal(err)
	}
	insert := func(from, to int) {
		t.Helper()
		q := fmt.Sprintf("INSERT INTO public.items SELECT g, 'item ' || g, g %% 7 FROM generate_series(%d, %d) g", from, to)
		if err := pg.Exec(ctx, "dbz", q); err != nil {
			t.Fatal(err)
		}
	}
	insert(1, 500)
	insert(501, 1000)

	run := startDebeziumT(ctx, t, DebeziumOptions{
		Connector:    "postgres",
		Host:         pg.Host,
		Port:         pg.Port,
		User:         "postgres",
		Database:     "dbz",
		Tables:       []string{"public.items"},
		Slot:         "dbz_slot",
		Publication:  "dbz_pub",
		SnapshotMode: "no_data",
		TopicPrefix:  "dbzpg",
		Brokers:      k.Brokers(),
		Records:      2000,
	})
	insert(1001, 1500)
	insert(1501, 2000)
	waitDebeziumT(ctx, t, run, 2000)
	checkDebeziumTopic(ctx, t, k, "dbzpg.public.items", 2000)
}

// TestDebeziumMariaDBCapturesRows starts the runner before the writes
// (snapshot no_data: from the binlog's current position) and captures 2,000
// inserts.
func TestDebeziumMariaDBCapturesRows(t *testing.T) {
	harness.SkipShort(t, "starts MariaDB, Kafka and a JVM")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	m, err := harness.StartMariaDB(ctx, harness.MariaDBOptions{})
	if err != nil {
		harness.SkipOrFail(t, err)
	}
	defer m.Stop()
	k := debeziumKafka(ctx, t)

	if err := m.CreateDatabase(ctx, "dbz"); err != nil {
		t.Fatal(err)
	}
	if err := m.Exec(ctx, "dbz", "CREATE TABLE items (id BIGINT PRIMARY KEY, name VARCHAR(64) NOT NULL, qty INT NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	// Written before the start: not captured (streaming from now).
	if err := m.Exec(ctx, "dbz", "INSERT INTO items VALUES (0, 'before', 0)"); err != nil {
		t.Fatal(err)
	}

	run := startDebeziumT(ctx, t, DebeziumOptions{
		Connector:    "mariadb",
		Host:         m.Host,
		Port:         m.Port,
		User:         "root",
		Database:     "dbz",
		Tables:       []string{"dbz.items"},
		ServerID:     4242,
		SnapshotMode: "no_data",
		TopicPrefix:  "dbzmaria",
		Brokers:      k.Brokers(),
		Records:      2000,
	})
	for tx := 0; tx < 4; tx++ {
		var q strings.Builder
		q.WriteString("INSERT INTO items VALUES ")
		for i := tx*500 + 1; i <= (tx+1)*500; i++ {
			if i > tx*500+1 {
				q.WriteByte(',')
			}
			fmt.Fprintf(&q, "(%d, 'item %d', %d)", i, i, i%7)
		}
		if err := m.Exec(ctx, "dbz", q.String()); err != nil {
			t.Fatal(err)
		}
	}
	waitDebeziumT(ctx, t, run, 2000)
	checkDebeziumTopic(ctx, t, k, "dbzmaria.dbz.items", 2000)
}

func debeziumKafka(ctx context.Context, t *testing.T) *harness.Kafka {
	t.Helper()
	k, err := harness.StartKafka(ctx, harness.KafkaOptions{})
	if err != nil {
		harness.SkipOrFail(t, err)
	}
	t.Cleanup(func() { _ = k.Stop() })
	return k
}

func startDebeziumT(ctx context.Context, t *testing.T, o DebeziumOptions) *DebeziumRun {
	t.Helper()
	start := time.Now()
	run, err := StartDebezium(ctx, o)
	if errors.Is(err, ErrDebeziumUnavailable) {
		harness.SkipOrFail(t, err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(run.Kill)
	t.Logf("debezium streaming %s after the start", time.Since(start).Round(time.Millisecond))
	return run
}

func waitDebeziumT(ctx context.Context, t *testing.T, run *DebeziumRun, want int) DebeziumResult {
	t.Helper()
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	res, err := run.Wait(wctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("debezium: %d records, ready %s, first %s, wall %s, CPU %s, peak RSS %.0f MiB",
		res.Records, res.Ready, res.FirstRecord, res.Wall, res.CPU, res.PeakRSS/(1<<20))
	if res.Records != want || res.Wall <= 0 || res.FirstRecord <= 0 || res.FirstRecord > res.Wall || res.CPU <= 0 || res.PeakRSS <= 0 {
		t.Fatalf("result %+v, want %d records and positive times", res, want)
	}
	return res
}

// checkDebeziumTopic checks that topic holds want records and that the
// first one is a Debezium insert event in plain JSON, of row id 1.
func checkDebeziumTopic(ctx context.Context, t *testing.T, k *harness.Kafka, topic string, want int64) {
	t.Helper()
	cl, err := k.Client(kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		n += o.Offset
	})
	if n != want {
		t.Fatalf("topic %s holds %d records, want %d", topic, n, want)
	}

	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var rec *kgo.Record
	for rec == nil {
		fs := cl.PollRecords(pctx, 1)
		if err := fs.Err0(); err != nil {
			t.Fatalf("consuming %s: %v", topic, err)
		}
		if recs := fs.Records(); len(recs) > 0 {
			rec = recs[0]
		}
	}
	var ev struct {
		Op    string         `json:"op"`
		After map[string]any `json:"after"`
		Src   map[string]any `json:"source"`
	}
	if err := json.Unmarshal(rec.Value, &ev); err != nil {
		t.Fatalf("value %q: %v", rec.Value, err)
	}
	if ev.Op != "c" || ev.After["id"] != float64(1) || ev.Src == nil {
		t.Fatalf("value %s: want a Debezium insert envelope (op c, after.id 1, source)", rec.Value)
	}
	var key map[string]any
	if err := json.Unmarshal(rec.Key, &key); err != nil || key["id"] == nil {
		t.Fatalf("key %q: want {\"id\":…} (%v)", rec.Key, err)
	}
	t.Logf("first record: key %s value %.300s", rec.Key, rec.Value)
}
