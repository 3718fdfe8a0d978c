package integration

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/integration/harness"
	"github.com/sluice-cdc/sluice/obs"
)

// A daemon killed before its first checkpoint starts over: it loads the
// table again, under a higher generation. Partial results the first
// attempt wrote for a group the rows read again no longer make (its
// orders deleted in between) are retired by the window's barrier: DuckDB
// ends with exactly the source's windows.
func TestWindowStartingOverRetiresEarlierResults(t *testing.T) {
	pg := harness.PostgresT(t)
	ctx := context.Background()
	if err := pg.CreateDatabase(ctx, "startover"); err != nil {
		t.Fatal(err)
	}
	if err := pg.Exec(ctx, "startover",
		`CREATE TABLE orders (id bigint PRIMARY KEY, region text NOT NULL, amount numeric(12,2) NOT NULL, created_at timestamptz NOT NULL)`,
		`INSERT INTO orders VALUES (1, 'EU', 10.50, '2026-03-01 10:00:05Z'), (2, 'EU', 4.25, '2026-03-01 10:00:20Z'),
			(3, 'US', 7.00, '2026-03-01 10:00:30Z'), (4, 'APAC', 3.75, '2026-03-01 10:00:40Z')`,
	); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	config := func(interval string) string {
		return writeConfig(t, dir, fmt.Sprintf(`pipeline: startover
source:
  postgres:
    dsn: %s
    tables: [public.orders]
transforms:
  - window:
      output: analytics.revenue
      table: public.orders
      event_time: created_at
      tumbling: 1m
      emit: early
      early_interval: 50ms
      max_out_of_orderness: 10s
      allowed_lateness: 30s
      idle_timeout: 0s
      group_by: [region]
      aggregates: ["orders = count()", "revenue = sum(amount)"]
sinks:
  - duckdb: {path: ./sales.duckdb}
offsets: {dir: ./offsets}
runtime: {checkpoint_interval: %s}
`, pg.DSN("startover"), interval))
	}
	// No checkpoint in the first attempt: it writes the partial results of
	// the three regions' minute and is killed.
	d := startDaemon(t, config("1h"))
	base := "http://" + d.waitAddr(t, time.Minute)
	// The sink's writes: the load's barrier and four rows of orders, then
	// the three partial results.
	waitUntil(t, d, time.Minute, "the partial results of three regions", func() bool {
		var st obs.StatusReport
		return getJSON(t, base+"/status", &st) == 200 && len(st.Sinks) == 1 && st.Sinks[0].RecordsWritten >= 8
	})
	d.kill()
	checkpoint := filepath.Join(dir, "offsets", "checkpoint.json")
	if _, err := os.Stat(checkpoint); !os.IsNotExist(err) {
		t.Fatalf("the first attempt stored a checkpoint (%v): the test needs it to start over", err)
	}
	if got := windowRows(t, dir); got["10:00 APAC"] != "1 3.75 partial=true" {
		t.Fatalf("after the first attempt: %v, want APAC's partial result among them", got)
	}
	// APAC's only order goes before the second attempt reads the table.
	if err := pg.Exec(ctx, "startover", `DELETE FROM orders WHERE region = 'APAC'`); err != nil {
		t.Fatal(err)
	}
	d = startDaemon(t, config("50ms"))
	base = "http://" + d.waitAddr(t, time.Minute)
	waitUntil(t, d, time.Minute, "the second load to complete", func() bool {
		var st obs.StatusReport
		return getJSON(t, base+"/status", &st) == 200 && st.State == obs.StateStreaming
	})
	// An order an hour later closes the minute.
	mark := commitMarkOn(t, ctx, pg.DSN("startover"), `INSERT INTO orders VALUES (-1, 'ZZ', 0, '2026-03-01 11:00:00Z')`)
	waitSlotConfirmed(t, ctx, pg.DSN("startover"), "sluice_startover", mark, d)
	d.signal(syscall.SIGTERM)
	if code := d.wait(t, time.Minute); code != 0 {
		t.Fatalf("exit %d:\n%s", code, d.logs())
	}

	have := windowRows(t, dir)
	want := map[string]string{"10:00 EU": "2 14.75 partial=false", "10:00 US": "1 7.00 partial=false"}
	if !maps.Equal(have, want) {
		db, err := sql.Open("duckdb", filepath.Join(dir, "sales.duckdb"))
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		all, err := db.Query(`SELECT strftime(window_start, '%H:%M'), region, hex(_sluice_version), _sluice_deleted, partial FROM main.analytics_revenue ORDER BY 1, 2`)
		if err != nil {
			t.Fatal(err)
		}
		defer all.Close()
		var held []string
		for all.Next() {
			var start, region, version string
			var deleted bool
			var partial sql.NullBool
			if err := all.Scan(&start, &region, &version, &deleted, &partial); err != nil {
				t.Fatal(err)
			}
			held = append(held, fmt.Sprintf("%s %s version %s deleted=%v partial=%v", start, region, version, deleted, partial.Bool))
		}
		t.Fatalf("windows in DuckDB %v, want %v; every row:\n%s", have, want, strings.Join(held, "\n"))
	}
}

// windowRows reads the revenue windows' live rows from the DuckDB file in
// dir (the daemon stopped): minute and region to count, sum and whether
// partial.
func windowRows(t *testing.T, dir string) map[string]string {
	t.Helper()
	db, err := sql.Open("duckdb", filepath.Join(dir, "sales.duckdb"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT strftime(window_start, '%H:%M'), region, orders, revenue::VARCHAR, partial
		FROM main.analytics_revenue WHERE NOT _sluice_deleted AND region <> 'ZZ'`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	have := map[string]string{}
	for rows.Next() {
		var start, region, sum string
		var n int64
		var partial bool
		if err := rows.Scan(&start, &region, &n, &sum, &partial); err != nil {
			t.Fatal(err)
		}
		have[start+" "+region] = fmt.Sprintf("%d %s partial=%v", n, sum, partial)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return have
}
