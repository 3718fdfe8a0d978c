package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-cdc/sluice/integration/harness"
	"github.com/sluice-cdc/sluice/pipeline"
	pgsink "github.com/sluice-cdc/sluice/sinks/postgres"
	"github.com/sluice-cdc/sluice/sinks/sinktest"
)

// One pipeline, two routed sinks, two Kafka dead-letter topics:
//   - DuckDB takes only public.t, without its secret column;
//   - PostgreSQL takes every table into a pre-created target whose name
//     column is narrower than the source's; the row it refuses goes to the
//     sink's own topic with Postgres's reason;
//   - a value the source cannot represent goes to the pipeline's topic;
//
// and everything else arrives in both sinks.
func TestRoutedSinksAndKafkaDeadLetterTopics(t *testing.T) {
	pg := harness.PostgresT(t)
	k := harness.KafkaT(t)
	ctx := context.Background()
	for _, db := range []string{"app", "target"} {
		if err := pg.CreateDatabase(ctx, db); err != nil {
			t.Fatal(err)
		}
	}
	if err := pg.Exec(ctx, "app",
		`CREATE TABLE t (id int PRIMARY KEY, name text, secret text, ts timestamp)`,
		`CREATE TABLE u (id int PRIMARY KEY, v int)`,
		`INSERT INTO t SELECT g, 'n' || g, 's' || g, timestamp '2024-01-01' + g * interval '1 hour' FROM generate_series(1, 50) g`,
		`INSERT INTO u SELECT g, g * 10 FROM generate_series(1, 30) g`,
	); err != nil {
		t.Fatal(err)
	}
	if err := pg.Exec(ctx, "target", `CREATE TABLE public_t (id int PRIMARY KEY, name varchar(12), secret text,
		ts timestamp, _sluice_version bytea NOT NULL, _sluice_deleted boolean NOT NULL DEFAULT false,
		_sluice_updated_at timestamptz)`); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg := writeConfig(t, dir, fmt.Sprintf(`pipeline: routed
source:
  postgres:
    dsn: %s
    tables: [public.t, public.u]
sinks:
  - duckdb:
      path: ./sink.duckdb
      tables: [public.t]
      columns: {exclude: ["public.*.secret"]}
  - postgres:
      dsn: %s
      dlq: {kafka: {brokers: [%s], topic: routed.target.dlq}}
dlq:
  kafka: {brokers: [%s], topic: routed.dlq}
offsets: {dir: ./offsets}
runtime: {checkpoint_interval: 50ms}
`, pg.DSN("app"), pg.DSN("target"), k.Addr(), k.Addr()))
	d := startDaemon(t, cfg)
	d.waitAddr(t, time.Minute)
	waitFile(t, filepath.Join(dir, "offsets", "checkpoint.json"), d)
	if err := pg.Exec(ctx, "app",
		`INSERT INTO t VALUES (51, 'a name far too long for the target', 'x', now())`,
		`INSERT INTO t VALUES (52, 'bad time', 'x', '294270-01-01 00:00:00')`,
		`UPDATE t SET name = 'renamed' WHERE id <= 5`,
		`DELETE FROM u WHERE id > 25`,
		`INSERT INTO t SELECT g, 'n' || g, 's' || g, now() FROM generate_series(53, 80) g`,
	); err != nil {
		t.Fatal(err)
	}
	mark := commitMarkOn(t, ctx, pg.DSN("app"), `UPDATE u SET v = -1 WHERE id = 1`)
	waitSlotConfirmed(t, ctx, pg.DSN("app"), "sluice_routed", mark, d)
	d.signal(syscall.SIGTERM)
	if code := d.wait(t, time.Minute); code != 0 {
		t.Fatalf("exit %d:\n%s", code, d.logs())
	}

	pipelineLetters := readLetters(t, k, "routed.dlq")
	if len(pipelineLetters) != 1 || pipelineLetters[0].Stage != "source" || !strings.Contains(string(pipelineLetters[0].Raw), "294270") {
		t.Fatalf("pipeline topic: %+v", pipelineLetters)
	}
	sinkLetters := readLetters(t, k, "routed.target.dlq")
	if len(sinkLetters) != 1 || sinkLetters[0].Stage != "sink:postgres" || !strings.Contains(sinkLetters[0].Error, "too long") ||
		!strings.Contains(string(sinkLetters[0].Raw), "far too long") {
		t.Fatalf("sink topic: %+v", sinkLetters)
	}

	// DuckDB holds the source without the row the source dead-lettered.
	if err := pg.Exec(ctx, "app", `DELETE FROM t WHERE id = 52`); err != nil {
		t.Fatal(err)
	}
	tShape, tWant := pgRows(t, ctx, pg.DSN("app"), "app", "public", "t")
	uShape, uWant := pgRows(t, ctx, pg.DSN("app"), "app", "public", "u")

	// DuckDB: t without secret (the route's projection), and no u.
	proj, err := pipeline.NewRoute(nil, nil, []string{"public.*.secret"})
	if err != nil {
		t.Fatal(err)
	}
	rec := proj.Apply([]pipeline.Record{{Op: pipeline.OpRead, Table: tShape}})[0]
	want := map[string][]any{}
	for k, row := range tWant {
		want[k] = proj.Apply([]pipeline.Record{{Op: pipeline.OpRead, Table: tShape, After: row}})[0].After
	}
	if diff := sinktest.Diff(rec.Table, want, duckRows(t, ctx, filepath.Join(dir, "sink.duckdb"), rec.Table)); diff != "" {
		t.Fatalf("duckdb public.t:\n%s", diff)
	}
	if got := duckRows(t, ctx, filepath.Join(dir, "sink.duckdb"), uShape); len(got) != 0 {
		t.Fatalf("duckdb received %d rows of public.u, which its route excludes", len(got))
	}

	// PostgreSQL holds both tables without the row it refused as well.
	if err := pg.Exec(ctx, "app", `DELETE FROM t WHERE id = 51`); err != nil {
		t.Fatal(err)
	}
	tShape, tWant = pgRows(t, ctx, pg.DSN("app"), "app", "public", "t")
	target := pgsink.New(pgsink.Options{Name: "check", DSN: pg.DSN("target")}, nil)
	if err := target.Open(ctx); err != nil {
		t.Fatal(err)
	}
	defer target.Close(ctx)
	for _, c := range []struct {
		shape *pipeline.Table
		want  map[string][]any
	}{{tShape, tWant}, {uShape, uWant}} {
		rows, err := target.Rows(ctx, c.shape)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string][]any{}
		for _, r := range rows {
			got[sinktest.RowKey(c.shape, r)] = r
		}
		if diff := sinktest.Diff(c.shape, c.want, got); diff != "" {
			t.Fatalf("postgres %s:\n%s", c.shape.ID, diff)
		}
	}
}

// readLetters reads every dead letter of a topic.
func readLetters(t *testing.T, k *harness.Kafka, topic string) []pipeline.DeadLetter {
	t.Helper()
	cl, err := k.Client(kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var end int64
	for _, o := range endOffsets(t, k, topic) {
		end += o
	}
	var out []pipeline.DeadLetter
	for int64(len(out)) < end {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("topic %s: read %d of %d letters: %v", topic, len(out), end, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			var l pipeline.DeadLetter
			if err := json.Unmarshal(r.Value, &l); err != nil {
				t.Fatalf("letter is not JSON: %v: %q", err, r.Value)
			}
			out = append(out, l)
		})
	}
	return out
}
