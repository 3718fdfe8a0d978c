package integration

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/jackc/pgx/v5"

	"github.com/sluice-cdc/sluice/integration/harness"
)

// windowBackend is the source database of the window test.
type windowBackend struct {
	// source is the config's source block; slot names it for waits.
	source string
	// exec runs one statement of the writer ($n placeholders), on its own
	// connection kept by the backend.
	exec func(q string, args ...any) error
	// ts renders an event time as the backend's literal value.
	ts func(time.Time) any
	// settle inserts the order ahead of everything (region ZZ, at end)
	// and waits until the daemon's checkpoint covers it.
	settle func(d *daemonProc, checkpoint string, end time.Time)
	// groups returns the SQL GROUP BY of the source per window start
	// (epoch seconds) and region, without the late ids.
	groups func(late []int64) map[string]string
	// orders returns the source's orders without the late ids and ZZ.
	orders func(late []int64) []sourceOrder
}

// sourceOrder is an order as the source holds it.
type sourceOrder struct {
	region string
	at     int64 // epoch seconds
	cents  int64
}

// sessionGap is the session window's gap in the window test, seconds.
const sessionGap = 4

// sessionsOf computes the sessions of orders per region: runs of orders
// each less than sessionGap after the one before, keyed "start end
// region" (epoch seconds), valued "count revenue".
func sessionsOf(orders []sourceOrder) map[string]string {
	slices.SortFunc(orders, func(a, b sourceOrder) int {
		if c := strings.Compare(a.region, b.region); c != 0 {
			return c
		}
		return int(a.at - b.at)
	})
	out := map[string]string{}
	for i := 0; i < len(orders); {
		j, n, cents := i, 0, int64(0)
		for ; j < len(orders) && orders[j].region == orders[i].region && (j == i || orders[j].at < orders[j-1].at+sessionGap); j++ {
			n++
			cents += orders[j].cents
		}
		out[fmt.Sprintf("%d %d %s", orders[i].at, orders[j-1].at+sessionGap, orders[i].region)] = fmt.Sprintf("%d %d.%02d", n, cents/100, cents%100)
		i = j
	}
	return out
}

