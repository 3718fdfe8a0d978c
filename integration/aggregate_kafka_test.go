package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-cdc/sluice/integration/harness"
	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/transform/window"
)

// Postgres lines → aggregate per basket → Kafka in exactly-once mode,
// with the lines themselves, under a writer that inserts, updates, moves
// lines between baskets, changes keys and deletes, and kill -9 at random
// moments (SLUICE_TRIALS). Checkpoints are 2 s apart, so every resume
// replays changes the aggregate's state already holds: the groups it
// writes again must carry Origins that never run ahead of the replay, or
// the sink's high-water mark would skip the replayed lines it never
// committed. At the end a read_committed consumer's lines, folded by key
// and version, equal Postgres, and the aggregate's topic, folded, equals
// SQL's GROUP BY basket.
func TestAggregateIntoKafkaExactlyOnceSurvivesKills(t *testing.T) {
	pg := harness.PostgresT(t)
	k, reg, err := sharedKafka()
	if err != nil {
		harness.SkipOrFail(t, err)
	}
	ctx := context.Background()
	if err := pg.CreateDatabase(ctx, "aggeo"); err != nil {
		t.Fatal(err)
	}
	if err := pg.Exec(ctx, "aggeo",
		`CREATE TABLE lines (id int PRIMARY KEY, basket int NOT NULL, qty int NOT NULL, price numeric(10,2))`,
		`INSERT INTO lines SELECT g, 1 + g % 40, g % 7, g * 0.25 FROM generate_series(1, 400) g`,
	); err != nil {
		t.Fatal(err)
	}
	dsn := pg.DSN("aggeo")
	dir := t.TempDir()
	cfg := writeConfig(t, dir, fmt.Sprintf(`pipeline: aggeo
source:
  postgres:
    dsn: %s
    tables: [public.lines]
    heartbeat_interval: 1s
    status_interval: 1s
transforms:
  - aggregate:
      output: public.basket_totals
      table: public.lines
      group_by: [basket]
      aggregates: [lines = count(), quantity = sum(qty), dearest = max(price)]
sinks:
  - kafka:
      brokers: [%s]
      envelope: debezium
      exactly_once: true
      create_topics: {partitions: 3, compact: true}
      producer: {delivery_timeout: 10s}
      registry: {url: %s}
offsets: {dir: ./offsets}
runtime:
  checkpoint_interval: 2s
  retry: {initial: 100ms, max: 2s}
`, dsn, k.Addr(), reg.URL()))
	checkpoint := filepath.Join(dir, "offsets", "checkpoint.json")
	d := startDaemon(t, cfg)
	d.waitAddr(t, time.Minute)
	waitUntil(t, d, 2*time.Minute, "the initial load", func() bool { return loadedAll(t, checkpoint) })

	var (
		stop   atomic.Bool
		writes atomic.Int64
		wg     sync.WaitGroup
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close(ctx)
		rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 50))
		pace := time.NewTicker(3 * time.Millisecond)
		defer pace.Stop()
		next := 10_000
		for !stop.Load() {
			<-pace.C
			line := 1 + rng.IntN(450)
			var q string
			var args []any
			switch x := rng.IntN(10); {
			case x < 3:
				next++
				q, args = `INSERT INTO lines VALUES ($1, $2, $3, $4)`, []any{next, 1 + rng.IntN(45), rng.IntN(9), fmt.Sprintf("%d.%02d", rng.IntN(500), rng.IntN(100))}
			case x < 6:
				q, args = `UPDATE lines SET qty = qty + 1, price = price + 0.05 WHERE id = $1`, []any{line}
			case x < 8: // to another basket
				q, args = `UPDATE lines SET basket = $2 WHERE id = $1`, []any{line, 1 + rng.IntN(45)}
			case x < 9:
				next++
				q, args = `UPDATE lines SET id = $2 WHERE id = $1`, []any{line, next}
			default:
				q, args = `DELETE FROM lines WHERE id = $1`, []any{line}
			}
			if _, err := conn.Exec(ctx, q, args...); err != nil {
				t.Error(err)
				return
			}
			writes.Add(1)
		}
	}()
	defer func() { stop.Store(true); wg.Wait() }()

	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 51))
	kills := harness.Trials(2)
	var logs strings.Builder
	d = killAfterCheckpoints(t, d, cfg, checkpoint, kills, 1500*time.Millisecond, rng, func(i int, d *daemonProc) {
		logs.WriteString(d.logs())
		t.Logf("kill %d of %d after %d writes", i+1, kills, writes.Load())
		if i == kills-1 {
			// The changes the last run applied but Kafka had not
			// committed stay the last of their rows: a replay that
			// skipped them would leave the topics behind Postgres.
			stop.Store(true)
			wg.Wait()
		}
	})
	waitCheckpoints(t, d, checkpoint, 2)
	stop.Store(true)
	wg.Wait()
	if writes.Load() < 100 {
		t.Fatalf("the writer made %d changes: nothing was tested", writes.Load())
	}
	stopDrained(t, ctx, d, dsn, "sluice_aggeo", `UPDATE lines SET qty = qty WHERE id = (SELECT min(id) FROM lines)`, &logs)

	// The lines: folded by key and version, Kafka equals Postgres.
	linesTable, want := pgRows(t, ctx, dsn, "aggeo", "public", "lines")
	for _, topic := range []string{"aggeo.public.lines", "aggeo.public.basket_totals"} {
		eoWaitDecided(t, k, topic)
	}
	dec := newAvroDecoder(t, newRegistryHTTP(reg), "aggeo", linesTable, basketTotals(linesTable))
	diffState(t, linesTable, want, fold(dec.decode(t, eoReadTopic(t, k, "aggeo.public.lines", kgo.ReadCommitted()))), "aggeo.public.lines")

	// The groups: folded, they equal SQL's GROUP BY.
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT basket, count(*), sum(qty), max(price)::text FROM lines GROUP BY basket`)
	if err != nil {
		t.Fatal(err)
	}
	groups := map[string]string{}
	for rows.Next() {
		var basket, n, qty int64
		var dearest *string
		if err := rows.Scan(&basket, &n, &qty, &dearest); err != nil {
			t.Fatal(err)
		}
		hi := "NULL"
		if dearest != nil {
			hi = *dearest
		}
		groups[fmt.Sprint(basket)] = fmt.Sprintf("lines %d quantity %d dearest %s", n, qty, hi)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	have := map[string]string{}
	for _, row := range fold(dec.decode(t, eoReadTopic(t, k, "aggeo.public.basket_totals", kgo.ReadCommitted()))) {
		hi := "NULL"
		if row[3] != nil {
			hi = fmt.Sprint(row[3])
		}
		have[fmt.Sprint(row[0])] = fmt.Sprintf("lines %v quantity %v dearest %s", row[1], row[2], hi)
	}
	var diffs []string
	for b, w := range groups {
		if have[b] != w {
			diffs = append(diffs, fmt.Sprintf("basket %s: SQL %q, Kafka %q", b, w, have[b]))
		}
	}
	for b, h := range have {
		if _, ok := groups[b]; !ok {
			diffs = append(diffs, fmt.Sprintf("basket %s: no lines in the source, Kafka %q", b, h))
		}
	}
	if len(diffs) > 0 {
		sort.Strings(diffs)
		t.Fatalf("%d of %d groups in Kafka differ from SQL's GROUP BY:\n%s", len(diffs), len(groups), strings.Join(diffs[:min(len(diffs), 20)], "\n"))
	}
	t.Logf("%d writes, %d kills; %d lines and %d groups in Kafka equal Postgres", writes.Load(), kills, len(want), len(groups))
}

// basketTotals is the aggregate's output shape over lines, as the
// aggregate builds it: the group column as the input declares it, then
// the aggregates typed as a window's.
func basketTotals(lines *pipeline.Table) *pipeline.Table {
	col := func(name string) *pipeline.Column {
		for i := range lines.Columns {
			if lines.Columns[i].Name == name {
				return &lines.Columns[i]
			}
		}
		panic(name)
	}
	basket := *col("basket")
	basket.Key, basket.Missing = true, nil
	out := &pipeline.Table{ID: pipeline.TableID{Schema: "public", Table: "basket_totals"}, Generation: lines.Generation,
		Columns: []pipeline.Column{basket}, KeyIdx: []int{0}}
	for _, a := range []struct {
		f    window.Func
		name string
		in   *pipeline.Column
	}{{window.CountRows, "lines", nil}, {window.Sum, "quantity", col("qty")}, {window.Max, "dearest", col("price")}} {
		c, err := window.ResultColumn(a.f, a.name, a.in)
		if err != nil {
			panic(err)
		}
		out.Columns = append(out.Columns, c)
	}
	return out
}
