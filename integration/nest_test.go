package integration

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/apd/v3"
	"github.com/jackc/pgx/v5"

	"github.com/sluice-cdc/sluice/integration/harness"
)

// Postgres customers, orders and order_items → nest (each order with its
// items, by line number, and its customer) → OpenSearch, and an aggregate
// of the items per order → DuckDB, under a writer
// that inserts, updates and deletes items, moves items between orders,
// renames customers (every order of theirs must follow), moves orders to
// other customers, inserts and deletes orders, with kill -9 at random
// moments (SLUICE_TRIALS of them). In the end every live document in the
// index equals the document SQL builds from the source (json_agg over
// the items, ordered as the nest orders them), no order is missing or
// left over, the aggregate's table equals SQL's GROUP BY order_id (every
// function, every group, none left over), nothing went to the dead-letter
// queue, and `sluice verify`
// finds the captured tables (also written to DuckDB) equal to the source.
func TestNestDocumentsSurviveKills(t *testing.T) {
	pg := harness.PostgresT(t)
	node := sharedSearch(t, harness.OpenSearch)
	ctx := context.Background()
	if err := pg.CreateDatabase(ctx, "nest"); err != nil {
		t.Fatal(err)
	}
	if err := pg.Exec(ctx, "nest",
		`CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL)`,
		`CREATE TABLE orders (id int PRIMARY KEY, customer_id int, note text, total numeric(10,2))`,
		`CREATE TABLE order_items (id int PRIMARY KEY, order_id int, line_no int, sku text, qty int, price numeric(10,2))`,
		`INSERT INTO customers SELECT g, 'customer' || g FROM generate_series(1, 30) g`,
		`INSERT INTO orders SELECT g, 1 + g % 32, 'order' || g, g * 1.5 FROM generate_series(1, 200) g`,
		`INSERT INTO order_items SELECT g, 1 + g % 210, CASE WHEN g % 13 = 0 THEN NULL ELSE g % 7 END, 'sku' || g, g % 5, g * 0.25
			FROM generate_series(1, 800) g`,
	); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg := writeConfig(t, dir, fmt.Sprintf(`pipeline: nested
source:
  postgres:
    dsn: %s
    tables: [public.customers, public.orders, public.order_items]
transforms:
  - nest:
      output: public.nested_orders
      parent: public.orders
      children:
        - {table: public.order_items, on: [order_id], as: items, order_by: [line_no], columns: [line_no, sku, qty, price]}
      with:
        - {table: public.customers, on: [customer_id], as: customer, columns: [name]}
  - aggregate:
      output: analytics.order_totals
      table: public.order_items
      group_by: [order_id]
      aggregates: [items = count(), lines = count(line_no), quantity = sum(qty), mean_price = avg(price),
        cheapest = min(price), dearest = max(price), skus = count_distinct(sku)]
sinks:
  - opensearch: {name: docs, urls: ["%s"], tables: [public.nested_orders], refresh: true}
  - duckdb: {name: warehouse, path: ./warehouse.duckdb, tables: [public.customers, public.orders, public.order_items, analytics.order_totals]}
offsets: {dir: ./offsets}
runtime: {checkpoint_interval: 50ms}
`, pg.DSN("nest"), node.URL))
	checkpoint := filepath.Join(dir, "offsets", "checkpoint.json")
	d := startDaemon(t, cfg)
	d.waitAddr(t, time.Minute)
	waitUntil(t, d, 2*time.Minute, "the initial load", func() bool { return loadedAll(t, checkpoint) })

	var (
		stop                   atomic.Bool
		writes, moves, renames atomic.Int64
		wg                     sync.WaitGroup
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		conn, err := pgx.Connect(ctx, pg.DSN("nest"))
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close(ctx)
		rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 40))
		pace := time.NewTicker(3 * time.Millisecond)
		defer pace.Stop()
		nextItem, nextOrder := 10_000, 10_000
		for !stop.Load() {
			<-pace.C
			tx, err := conn.Begin(ctx)
			if err != nil {
				t.Error(err)
				return
			}
			exec := func(q string, args ...any) {
				if _, err := tx.Exec(ctx, q, args...); err != nil {
					t.Error(err)
				}
			}
			order := func() int { return 1 + rng.IntN(220) } // some do not exist
			item := func() int { return 1 + rng.IntN(900) }
			for range 1 + rng.IntN(3) {
				switch k := rng.IntN(20); {
				case k < 4:
					nextItem++
					var line any = rng.IntN(9)
					if rng.IntN(10) == 0 {
						line = nil
					}
					exec(`INSERT INTO order_items VALUES ($1, $2, $3, $4, $5, $6)`, nextItem, order(), line, fmt.Sprint("new", nextItem), rng.IntN(9), fmt.Sprintf("%d.%02d", rng.IntN(100), rng.IntN(100)))
				case k < 8:
					exec(`UPDATE order_items SET qty = qty + 1, price = price + 0.01 WHERE id = $1`, item())
				case k < 10:
					exec(`UPDATE order_items SET line_no = $2 WHERE id = $1`, item(), rng.IntN(9))
				case k < 12: // an item moved to another order
					exec(`UPDATE order_items SET order_id = $2 WHERE id = $1`, item(), order())
					moves.Add(1)
				case k < 13:
					exec(`DELETE FROM order_items WHERE id = $1`, item())
				case k < 14: // a customer renamed: all its orders follow
					exec(`UPDATE customers SET name = $2 WHERE id = $1`, 1+rng.IntN(30), fmt.Sprint("renamed", rng.IntN(1000)))
					renames.Add(1)
				case k < 15:
					exec(`UPDATE orders SET customer_id = $2 WHERE id = $1`, order(), 1+rng.IntN(32))
				case k < 16:
					exec(`UPDATE orders SET note = note || '+', total = total + 1 WHERE id = $1`, order())
				case k < 17:
					nextOrder++
					exec(`INSERT INTO orders VALUES ($1, $2, 'late', 1)`, nextOrder, 1+rng.IntN(32))
					exec(`UPDATE order_items SET order_id = $2 WHERE id = $1`, item(), nextOrder)
				case k < 18:
					exec(`DELETE FROM orders WHERE id = $1`, order())
				case k < 19: // an item's key changes
					nextItem++
					exec(`UPDATE order_items SET id = $2 WHERE id = $1`, item(), nextItem)
				default: // several lines of one order renumbered in one statement
					exec(`UPDATE order_items SET line_no = 8 - coalesce(line_no, 0) WHERE order_id = $1`, order())
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

	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 41))
	kills := harness.Trials(2)
	var logs strings.Builder
	d = killAfterCheckpoints(t, d, cfg, checkpoint, kills, 800*time.Millisecond, rng, func(i int, d *daemonProc) {
		logs.WriteString(d.logs())
		t.Logf("kill %d of %d after %d writes", i+1, kills, writes.Load())
	})
	waitCheckpoints(t, d, checkpoint, 2)
	stop.Store(true)
	wg.Wait()
	stopDrained(t, ctx, d, pg.DSN("nest"), "sluice_nested", `UPDATE customers SET name = name WHERE id = 1`, &logs)
	expectVerifyEqual(t, cfg)

	want := sqlDocuments(t, ctx, pg.DSN("nest"))
	got := searchDocuments(t, node.URL, "public.nested_orders")
	var diff []string
	for id, w := range want {
		if g, ok := got[id]; !ok {
			diff = append(diff, fmt.Sprintf("order %s: missing from the index, want %s", id, w))
		} else if g != w {
			diff = append(diff, fmt.Sprintf("order %s:\n  index %s\n  SQL   %s", id, g, w))
		}
	}
	for id, g := range got {
		if _, ok := want[id]; !ok {
			diff = append(diff, fmt.Sprintf("order %s: in the index (%s) but not in the source", id, g))
		}
	}
	if len(diff) > 0 {
		sort.Strings(diff)
		t.Fatalf("%d of %d documents differ from SQL's:\n%s", len(diff), len(want), strings.Join(diff[:min(len(diff), 10)], "\n"))
	}
	groups := compareGroupBy(t, ctx, pg.DSN("nest"), filepath.Join(dir, "warehouse.duckdb"))
	if moves.Load() == 0 || renames.Load() == 0 {
		t.Fatalf("the writer moved %d items and renamed %d customers: nothing was tested", moves.Load(), renames.Load())
	}
	t.Logf("%d writes (%d item moves, %d renames), %d kills; %d documents and %d groups equal SQL's", writes.Load(), moves.Load(), renames.Load(), kills, len(want), groups)
}