// Revenue per region per minute, from Postgres into DuckDB, under a
// workload whose event times run on a fast clock over many windows:
// inserts a little out of order (within the bound), updates that move
// orders across window boundaries and change amounts, deletes, and
// inserts stamped minutes in the past (too late for their windows), with
// kill -9 at random moments. In the end every closed window's row in
// DuckDB equals a SQL GROUP BY over the source without the late rows, and
// the dead-letter queue holds exactly the late rows.
func TestWindowRevenuePerMinute(t *testing.T) {
	pg := harness.PostgresT(t)
	ctx := context.Background()
	if err := pg.CreateDatabase(ctx, "sales"); err != nil {
		t.Fatal(err)
	}
	if err := pg.Exec(ctx, "sales",
		`CREATE TABLE orders (id bigint PRIMARY KEY, region text NOT NULL, amount numeric(12,2) NOT NULL, created_at timestamptz NOT NULL)`,
		`ALTER TABLE orders REPLICA IDENTITY FULL`, // late: correct retracts from before images
	); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, pg.DSN("sales"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	runWindowWorkload(t, windowBackend{
		source: fmt.Sprintf("  postgres:\n    dsn: %s\n    tables: [public.orders]\n", pg.DSN("sales")),
		exec: func(q string, args ...any) error {
			_, err := conn.Exec(ctx, q, args...)
			return err
		},
		ts: func(t time.Time) any { return t },
		settle: func(d *daemonProc, _ string, end time.Time) {
			mark := commitMarkOn(t, ctx, pg.DSN("sales"), fmt.Sprintf(`INSERT INTO orders VALUES (-1, 'ZZ', 0, '%s')`, end.Format(time.RFC3339)))
			waitSlotConfirmed(t, ctx, pg.DSN("sales"), "sluice_windows", mark, d)
		},
		groups: func(late []int64) map[string]string {
			rows, err := conn.Query(ctx, `SELECT (floor(extract(epoch FROM created_at) / 60) * 60)::bigint, region, count(*), sum(amount)::text, min(amount)::text, max(amount)::text
				FROM orders WHERE region <> 'ZZ' AND NOT (id = ANY($1)) GROUP BY 1, 2`, late)
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]string{}
			for rows.Next() {
				var ws, n int64
				var region, sum, lo, hi string
				if err := rows.Scan(&ws, &region, &n, &sum, &lo, &hi); err != nil {
					t.Fatal(err)
				}
				want[fmt.Sprintf("%d %s", ws, region)] = fmt.Sprintf("%d %s %s %s", n, sum, lo, hi)
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			return want
		},
		orders: func(late []int64) []sourceOrder {
			rows, err := conn.Query(ctx, `SELECT region, extract(epoch FROM created_at)::bigint, (amount * 100)::bigint FROM orders WHERE region <> 'ZZ' AND NOT (id = ANY($1))`, late)
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			var out []sourceOrder
			for rows.Next() {
				var o sourceOrder
				if err := rows.Scan(&o.region, &o.at, &o.cents); err != nil {
					t.Fatal(err)
				}
				out = append(out, o)
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			return out
		},
	}, "public.orders")
}

// The same on MariaDB, the event time a DATETIME(6).
func TestWindowRevenuePerMinuteMariaDB(t *testing.T) {
	m := harness.MariaDBT(t)
	ctx := context.Background()
	addr := net.JoinHostPort(m.Host, strconv.Itoa(m.Port))
	if err := m.Exec(ctx, "", "CREATE DATABASE sales",
		"CREATE TABLE sales.orders (id BIGINT PRIMARY KEY, region VARCHAR(10) NOT NULL, amount DECIMAL(12,2) NOT NULL, created_at DATETIME(6) NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	c, err := client.Connect(addr, "root", "", "sales")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	dollar := regexp.MustCompile(`\$[0-9]+`)
	runWindowWorkload(t, windowBackend{
		source: fmt.Sprintf("  mysql:\n    dsn: mysql://root@%s\n    tables: [sales.orders]\n    heartbeat_interval: 1s\n", addr),
		exec: func(q string, args ...any) error {
			// The statement says $n; MariaDB's ? bind in order of
			// appearance, so the arguments follow the $n's order.
			var bound []any
			for _, m := range dollar.FindAllString(q, -1) {
				n, _ := strconv.Atoi(m[1:])
				bound = append(bound, args[n-1])
			}
			_, err := c.Execute(dollar.ReplaceAllString(q, "?"), bound...)
			return err
		},
		ts: func(t time.Time) any { return t.UTC().Format("2006-01-02 15:04:05.000000") },
		settle: func(d *daemonProc, checkpoint string, end time.Time) {
			if err := m.Exec(ctx, "sales", fmt.Sprintf(`INSERT INTO orders VALUES (-1, 'ZZ', 0, '%s')`, end.Format("2006-01-02 15:04:05"))); err != nil {
				t.Fatal(err)
			}
			mark, err := m.Query(ctx, "", "SELECT @@GLOBAL.gtid_binlog_pos")
			if err != nil {
				t.Fatal(err)
			}
			waitCheckpointAt(t, d, checkpoint, mark)
		},
		groups: func(late []int64) map[string]string {
			ids := "0"
			for _, id := range late {
				ids += fmt.Sprintf(",%d", id)
			}
			res, err := c.Execute(`SELECT FLOOR(TIMESTAMPDIFF(SECOND, '1970-01-01', created_at) / 60) * 60, region, COUNT(*), CAST(SUM(amount) AS CHAR), CAST(MIN(amount) AS CHAR), CAST(MAX(amount) AS CHAR)
				FROM orders WHERE region <> 'ZZ' AND id NOT IN (` + ids + `) GROUP BY 1, 2`)
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]string{}
			for i := range res.RowNumber() {
				row := make([]string, 6)
				for j := range row {
					s, _ := res.GetString(i, j)
					row[j] = string(append([]byte{}, s...))
				}
				want[row[0]+" "+row[1]] = fmt.Sprintf("%s %s %s %s", row[2], row[3], row[4], row[5])
			}
			return want
		},
		orders: func(late []int64) []sourceOrder {
			ids := "0"
			for _, id := range late {
				ids += fmt.Sprintf(",%d", id)
			}
			res, err := c.Execute(`SELECT region, TIMESTAMPDIFF(SECOND, '1970-01-01', created_at), CAST(amount * 100 AS SIGNED) FROM orders WHERE region <> 'ZZ' AND id NOT IN (` + ids + `)`)
			if err != nil {
				t.Fatal(err)
			}
			var out []sourceOrder
			for i := range res.RowNumber() {
				region, _ := res.GetString(i, 0)
				at, _ := res.GetInt(i, 1)
				cents, _ := res.GetInt(i, 2)
				out = append(out, sourceOrder{region: string(append([]byte{}, region...)), at: at, cents: cents})
			}
			return out
		},
	}, "sales.orders")
}

// runWindowWorkload runs the window test's pipeline and workload against
// one backend; table is the orders table as the source names it.
func runWindowWorkload(t *testing.T, b windowBackend, table string) {
	dir := t.TempDir()
	cfg := writeConfig(t, dir, fmt.Sprintf(`pipeline: windows
source:
%stransforms:
  - window:
      output: analytics.revenue
      table: %s
      event_time: created_at
      tumbling: 1m
      emit: early  # partial rows while a window fills; the close replaces them
      early_interval: 100ms
      max_out_of_orderness: 10s
      allowed_lateness: 30s
      late: side_output
      idle_timeout: 0s  # the event times run on the test's clock, not the commit time
      group_by: [region]
      aggregates: ["orders = count()", "revenue = sum(amount)", "smallest = min(amount)", "biggest = max(amount)"]
  - window:
      output: analytics.sessions
      table: %s
      event_time: created_at
      session: {gap: %ds}
      max_out_of_orderness: 10s
      allowed_lateness: 30s
      late: side_output
      side_output: duckdb  # rows of analytics.sessions_late
      idle_timeout: 0s
      group_by: [region]
      aggregates: ["orders = count()", "revenue = sum(amount)"]
  - window:
      output: analytics.revenue_corrected
      table: %s
      event_time: created_at
      tumbling: 1m
      max_out_of_orderness: 10s
      allowed_lateness: 30s
      late: correct  # the late orders, and their later changes, correct their minute
      correct_within: 3h  # longer than the run's event time: no change is past it
      idle_timeout: 0s
      group_by: [region]
      aggregates: ["orders = count()", "revenue = sum(amount)", "smallest = min(amount)", "biggest = max(amount)"]
sinks:
  - duckdb: {path: ./sales.duckdb}
offsets: {dir: ./offsets}
runtime: {checkpoint_interval: 50ms}
`, b.source, table, table, sessionGap, table))

	d := startDaemon(t, cfg)
	d.waitAddr(t, time.Minute)

	// The writer's clock starts on a minute and runs about a simulated
	// second per transaction. Orders stay open to updates and deletes
	// only while their event time is within 20 s of the clock, so no
	// change ever touches a window whose state is gone; late inserts are
	// stamped three minutes back and never changed.
	start := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	var stop atomic.Bool
	var clock atomic.Int64 // seconds after start
	var writes atomic.Int64
	var mu sync.Mutex
	var late []int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 30))
		type open struct {
			id int64
			at int64 // seconds after start
		}
		var recent []open
		next := int64(0)
		regions := []string{"EU", "US", "APAC"}
		at := func(s int64) any { return b.ts(start.Add(time.Duration(s) * time.Second)) }
		pace := time.NewTicker(3 * time.Millisecond)
		defer pace.Stop()
		for !stop.Load() {
			<-pace.C
			now := clock.Add(int64(rng.IntN(3)))
			recent = slices.DeleteFunc(recent, func(o open) bool { return o.at < now-20 })
			var q string
			var args []any
			switch k := rng.IntN(10); {
			case k < 5 || len(recent) == 0:
				next++
				s := now - int64(rng.IntN(8)) // out of order within the bound
				q, args = `INSERT INTO orders VALUES ($1, $2, $3, $4)`, []any{next, regions[rng.IntN(3)], fmt.Sprintf("%d.%02d", rng.IntN(500), rng.IntN(100)), at(s)}
				recent = append(recent, open{next, s})
			case k < 7:
				i := rng.IntN(len(recent))
				// May cross a minute or a session gap; never ahead of the
				// clock, so the watermark never runs ahead of it and no
				// change touches a window or session already final.
				s := min(max(recent[i].at+int64(rng.IntN(31))-15, now-20), now)
				q, args = `UPDATE orders SET amount = amount + 1.25, created_at = $2 WHERE id = $1`, []any{recent[i].id, at(s)}
				recent[i].at = s
			case k < 8:
				i := rng.IntN(len(recent))
				q, args = `DELETE FROM orders WHERE id = $1`, []any{recent[i].id}
				recent = slices.Delete(recent, i, i+1)
			case k < 9:
				i := rng.IntN(len(recent))
				q, args = `UPDATE orders SET region = $2 WHERE id = $1`, []any{recent[i].id, regions[rng.IntN(3)]}
			default:
				if now < 240 {
					continue // the watermark first has to pass a window's end and lateness
				}
				mu.Lock()
				if n := len(late); n > 0 && rng.IntN(3) == 0 {
					// A late order changed again, later still: its amount,
					// or gone.
					id := late[rng.IntN(n)]
					q, args = `UPDATE orders SET amount = amount + 2.50 WHERE id = $1`, []any{id}
					if rng.IntN(2) == 0 {
						q = `DELETE FROM orders WHERE id = $1`
					}
				} else {
					next++
					q, args = `INSERT INTO orders VALUES ($1, 'EU', 1.00, $2)`, []any{next, at(now - 180)}
					late = append(late, next)
				}
				mu.Unlock()
			}
			if err := b.exec(q, args...); err != nil {
				t.Error(err)
				return
			}
			writes.Add(1)
		}
	}()
	defer func() { stop.Store(true); wg.Wait() }()

	checkpoint := filepath.Join(dir, "offsets", "checkpoint.json")
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 31))
	kills := harness.Trials(4)
	d = killAfterCheckpoints(t, d, cfg, checkpoint, kills, time.Second, rng, func(i int, _ *daemonProc) {
		t.Logf("kill %d of %d after %d writes, clock %ds", i+1, kills, writes.Load(), clock.Load())
	})
	waitCheckpoints(t, d, checkpoint, 2)
	stop.Store(true)
	wg.Wait()
	// An order far ahead moves the watermark past every window written.
	end := start.Add(time.Duration(clock.Load()+600) * time.Second)
	b.settle(d, checkpoint, end)
	d.signal(syscall.SIGTERM)
	if code := d.wait(t, time.Minute); code != 0 {
		t.Fatalf("exit %d:\n%s", code, d.logs())
	}

	// The dead-letter queue holds exactly the late inserts (a change
	// judged late again after a kill may be there twice).
	got := lateIDs(t, filepath.Join(dir, "offsets", "dlq"))
	slices.Sort(late)
	if !slices.Equal(got, late) || len(late) == 0 {
		t.Fatalf("dead letters %v, late inserts %v", got, late)
	}
	// Every window equals SQL over the source without the late rows.
	want := b.groups(late)
	db, err := sql.Open("duckdb", filepath.Join(dir, "sales.duckdb"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var partial int64
	if err := db.QueryRow(`SELECT count(*) FROM main.analytics_revenue WHERE NOT _sluice_deleted AND partial AND region <> 'ZZ'`).Scan(&partial); err != nil {
		t.Fatal(err)
	}
	if partial != 0 {
		t.Fatalf("%d rows of closed windows are still partial:\n%s", partial, partialRows(t, db, want))
	}
	compareWindows(t, db, "analytics_revenue", want)
	// The window under late: correct took the late orders and their later
	// changes: it equals SQL over every row.
	compareWindows(t, db, "analytics_revenue_corrected", b.groups([]int64{}))
	// The session window's side output holds exactly the late inserts,
	// each with the session it would have opened.
	var sideIDs []int64
	side, err := db.Query(`SELECT DISTINCT id FROM main.analytics_sessions_late
		WHERE NOT _sluice_deleted AND epoch(window_end) - epoch(window_start) = ? AND late_by_ms > 0 ORDER BY id`, sessionGap)
	if err != nil {
		t.Fatal(err)
	}
	for side.Next() {
		var id int64
		if err := side.Scan(&id); err != nil {
			t.Fatal(err)
		}
		sideIDs = append(sideIDs, id)
	}
	side.Close()
	if !slices.Equal(sideIDs, late) {
		t.Fatalf("side output %v, late inserts %v", sideIDs, late)
	}
	// Every session equals the sessions of the source's rows.
	srcOrders := b.orders(late)
	wantSessions := sessionsOf(slices.Clone(srcOrders))
	res, err := db.Query(`SELECT epoch(window_start)::BIGINT, epoch(window_end)::BIGINT, region, orders, revenue::VARCHAR
		FROM main.analytics_sessions WHERE NOT _sluice_deleted AND region <> 'ZZ'`)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Close()
	haveSessions := map[string]string{}
	for res.Next() {
		var start, end, n int64
		var region, sum string
		if err := res.Scan(&start, &end, &region, &n, &sum); err != nil {
			t.Fatal(err)
		}
		haveSessions[fmt.Sprintf("%d %d %s", start, end, region)] = fmt.Sprintf("%d %s", n, sum)
	}
	if !maps.Equal(haveSessions, wantSessions) {
		var diffs []string
		for k, w := range wantSessions {
			if haveSessions[k] != w {
				diffs = append(diffs, fmt.Sprintf("%s: source %q, window %q", k, w, haveSessions[k]))
			}
		}
		for k, h := range haveSessions {
			if _, ok := wantSessions[k]; !ok {
				// The source's orders of the region around it.
				var start, end int64
				var region string
				fmt.Sscanf(k, "%d %d %s", &start, &end, &region)
				var near []string
				for _, o := range srcOrders {
					if o.region == region && o.at >= start-2*sessionGap && o.at < end+2*sessionGap {
						near = append(near, fmt.Sprintf("%d:%d", o.at, o.cents))
					}
				}
				diffs = append(diffs, fmt.Sprintf("%s: no such session in the source, window %q; the source's orders near it %v", k, h, near))
			}
		}
		slices.Sort(diffs)
		t.Fatalf("%d of %d sessions differ:\n%s", len(diffs), len(wantSessions), strings.Join(diffs[:min(20, len(diffs))], "\n"))
	}
	t.Logf("%d writes, %d kills, %d window rows, %d sessions, %d late inserts, clock %ds", writes.Load(), kills, len(want), len(wantSessions), len(late), clock.Load())
}

// partialRows describes the partial rows of analytics_revenue in db: the
// window, group, values and version of each, and the source's values of
// that window and group (want, as compareWindows takes it).
func partialRows(t *testing.T, db *sql.DB, want map[string]string) string {
	t.Helper()
	res, err := db.Query(`SELECT epoch(window_start)::BIGINT, region, orders, revenue::VARCHAR, hex(_sluice_version)
		FROM main.analytics_revenue WHERE NOT _sluice_deleted AND partial AND region <> 'ZZ' ORDER BY 1, 2`)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Close()
	var out []string
	for res.Next() {
		var ws, n int64
		var region, sum, version string
		if err := res.Scan(&ws, &region, &n, &sum, &version); err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("window %d %s: partial %d %s at version %s; the source's %q", ws, region, n, sum, version, want[fmt.Sprintf("%d %s", ws, region)]))
	}
	return strings.Join(out, "\n")
}

