package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-cdc/sluice/integration/harness"
)

// Denormalised documents: a join transform embeds each order's customer,
// and OpenSearch, Bleve and a Postgres replica receive the joined rows.
// Customer changes fan out to their orders; orders move between
// customers; a customer is deleted; the daemon is killed (kill -9) while
// a fan-out is in flight and restarted. Every sink ends equal to the SQL
// join of the source tables, and the embedded customer is searchable.
func TestJoinDenormalisedDocuments(t *testing.T) {
	pg := harness.PostgresT(t)
	node := harness.StartOpenSearch(t)
	ctx := context.Background()
	for _, db := range []string{"app", "replica"} {
		if err := pg.CreateDatabase(ctx, db); err != nil {
			t.Fatal(err)
		}
	}
	if err := pg.Exec(ctx, "app",
		`CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL, city text, since timestamptz)`,
		`CREATE TABLE orders (id int PRIMARY KEY, customer_id int, item text, amount numeric(10,2))`,
		`INSERT INTO customers SELECT g, 'customer' || g, 'city' || (g % 5), timestamptz '2024-01-01 00:00:00+00' + g * interval '1 day' FROM generate_series(1, 40) g`,
		// Orders of customers 1..45: 41..45 do not exist; every 17th has none.
		`INSERT INTO orders SELECT g, CASE WHEN g % 17 = 0 THEN NULL ELSE 1 + g % 45 END, 'item' || g, g * 1.25 FROM generate_series(1, 300) g`,
	); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg := writeConfig(t, dir, fmt.Sprintf(`pipeline: joined
source:
  postgres:
    dsn: %s
    tables: [public.orders, public.customers]
transforms:
  - join:
      output: public.order_docs
      from: public.orders
      with:
        - {table: public.customers, on: [customer_id], as: customer, columns: [name, city, since]}
sinks:
  - opensearch: {urls: ["%s"], tables: [public.order_docs], refresh: true}
  - bleve: {path: ./index, tables: [public.order_docs]}
  - postgres: {dsn: "%s", tables: [public.order_docs]}
offsets: {dir: ./offsets}
runtime: {checkpoint_interval: 50ms}
`, pg.DSN("app"), node.URL, pg.DSN("replica")))
	d := startDaemon(t, cfg)
	d.waitAddr(t, time.Minute)
	waitFile(t, filepath.Join(dir, "offsets", "checkpoint.json"), d)
	if err := pg.Exec(ctx, "app",
		`UPDATE customers SET name = 'renamed' || id WHERE id <= 10`,
		`UPDATE orders SET customer_id = 2 WHERE id BETWEEN 100 AND 120`,
		`DELETE FROM customers WHERE id = 3`,
		`INSERT INTO customers VALUES (41, 'latecomer', 'city9', now())`,
		`DELETE FROM orders WHERE id > 290`,
	); err != nil {
		t.Fatal(err)
	}
	mark := commitMarkOn(t, ctx, pg.DSN("app"), `UPDATE orders SET item = 'marked' WHERE id = 1`)
	waitSlotConfirmed(t, ctx, pg.DSN("app"), "sluice_joined", mark, d)
	// A fan-out to every order, then kill -9 while it is in flight.
	if err := pg.Exec(ctx, "app", `UPDATE customers SET city = 'moved' || id`, `UPDATE orders SET customer_id = 4 WHERE id % 10 = 1`); err != nil {
		t.Fatal(err)
	}
	d.kill()
	d = startDaemon(t, cfg)
	d.waitAddr(t, time.Minute)
	if err := pg.Exec(ctx, "app",
		`UPDATE customers SET name = 'final' || id WHERE id % 2 = 0`,
		`INSERT INTO orders VALUES (1000, 41, 'new', 9.99), (1001, NULL, 'orphan', 1)`,
		`DELETE FROM customers WHERE id = 6`,
	); err != nil {
		t.Fatal(err)
	}
	mark = commitMarkOn(t, ctx, pg.DSN("app"), `UPDATE orders SET item = 'last' WHERE id = 2`)
	waitSlotConfirmed(t, ctx, pg.DSN("app"), "sluice_joined", mark, d)
	d.signal(syscall.SIGTERM)
	if code := d.wait(t, time.Minute); code != 0 {
		t.Fatalf("exit %d:\n%s", code, d.logs())
	}

	want := joinRows(t, ctx, pg.DSN("app"), `SELECT o.id, o.customer_id, o.item, o.amount::text, c.name, c.city
		FROM orders o LEFT JOIN customers c ON c.id = o.customer_id`)
	got := joinRows(t, ctx, pg.DSN("replica"), `SELECT id, customer_id, item, amount::text, customer->>'name', customer->>'city'
		FROM public_order_docs WHERE NOT _sluice_deleted`)
	if diff := diffRows(want, got); diff != "" {
		t.Fatalf("postgres replica differs from the join:\n%s", diff)
	}
	if diff := diffRows(want, openSearchRows(t, node.URL)); diff != "" {
		t.Fatalf("opensearch differs from the join:\n%s", diff)
	}
	// The embedded customer is mapped and searchable by its members.
	var mapping map[string]struct {
		Mappings struct {
			Properties map[string]struct {
				Properties map[string]struct {
					Type string `json:"type"`
				} `json:"properties"`
			} `json:"properties"`
		} `json:"mappings"`
	}
	searchGet(t, node.URL+"/public.order_docs/_mapping", nil, &mapping)
	for _, m := range mapping {
		c := m.Mappings.Properties["customer"].Properties
		if c["name"].Type != "text" || c["since"].Type != "date" {
			t.Fatalf("customer mapping: %+v", c)
		}
	}
	finals := 0
	for _, r := range want {
		if strings.HasPrefix(r[4], "final") {
			finals++
		}
	}
	var res struct {
		Hits struct {
			Total struct{ Value int } `json:"total"`
		} `json:"hits"`
	}
	searchGet(t, node.URL+"/public.order_docs/_search", []byte(`{"query":{"bool":{"must":{"prefix":{"customer.name.keyword":"final"}},
		"must_not":{"term":{"_sluice_deleted":true}}}}}`), &res)
	if finals == 0 || res.Hits.Total.Value != finals {
		t.Fatalf("orders of customers named final*: opensearch finds %d, the join has %d", res.Hits.Total.Value, finals)
	}
	all := runSearch(t, cfg, 0, "--table", "public.order_docs", "--size", "1", "*")
	if int(all.Total) != len(want) {
		t.Fatalf("bleve holds %d joined rows, the join has %d", all.Total, len(want))
	}
	latecomer := runSearch(t, cfg, 0, "--table", "public.order_docs", "customer:latecomer")
	if n := countWhere(want, func(r []string) bool { return r[4] == "latecomer" }); int(latecomer.Total) != n || n == 0 {
		t.Fatalf("bleve finds %d orders of the latecomer, the join has %d", latecomer.Total, n)
	}
}

