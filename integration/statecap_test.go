package integration

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/integration/harness"
)

// A join whose state grows past max_state_bytes stops the daemon with an
// error that names the transform and the setting, and a non-zero exit;
// started again with the cap raised, it goes on and loses nothing: the
// captured tables equal the source (`sluice verify`) and the joined table
// holds every order.
func TestStateCapStopsAndLosesNothing(t *testing.T) {
	pg := harness.PostgresT(t)
	ctx := context.Background()
	if err := pg.CreateDatabase(ctx, "capped"); err != nil {
		t.Fatal(err)
	}
	if err := pg.Exec(ctx, "capped",
		`CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL)`,
		`CREATE TABLE orders (id int PRIMARY KEY, customer_id int, note text)`,
		`INSERT INTO customers SELECT g, 'customer' || g FROM generate_series(1, 300) g`,
		`INSERT INTO orders SELECT g, 1 + g % 300, repeat('n', 100) FROM generate_series(1, 20000) g`,
	); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	config := func(capped string) string {
		return writeConfig(t, dir, fmt.Sprintf(`pipeline: capped
source:
  postgres:
    dsn: %s
    tables: [public.orders, public.customers]
transforms:
  - join:
      output: public.order_docs
      from: public.orders
      with: [{table: public.customers, on: [customer_id], as: customer}]
      max_state_bytes: %s
sinks:
  - duckdb: {path: ./warehouse.duckdb}
offsets: {dir: ./offsets}
runtime: {checkpoint_interval: 50ms}
`, pg.DSN("capped"), capped))
	}
	d := startDaemon(t, config("256KiB"))
	if code := d.wait(t, 2*time.Minute); code == 0 {
		t.Fatalf("the daemon ended with exit 0 past the cap:\n%s", d.logs())
	}
	for _, want := range []string{"join public.order_docs: its state", "past transforms[0].join.max_state_bytes", "raise transforms[0].join.max_state_bytes"} {
		if !strings.Contains(d.logs(), want) {
			t.Fatalf("the logs do not say %q:\n%s", want, d.logs())
		}
	}

	cfg := config("0")
	d = startDaemon(t, cfg)
	d.waitAddr(t, time.Minute)
	// The load is redone (the first run stopped before any checkpoint);
	// the mark below must come after its slot's consistent point.
	waitUntil(t, d, 2*time.Minute, "the initial load", func() bool { return loadedAll(t, filepath.Join(dir, "offsets", "checkpoint.json")) })
	var logs strings.Builder
	stopDrained(t, ctx, d, pg.DSN("capped"), "sluice_capped", `UPDATE customers SET name = 'marked' WHERE id = 1`, &logs)
	expectVerifyEqual(t, cfg)
	db, err := sql.Open("duckdb", filepath.Join(dir, "warehouse.duckdb"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var docs int
	if err := db.QueryRow(`SELECT count(*) FROM main.public_order_docs WHERE NOT _sluice_deleted`).Scan(&docs); err != nil {
		t.Fatal(err)
	}
	if docs != 20000 {
		t.Fatalf("%d joined rows, want 20000", docs)
	}
}
