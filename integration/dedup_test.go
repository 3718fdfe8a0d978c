package integration

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-cdc/sluice/integration/harness"
)

// Postgres → dedup → DuckDB, under a writer that writes outbox events
// twice (the duplicate in the same transaction or a later one), updates
// and deletes outbox rows, writes rows with no event id and changes a
// second table, with kill -9 at random moments. In the end DuckDB holds,
// of the outbox, exactly the source's rows that hold their event (the
// first row written for it) and those with no event id, each with its
// last values, nothing went to the dead-letter queue, and `sluice verify`
// finds the other table equal to the source (leaving the outbox to the
// dedup).
func TestDedupOutboxSurvivesKills(t *testing.T) {
	pg := harness.PostgresT(t)
	ctx := context.Background()
	if err := pg.CreateDatabase(ctx, "shop"); err != nil {
		t.Fatal(err)
	}
	if err := pg.Exec(ctx, "shop",
		`CREATE TABLE outbox (id bigserial PRIMARY KEY, event_id text, n int NOT NULL DEFAULT 0)`,
		`CREATE TABLE orders (id bigint PRIMARY KEY, amount int NOT NULL)`,
	); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg := writeConfig(t, dir, fmt.Sprintf(`pipeline: outbox
source:
  postgres:
    dsn: %s
    tables: [public.outbox, public.orders]
transforms:
  - dedup: {tables: [public.outbox], key: after.event_id, ttl: 1h}
sinks:
  - duckdb: {name: warehouse, path: ./warehouse.duckdb}
offsets: {dir: ./offsets}
runtime: {checkpoint_interval: 50ms}
`, pg.DSN("shop")))
	checkpoint := filepath.Join(dir, "offsets", "checkpoint.json")
	d := startDaemon(t, cfg)
	d.waitAddr(t, time.Minute)
	waitUntil(t, d, 2*time.Minute, "the initial load", func() bool { return loadedAll(t, checkpoint) })

	// The writer, one connection: commit order is the order of the rows'
	// ids, so the row that holds an event is the first written for it.
	var (
		stop   atomic.Bool
		writes atomic.Int64
		wg     sync.WaitGroup
		mu     sync.Mutex
		holder = map[string]int64{} // event → the first row written for it
		dups   int
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		conn, err := pgx.Connect(ctx, pg.DSN("shop"))
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close(ctx)
		rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 30))
		pace := time.NewTicker(2 * time.Millisecond)
		defer pace.Stop()
		var events []string
		var rows []int64
		for next := 0; !stop.Load(); {
			<-pace.C
			tx, err := conn.Begin(ctx)
			if err != nil {
				t.Error(err)
				return
			}
			insert := func(ev any) {
				var id int64
				if err := tx.QueryRow(ctx, `INSERT INTO outbox (event_id, n) VALUES ($1, 1) RETURNING id`, ev).Scan(&id); err != nil {
					t.Error(err)
					return
				}
				rows = append(rows, id)
				if s, ok := ev.(string); ok {
					mu.Lock()
					if _, held := holder[s]; held {
						dups++
					} else {
						holder[s] = id
					}
					mu.Unlock()
				}
			}
			for range 1 + rng.IntN(3) {
				switch k := rng.IntN(10); {
				case k < 4: // a new event, written twice in the same transaction now and then
					next++
					ev := fmt.Sprint("e", next)
					events = append(events, ev)
					insert(ev)
					if rng.IntN(3) == 0 {
						insert(ev)
					}
				case k < 6 && len(events) > 0: // a retry of an earlier event
					insert(events[rng.IntN(len(events))])
				case k == 6: // no event id
					insert(nil)
				case k == 7 && len(rows) > 0:
					if _, err := tx.Exec(ctx, `DELETE FROM outbox WHERE id = $1`, rows[rng.IntN(len(rows))]); err != nil {
						t.Error(err)
					}
				case k == 8 && len(rows) > 0:
					if _, err := tx.Exec(ctx, `UPDATE outbox SET n = n + 1 WHERE id = $1`, rows[rng.IntN(len(rows))]); err != nil {
						t.Error(err)
					}
				default:
					id := rng.IntN(500)
					if _, err := tx.Exec(ctx, `INSERT INTO orders VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET amount = orders.amount + 1`, id, rng.IntN(100)); err != nil {
						t.Error(err)
					}
					if rng.IntN(4) == 0 {
						if _, err := tx.Exec(ctx, `DELETE FROM orders WHERE id = $1`, rng.IntN(500)); err != nil {
							t.Error(err)
						}
					}
				}
			}
			if err := tx.Commit(ctx); err != nil {
				t.Error(err)
				return
			}
			writes.Add(1)
		}
	}()
	defer func() { stop.Store(true); wg.Wait() }()

	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 31))
	kills := harness.Trials(3)
	var logs strings.Builder
	d = killAfterCheckpoints(t, d, cfg, checkpoint, kills, 800*time.Millisecond, rng, func(i int, d *daemonProc) {
		logs.WriteString(d.logs())
		t.Logf("kill %d of %d after %d writes", i+1, kills, writes.Load())
	})
	waitCheckpoints(t, d, checkpoint, 2)
	stop.Store(true)
	wg.Wait()
	stopDrained(t, ctx, d, pg.DSN("shop"), "sluice_outbox", `UPDATE orders SET amount = amount WHERE id = (SELECT min(id) FROM orders)`, &logs)
	// verify compares the other table, and leaves the outbox to the
	// dedup (checked below).
	expectVerifyEqual(t, cfg)

	// The outbox: the source's rows that hold their event, or have none.
	want := map[int64]string{}
	conn, err := pgx.Connect(ctx, pg.DSN("shop"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rs, err := conn.Query(ctx, `SELECT id, coalesce(event_id, ''), n FROM outbox`)
	if err != nil {
		t.Fatal(err)
	}
	source := 0
	for rs.Next() {
		var id int64
		var ev string
		var n int
		if err := rs.Scan(&id, &ev, &n); err != nil {
			t.Fatal(err)
		}
		source++
		if ev == "" || holder[ev] == id {
			want[id] = fmt.Sprint(ev, "/", n)
		}
	}
	if err := rs.Err(); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("duckdb", filepath.Join(dir, "warehouse.duckdb"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	got := map[int64]string{}
	sr, err := db.Query(`SELECT id, coalesce(event_id, ''), n FROM main.public_outbox WHERE NOT _sluice_deleted`)
	if err != nil {
		t.Fatal(err)
	}
	defer sr.Close()
	for sr.Next() {
		var id int64
		var ev string
		var n int
		if err := sr.Scan(&id, &ev, &n); err != nil {
			t.Fatal(err)
		}
		got[id] = fmt.Sprint(ev, "/", n)
	}
	if !maps.Equal(got, want) {
		var diff []string
		for id, w := range want {
			if got[id] != w {
				diff = append(diff, fmt.Sprintf("row %d: sink %q, want %q", id, got[id], w))
			}
		}
		for id, g := range got {
			if _, ok := want[id]; !ok {
				diff = append(diff, fmt.Sprintf("row %d: sink %q, want none", id, g))
			}
		}
		t.Fatalf("outbox in DuckDB differs from its deduplicated source (%d differences):\n%s", len(diff), strings.Join(diff[:min(len(diff), 20)], "\n"))
	}
	if dups == 0 || len(want) == 0 {
		t.Fatalf("the writer wrote %d duplicates, %d rows expected: nothing was tested", dups, len(want))
	}
	t.Logf("%d writes, %d kills; %d outbox rows in the source, %d duplicates written, %d rows in DuckDB", writes.Load(), kills, source, dups, len(got))
}