func countWhere(rows map[string][]string, f func([]string) bool) int {
	n := 0
	for _, r := range rows {
		if f(r) {
			n++
		}
	}
	return n
}

// joinRows runs query (id first) and returns the rows as text, NULL as "".
func joinRows(t *testing.T, ctx context.Context, dsn, query string) map[string][]string {
	t.Helper()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, query)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			t.Fatal(err)
		}
		row := make([]string, len(vals))
		for i, v := range vals {
			if v != nil {
				row[i] = fmt.Sprint(v)
			}
		}
		out[row[0]] = row
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// openSearchRows reads the live joined documents in joinRows' form.
func openSearchRows(t *testing.T, url string) map[string][]string {
	t.Helper()
	var res struct {
		Hits struct {
			Hits []struct {
				Source struct {
					ID         json.Number `json:"id"`
					CustomerID json.Number `json:"customer_id"`
					Item       *string     `json:"item"`
					Amount     any         `json:"amount"`
					Customer   *struct {
						Name *string `json:"name"`
						City *string `json:"city"`
					} `json:"customer"`
				} `json:"_source"`
			} `json:"hits"`
		} `json:"hits"`
	}
	searchGet(t, url+"/public.order_docs/_search", []byte(`{"size":10000,"query":{"bool":{"must_not":{"term":{"_sluice_deleted":true}}}}}`), &res)
	str := func(p *string) string {
		if p == nil {
			return ""
		}
		return *p
	}
	out := map[string][]string{}
	for _, h := range res.Hits.Hits {
		s := h.Source
		row := []string{s.ID.String(), s.CustomerID.String(), str(s.Item), fmt.Sprint(s.Amount), "", ""}
		if s.Customer != nil {
			row[4], row[5] = str(s.Customer.Name), str(s.Customer.City)
		}
		out[row[0]] = row
	}
	return out
}

func searchGet(t *testing.T, url string, body []byte, v any) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s: %s", url, resp.Status, b)
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	if err := d.Decode(v); err != nil {
		t.Fatalf("GET %s: %v: %s", url, err, b)
	}
}