// compareWindows fails unless the rows of a revenue window's table in
// DuckDB are want (window start and region to count, sum, min and max).
func compareWindows(t *testing.T, db *sql.DB, table string, want map[string]string) {
	t.Helper()
	res, err := db.Query(`SELECT epoch(window_start)::BIGINT, region, orders, revenue::VARCHAR, smallest::VARCHAR, biggest::VARCHAR
		FROM main.` + table + ` WHERE NOT _sluice_deleted AND region <> 'ZZ'`)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Close()
	have := map[string]string{}
	for res.Next() {
		var ws, n int64
		var region, sum, lo, hi string
		if err := res.Scan(&ws, &region, &n, &sum, &lo, &hi); err != nil {
			t.Fatal(err)
		}
		have[fmt.Sprintf("%d %s", ws, region)] = fmt.Sprintf("%d %s %s %s", n, sum, lo, hi)
	}
	var diffs []string
	for k, w := range want {
		if have[k] != w {
			diffs = append(diffs, fmt.Sprintf("%s: source %q, window %q", k, w, have[k]))
		}
	}
	for k, h := range have {
		if _, ok := want[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s: no source rows, window %q", k, h))
		}
	}
	slices.Sort(diffs)
	if len(diffs) > 0 {
		t.Fatalf("%s: %d of %d windows differ:\n%s", table, len(diffs), len(want), strings.Join(diffs[:min(20, len(diffs))], "\n"))
	}
}

// lateIDs reads the ids of the orders in the dead-letter files under dir,
// each once.
func lateIDs(t *testing.T, dir string) []int64 {
	t.Helper()
	seen := map[int64]bool{}
	files, _ := filepath.Glob(filepath.Join(dir, "*"))
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(fh)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var dl struct {
				Stage string `json:"stage"`
				Error string `json:"error"`
				Raw   []byte `json:"raw"` // the record's JSON, base64 in the file
			}
			if json.Unmarshal(sc.Bytes(), &dl) != nil || !strings.Contains(dl.Error, "late:") {
				continue
			}
			var rec struct {
				After map[string]any `json:"after"`
			}
			if err := json.Unmarshal(dl.Raw, &rec); err != nil {
				t.Fatalf("dead letter %s: %v", sc.Bytes(), err)
			}
			id, _ := rec.After["id"].(float64)
			seen[int64(id)] = true
		}
		fh.Close()
	}
	var out []int64
	for id := range seen {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}