// sqlDocuments builds every order's document from the source with SQL:
// its columns, its customer's name and its items as json_agg ordered by
// line number (NULLs last), then id. Values are in canonicalDoc's form.
func sqlDocuments(t *testing.T, ctx context.Context, dsn string) map[string]string {
	t.Helper()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT o.id, json_build_object('id', o.id, 'customer_id', o.customer_id, 'note', o.note, 'total', o.total,
			'customer', CASE WHEN c.id IS NULL THEN NULL ELSE json_build_object('name', c.name) END,
			'items', coalesce((SELECT json_agg(json_build_object('line_no', i.line_no, 'sku', i.sku, 'qty', i.qty, 'price', i.price)
				ORDER BY i.line_no NULLS LAST, i.id) FROM order_items i WHERE i.order_id = o.id), '[]'))::text
		FROM orders o LEFT JOIN customers c ON c.id = o.customer_id`)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for rows.Next() {
		var id int
		var doc string
		if err := rows.Scan(&id, &doc); err != nil {
			t.Fatal(err)
		}
		out[strconv.Itoa(id)] = canonicalDoc(t, []byte(doc))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// searchDocuments reads the live documents of index, by id, in
// canonicalDoc's form without sluice's own fields.
func searchDocuments(t *testing.T, url, index string) map[string]string {
	t.Helper()
	var res struct {
		Hits struct {
			Hits []struct {
				ID     string          `json:"_id"`
				Source json.RawMessage `json:"_source"`
			} `json:"hits"`
		} `json:"hits"`
	}
	searchGet(t, url+"/"+index+"/_search", []byte(`{"size":10000,"query":{"bool":{"must_not":{"term":{"_sluice_deleted":true}}}}}`), &res)
	out := map[string]string{}
	for _, h := range res.Hits.Hits {
		// The sink writes a decimal column as a string (exactly); the
		// nest embeds decimals as JSON numbers.
		var m map[string]any
		if err := json.Unmarshal(h.Source, &m); err != nil {
			t.Fatal(err)
		}
		if s, ok := m["total"].(string); ok {
			m["total"] = json.Number(s)
		}
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		doc := canonicalDoc(t, b)
		out[fmt.Sprint(m["id"])] = doc
	}
	return out
}

// canonicalDoc re-renders a JSON document with sorted members, numbers by
// value (12.50 = 12.5) and without sluice's fields (_sluice_*).
func canonicalDoc(t *testing.T, b []byte) string {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		t.Fatalf("document %s: %v", b, err)
	}
	var norm func(any) any
	norm = func(v any) any {
		switch x := v.(type) {
		case json.Number:
			f, err := x.Float64()
			if err != nil {
				t.Fatalf("number %s: %v", x, err)
			}
			return f
		case map[string]any:
			for k, e := range x {
				if strings.HasPrefix(k, "_sluice") {
					delete(x, k)
					continue
				}
				x[k] = norm(e)
			}
		case []any:
			for i := range x {
				x[i] = norm(x[i])
			}
		}
		return v
	}
	out, err := json.Marshal(norm(v)) // maps marshal with sorted keys
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// compareGroupBy fails unless DuckDB's analytics.order_totals equals
// SQL's GROUP BY order_id over the source's items, and returns the number
// of groups.
func compareGroupBy(t *testing.T, ctx context.Context, dsn, duck string) int {
	t.Helper()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT coalesce(order_id::text, 'NULL'), count(*), count(line_no), sum(qty)::text,
		coalesce(avg(price)::text, 'NULL'), coalesce(min(price)::text, 'NULL'), coalesce(max(price)::text, 'NULL'),
		count(DISTINCT sku) FROM order_items GROUP BY order_id`)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for rows.Next() {
		var k, sum, avg, lo, hi string
		var n, lines, skus int64
		if err := rows.Scan(&k, &n, &lines, &sum, &avg, &lo, &hi, &skus); err != nil {
			t.Fatal(err)
		}
		want[k] = fmt.Sprintf("count %d lines %d qty %s mean %s min %s max %s skus %d", n, lines, sum, mean(t, avg), lo, hi, skus)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("duckdb", duck)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	res, err := db.Query(`SELECT coalesce(order_id::VARCHAR, 'NULL'), items, lines, quantity::VARCHAR,
		coalesce(mean_price::VARCHAR, 'NULL'), coalesce(cheapest::VARCHAR, 'NULL'), coalesce(dearest::VARCHAR, 'NULL'), skus
		FROM main.analytics_order_totals WHERE NOT _sluice_deleted`)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Close()
	have := map[string]string{}
	for res.Next() {
		var k, sum, avg, lo, hi string
		var n, lines, skus int64
		if err := res.Scan(&k, &n, &lines, &sum, &avg, &lo, &hi, &skus); err != nil {
			t.Fatal(err)
		}
		have[k] = fmt.Sprintf("count %d lines %d qty %s mean %s min %s max %s skus %d", n, lines, sum, mean(t, avg), lo, hi, skus)
	}
	if err := res.Err(); err != nil {
		t.Fatal(err)
	}
	var diffs []string
	for k, w := range want {
		if have[k] != w {
			diffs = append(diffs, fmt.Sprintf("order_id %s: SQL %q, aggregate %q", k, w, have[k]))
		}
	}
	for k, h := range have {
		if _, ok := want[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("order_id %s: no items in the source, aggregate %q", k, h))
		}
	}
	if len(diffs) > 0 {
		sort.Strings(diffs)
		t.Fatalf("%d of %d groups differ from SQL's GROUP BY:\n%s", len(diffs), len(want), strings.Join(diffs[:min(len(diffs), 20)], "\n"))
	}
	return len(want)
}

// mean is an average's text at 12 decimal places: Postgres gives at least
// 16 significant digits, the aggregate 34.
func mean(t *testing.T, s string) string {
	t.Helper()
	if s == "NULL" {
		return s
	}
	d, _, err := apd.NewFromString(s)
	if err != nil {
		t.Fatalf("average %q: %v", s, err)
	}
	if _, err := apd.BaseContext.WithPrecision(100).Quantize(d, d, -12); err != nil {
		t.Fatal(err)
	}
	return d.String()
}
