package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-cdc/sluice/integration/harness"
)

// The stateful operators' state stays bounded while changes keep coming:
// an outbox written without end, each event twice and each row deleted
// soon after it was written (the outbox pattern), through a dedup with a
// TTL; and order items moved between a fixed set of orders without end,
// through a nest (its record of moves is pruned as checkpoints pass, N1)
// and an aggregate of the items per order (its record of the groups
// written and its tombstones are pruned as checkpoints pass, A2 and A3).
// Each operator's size (sluice_operator_state_bytes, sampled) grows from
// 40% of the run (past four TTLs) to the end by at most a third of what
// the changes grew by (with no sweep, or no pruning, it grows as they
// do), whatever the writer's pace on the machine. The nest's state is a
// log-structured store (pebble), whose log and memtable grow with every
// write until a flush, pruned or not, up to what its engine fixes
// (pebbleBuffers): its peak (and the aggregate's) after 40% of the run is held to the same
// allowance over its peak before, plus those buffers. CI runs 60 s with
// a 6 s TTL; SLUICE_SOAK=20m runs 20 minutes with a 2-minute TTL.
func TestStateStaysBounded(t *testing.T) {
	// pebbleBuffers is what a pebble state holds besides its data: its
	// log and memtable (4 MiB each, transform/state).
	const pebbleBuffers = 8 << 20
	run := time.Minute
	if v, err := time.ParseDuration(os.Getenv("SLUICE_SOAK")); err == nil && v > 0 {
		run = v
	}
	ttl := run / 10
	pg := harness.PostgresT(t)
	ctx := context.Background()
	if err := pg.CreateDatabase(ctx, "soak"); err != nil {
		t.Fatal(err)
	}
	if err := pg.Exec(ctx, "soak", `CREATE TABLE outbox (id bigserial PRIMARY KEY, event_id text NOT NULL, payload text)`,
		`CREATE TABLE orders (id int PRIMARY KEY, note text)`,
		`CREATE TABLE items (id int PRIMARY KEY, order_id int, line int, sku text)`,
		`INSERT INTO orders SELECT g, 'order' || g FROM generate_series(1, 200) g`,
		`INSERT INTO items SELECT g, 1 + g % 200, g % 9, 'sku' || g FROM generate_series(1, 2000) g`,
	); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg := writeConfig(t, dir, fmt.Sprintf(`pipeline: soak
source:
  postgres:
    dsn: %s
    tables: [public.outbox, public.orders, public.items]
transforms:
  - dedup: {tables: [public.outbox], key: after.event_id, ttl: %s}
  - nest:
      output: public.order_docs
      parent: public.orders
      children: [{table: public.items, on: [order_id], as: items, order_by: [line]}]
  - aggregate:
      output: public.order_totals
      table: public.items
      group_by: [order_id]
      aggregates: [items = count(), first_line = min(line), skus = count_distinct(sku)]
sinks:
  - duckdb: {path: ./warehouse.duckdb}
offsets: {dir: ./offsets}
`, pg.DSN("soak"), ttl))
	d := startDaemon(t, cfg)
	base := "http://" + d.waitAddr(t, time.Minute)
	checkpoint := filepath.Join(dir, "offsets", "checkpoint.json")
	waitUntil(t, d, 2*time.Minute, "the initial load", func() bool { return loadedAll(t, checkpoint) })

	var stop atomic.Bool
	var events atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		conn, err := pgx.Connect(ctx, pg.DSN("soak"))
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close(ctx)
		pace := time.NewTicker(5 * time.Millisecond)
		defer pace.Stop()
		for n := 0; !stop.Load(); n++ {
			<-pace.C
			ev := fmt.Sprint("event-", n)
			// The event twice (a retried write), then the rows of an
			// event written a moment ago deleted.
			for range 2 {
				if _, err := conn.Exec(ctx, `INSERT INTO outbox (event_id, payload) VALUES ($1, repeat('p', 40))`, ev); err != nil {
					t.Error(err)
					return
				}
			}
			if _, err := conn.Exec(ctx, `DELETE FROM outbox WHERE event_id = $1`, fmt.Sprint("event-", n-10)); err != nil {
				t.Error(err)
				return
			}
			if _, err := conn.Exec(ctx, `UPDATE items SET order_id = 1 + floor(random() * 200) WHERE id = 1 + floor(random() * 2000)`); err != nil {
				t.Error(err)
				return
			}
			events.Add(1)
		}
	}()
	defer func() { stop.Store(true); wg.Wait() }()

	type sample struct {
		at                         time.Duration
		bytes, nestBytes, aggBytes float64
		events                     int64
	}
	var samples []sample
	start := time.Now()
	every := max(run/20, time.Second)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for time.Since(start) < run {
		<-tick.C
		samples = append(samples, sample{time.Since(start).Round(time.Second),
			metricWith(t, base, "sluice_operator_state_bytes", `operator="transforms[0].dedup"`),
			metricWith(t, base, "sluice_operator_state_bytes", `operator="nest:public.order_docs"`),
			metricWith(t, base, "sluice_operator_state_bytes", `operator="transforms[2].aggregate"`), events.Load()})
	}
	stop.Store(true)
	wg.Wait()
	var at40 sample
	for _, s := range samples {
		if s.at <= run*4/10 {
			at40 = s
		}
	}
	last := samples[len(samples)-1]
	var lines []string
	for _, s := range samples {
		lines = append(lines, fmt.Sprintf("%s: dedup %.0f KiB, nest %.0f KiB, aggregate %.0f KiB, %d events and item moves",
			s.at, s.bytes/1024, s.nestBytes/1024, s.aggBytes/1024, s.events))
	}
	t.Logf("ttl %s, state size sampled every %s:\n%s", ttl, every, strings.Join(lines, "\n"))
	eventsGrew := float64(last.events) / float64(max(at40.events, 1))
	if at40.bytes == 0 || at40.nestBytes == 0 || at40.aggBytes == 0 || eventsGrew < 1.5 {
		t.Fatalf("nothing to compare: %+v at 40%%, %+v at the end", at40, last)
	}
	if grew := last.bytes / at40.bytes; grew > 1+(eventsGrew-1)/3 {
		t.Fatalf("the dedup's state grew %.2f times (%.0f KiB at %s to %.0f KiB) while the events grew %.2f times, with a TTL of %s",
			grew, at40.bytes/1024, at40.at, last.bytes/1024, eventsGrew, ttl)
	}
	for _, op := range []struct {
		name  string
		bytes func(sample) float64
	}{{"nest", func(s sample) float64 { return s.nestBytes }}, {"aggregate", func(s sample) float64 { return s.aggBytes }}} {
		var peakBefore, peakAfter float64
		for _, s := range samples {
			if s.at <= run*4/10 {
				peakBefore = max(peakBefore, op.bytes(s))
			} else {
				peakAfter = max(peakAfter, op.bytes(s))
			}
		}
		if bound := peakBefore*(1+(eventsGrew-1)/3) + pebbleBuffers; peakAfter > bound {
			t.Fatalf("the %s's state peaked at %.0f KiB after 40%% of the run, past %.0f KiB (%.0f KiB before, the item moves grew %.2f times)",
				op.name, peakAfter/1024, bound/1024, peakBefore/1024, eventsGrew)
		}
	}
	d.signal(syscall.SIGTERM)
	if code := d.wait(t, time.Minute); code != 0 {
		t.Fatalf("exit %d:\n%s", code, d.logs())
	}
}