// diffRows lists the rows that differ, at most ten.
func diffRows(want, got map[string][]string) string {
	var keys []string
	for k := range want {
		keys = append(keys, k)
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var b strings.Builder
	n := 0
	for _, k := range keys {
		w, g := want[k], got[k]
		if strings.Join(w, "|") != strings.Join(g, "|") {
			fmt.Fprintf(&b, "id %s: want %q, got %q\n", k, w, g)
			if n++; n == 10 {
				break
			}
		}
	}
	return b.String()
}

// An initial load killed (kill -9) before its first checkpoint is redone
// from a new snapshot; in between an order was deleted, another moved and
// a customer renamed. The looked-up table is loaded first, so its barrier
// would re-send every order the first attempt left in the join's state:
// the state starts over instead, and the replica equals the SQL join (no
// deleted order lives on, no reloaded order is dropped as stale).
func TestJoinInterruptedLoadRedone(t *testing.T) {
	pg := harness.PostgresT(t)
	ctx := context.Background()
	for _, db := range []string{"app", "replica"} {
		if err := pg.CreateDatabase(ctx, db); err != nil {
			t.Fatal(err)
		}
	}
	if err := pg.Exec(ctx, "app",
		`CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL)`,
		`CREATE TABLE orders (id int PRIMARY KEY, customer_id int, item text)`,
		`INSERT INTO customers SELECT g, 'customer' || g FROM generate_series(1, 5) g`,
		`INSERT INTO orders SELECT g, 1 + g % 5, 'item' || g FROM generate_series(1, 40) g`,
	); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	config := func(interval string) string {
		return writeConfig(t, dir, fmt.Sprintf(`pipeline: reload
source:
  postgres:
    dsn: %s
    tables: [public.customers, public.orders]
transforms:
  - join:
      output: public.order_docs
      from: public.orders
      with:
        - {table: public.customers, on: [customer_id], as: customer, columns: [name]}
sinks:
  - postgres: {dsn: "%s", tables: [public.order_docs]}
offsets: {dir: ./offsets}
runtime: {checkpoint_interval: %s}
`, pg.DSN("app"), pg.DSN("replica"), interval))
	}
	// The first attempt never checkpoints: the kill lands before any.
	d := startDaemon(t, config("1h"))
	d.waitAddr(t, time.Minute)
	waitUntil(t, d, 2*time.Minute, "the first load's joined rows in the replica", func() bool {
		return countRows(ctx, pg.DSN("replica"), `SELECT count(*) FROM public_order_docs`) == 40
	})
	d.kill()
	if _, err := os.Stat(filepath.Join(dir, "offsets", "checkpoint.json")); !os.IsNotExist(err) {
		t.Fatalf("a checkpoint exists after the first attempt (%v): the test needs a load without one", err)
	}
	if err := pg.Exec(ctx, "app",
		`DELETE FROM orders WHERE id = 7`,
		`UPDATE orders SET customer_id = 1 WHERE id = 8`,
		`UPDATE customers SET name = 'renamed' WHERE id = 2`,
	); err != nil {
		t.Fatal(err)
	}
	d = startDaemon(t, config("50ms"))
	d.waitAddr(t, time.Minute)
	// The first checkpoint follows the redone load; the mark comes after.
	waitFile(t, filepath.Join(dir, "offsets", "checkpoint.json"), d)
	mark := commitMarkOn(t, ctx, pg.DSN("app"), `UPDATE orders SET item = 'marked' WHERE id = 1`)
	waitSlotConfirmed(t, ctx, pg.DSN("app"), "sluice_reload", mark, d)
	d.signal(syscall.SIGTERM)
	if code := d.wait(t, time.Minute); code != 0 {
		t.Fatalf("exit %d:\n%s", code, d.logs())
	}
	want := joinRows(t, ctx, pg.DSN("app"), `SELECT o.id, o.customer_id, o.item, c.name
		FROM orders o LEFT JOIN customers c ON c.id = o.customer_id`)
	got := joinRows(t, ctx, pg.DSN("replica"), `SELECT id, customer_id, item, customer->>'name'
		FROM public_order_docs WHERE NOT _sluice_deleted`)
	if diff := diffRows(want, got); diff != "" {
		t.Fatalf("replica differs from the join after the redone load:\n%s", diff)
	}
	if !strings.Contains(d.logs(), "join state started over") {
		t.Fatalf("the restarted daemon did not start the join's state over:\n%s", d.logs())
	}
}

// countRows returns the count query's result, -1 while it fails (the
// table may not exist yet).
func countRows(ctx context.Context, dsn, query string) int {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return -1
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, query).Scan(&n); err != nil {
		return -1
	}
	return n
}
