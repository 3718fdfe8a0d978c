package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"

	"github.com/sluice-cdc/sluice/config"
	"github.com/sluice-cdc/sluice/daemon"
	"github.com/sluice-cdc/sluice/integration/harness"
)

type options struct {
	For    time.Duration
	Dir    string
	Listen string
	Rate   int
	Log    *zap.Logger
	// OnListen reports the daemon's HTTP address (tests).
	OnListen func(string)
}

// result compares the source with the DuckDB copy at the end.
type result struct {
	Tables   []tableResult
	Searches []searchResult
	Equal    bool
	Path     string
	Index    string
}

// searchResult is one search on the embedded index and the number of rows
// PostgreSQL has for it.
type searchResult struct {
	Query           string
	SourceN, IndexN int64
}

type tableResult struct {
	Name           string
	Source, Sink   string // row count and checksum
	SourceN, SinkN int64
}

func (r result) summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "\nDuckDB copy: %s\n", r.Path)
	for _, t := range r.Tables {
		mark := "equal"
		if t.Source != t.Sink {
			mark = "DIFFERENT"
		}
		fmt.Fprintf(&b, "  %-18s postgres %-40s duckdb %-40s %s\n", t.Name, t.Source, t.Sink, mark)
	}
	if r.Index != "" {
		fmt.Fprintf(&b, "\nsearch index: %s (try: go run ./cmd/sluice search -c %s 'status:paid')\n", r.Index,
			filepath.Join(filepath.Dir(r.Index), "quickstart-postgres.yaml"))
	}
	for _, q := range r.Searches {
		mark := "equal"
		if q.SourceN != q.IndexN {
			mark = "DIFFERENT"
		}
		fmt.Fprintf(&b, "  %-42s %6d hits   postgres %6d rows   %s\n", q.Query, q.IndexN, q.SourceN, mark)
	}
	if r.Equal {
		b.WriteString("every table in DuckDB and every search of the index agree with PostgreSQL\n")
	}
	return b.String()
}

const schemaSQL = `
CREATE TYPE order_status AS ENUM ('pending', 'paid', 'shipped', 'cancelled');
CREATE TABLE customers (
  id         bigserial PRIMARY KEY,
  name       text NOT NULL,
  email      varchar(200),
  balance    numeric(12,2) NOT NULL DEFAULT 0,
  vip        boolean NOT NULL DEFAULT false,
  tags       text[],
  created_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE orders (
  id          bigserial PRIMARY KEY,
  customer_id bigint NOT NULL,
  amount      numeric(10,2) NOT NULL,
  status      order_status NOT NULL DEFAULT 'pending',
  placed_on   date NOT NULL DEFAULT current_date,
  details     jsonb,
  ref         uuid DEFAULT gen_random_uuid()
);
INSERT INTO customers (name, email, balance, vip, tags)
  SELECT 'customer ' || g, 'c' || g || '@example.com', (g % 1000) * 1.25, g % 10 = 0, ARRAY['t' || (g % 5)]
  FROM generate_series(1, 1000) g;
INSERT INTO orders (customer_id, amount, status, details)
  SELECT 1 + g % 1000, (g % 500) + 0.99, (ARRAY['pending','paid','shipped']::order_status[])[1 + g % 3],
         jsonb_build_object('items', g % 7, 'gift', g % 11 = 0)
  FROM generate_series(1, 5000) g;
`

// ensurePostgres installs the Debian package when no server is found.
func ensurePostgres(log *zap.Logger) error {
	if _, _, err := harness.PostgresBinDir(); err == nil {
		return nil
	}
	if os.Geteuid() != 0 {
		return errors.New("PostgreSQL is not installed: run `sudo apt-get install -y postgresql` (or `make deps`) and try again")
	}
	log.Info("PostgreSQL is not installed: installing the Debian package (apt-get install postgresql)")
	for _, args := range [][]string{{"update"}, {"install", "-y", "--no-install-recommends", "postgresql"}} {
		cmd := exec.Command("apt-get", args...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("apt-get %s: %w", args[0], err)
		}
	}
	_, _, err := harness.PostgresBinDir()
	return err
}

func run(ctx context.Context, o options) (result, error) {
	log := o.Log
	if err := ensurePostgres(log); err != nil {
		return result{}, err
	}
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return result{}, err
	}
	// A fresh copy each run: the PostgreSQL server is new, so old
	// checkpoints and DuckDB rows belong to a database that is gone.
	for _, p := range []string{"quickstart.duckdb", "quickstart.duckdb.wal", "quickstart.bleve", "offsets"} {
		_ = os.RemoveAll(filepath.Join(dir, p))
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return result{}, err
	}
	bg := context.WithoutCancel(ctx)
	pg, err := harness.StartPostgres(bg, harness.PostgresOptions{})
	if err != nil {
		return result{}, err
	}
	defer pg.Stop()
	if err := pg.CreateDatabase(bg, "shop"); err != nil {
		return result{}, err
	}
	if err := pg.Exec(bg, "shop", schemaSQL); err != nil {
		return result{}, err
	}
	log.Info("throwaway PostgreSQL running with sample tables", zap.String("dsn", pg.DSN("shop")))

	cfgPath := filepath.Join(dir, "quickstart-postgres.yaml")
	cfgText := fmt.Sprintf(`# Written by cmd/quickstart for its throwaway PostgreSQL.
pipeline: quickstart
source:
  postgres:
    dsn: %s
    tables: [public.customers, public.orders]
    heartbeat_interval: 2s
# Every order with its customer embedded, for the search index:
#   sluice search -c CONFIG 'customer:"customer 10"'
transforms:
  - join:
      output: public.order_docs
      from: public.orders
      with:
        - {table: public.customers, on: [customer_id], as: customer, columns: [name, email, vip]}
sinks:
  - duckdb:
      path: ./quickstart.duckdb
  - bleve:
      path: ./quickstart.bleve
offsets:
  dir: ./offsets
runtime:
  checkpoint_interval: 200ms
http:
  listen: %q
log:
  format: console
`, pg.DSN("shop"), o.Listen)
	if err := os.WriteFile(cfgPath, []byte(cfgText), 0o644); err != nil {
		return result{}, err
	}
	cfg, err := config.Load(cfgPath)
	if err != nil {
		return result{}, err
	}

	runCtx, stopDaemon := context.WithCancel(bg)
	defer stopDaemon()
	daemonErr := make(chan error, 1)
	go func() {
		daemonErr <- daemon.Run(runCtx, cfg, daemon.RunFlags{DropSlotOnExit: true, OnListen: o.OnListen}, log)
	}()
	log.Info("sluice is capturing public.customers and public.orders (and, joined, public.order_docs) into DuckDB and a search index; "+
		"watch it with `go run ./cmd/sluice status`, search it with `go run ./cmd/sluice search -c CONFIG QUERY`",
		zap.String("config", cfgPath))

	// The workload runs until the deadline or Ctrl-C.
	wctx, stopWork := context.WithCancel(ctx)
	if o.For > 0 {
		wctx, stopWork = context.WithTimeout(ctx, o.For)
	}
	defer stopWork()
	workErr := make(chan error, 1)
	go func() { workErr <- workload(wctx, pg.DSN("shop"), o.Rate) }()
	select {
	case err := <-workErr:
		if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
			return result{}, fmt.Errorf("workload: %w", err)
		}
	case err := <-daemonErr:
		return result{}, fmt.Errorf("sluice stopped: %w", err)
	}

	// Catch up: a last transaction, then wait until the slot confirms it,
	// which sluice does only once it is durable in DuckDB (Invariant 1).
	mark, err := finalMark(bg, pg.DSN("shop"))
	if err != nil {
		return result{}, err
	}
	if err := waitConfirmed(bg, pg.DSN("shop"), cfg.Source.Postgres.Slot, mark, daemonErr); err != nil {
		return result{}, err
	}
	stopDaemon()
	if err := <-daemonErr; err != nil {
		return result{}, fmt.Errorf("sluice: %w", err)
	}
	res, err := compare(bg, pg.DSN("shop"), filepath.Join(dir, "quickstart.duckdb"))
	if err != nil {
		return res, err
	}
	res.Index = filepath.Join(dir, "quickstart.bleve")
	return res, compareSearch(bg, pg.DSN("shop"), res.Index, &res)
}

// workload writes a small mix of inserts, updates and deletes.
func workload(ctx context.Context, dsn string, rate int) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if rate <= 0 {
		rate = 50
	}
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	rng := rand.New(rand.NewPCG(1, 2))
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		cust := 1 + rng.IntN(1000)
		var err error
		switch n := rng.IntN(10); {
		case n < 5:
			_, err = conn.Exec(ctx, `WITH o AS (INSERT INTO orders (customer_id, amount, details) VALUES ($1, $2, '{"items": 1}') RETURNING amount)
				UPDATE customers SET balance = balance + (SELECT amount FROM o) WHERE id = $1`, cust, float64(rng.IntN(20000))/100)
		case n < 8:
			_, err = conn.Exec(ctx, `UPDATE orders SET status = 'paid' WHERE id = (SELECT id FROM orders WHERE status = 'pending' ORDER BY id LIMIT 1 OFFSET $1)`, rng.IntN(50))
		case n < 9:
			_, err = conn.Exec(ctx, `DELETE FROM orders WHERE id = (SELECT id FROM orders ORDER BY id LIMIT 1 OFFSET $1)`, rng.IntN(100))
		default:
			_, err = conn.Exec(ctx, `UPDATE customers SET vip = NOT vip, tags = array_append(tags, 'x') WHERE id = $1`, cust)
		}
		if err != nil && ctx.Err() == nil {
			return err
		}
	}
}

// finalMark commits one last change and returns an LSN inside it: once the
// slot's confirmed position passes it, everything before is durable.
func finalMark(ctx context.Context, dsn string) (string, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	if err != nil {
		return "", err
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `UPDATE customers SET email = email WHERE id = 1`); err != nil {
		return "", err
	}
	var lsn string
	if err := tx.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&lsn); err != nil {
		return "", err
	}
	return lsn, tx.Commit(ctx)
}

func waitConfirmed(ctx context.Context, dsn, slot, mark string, daemonErr <-chan error) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	deadline := time.Now().Add(2 * time.Minute)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		var done bool
		err := conn.QueryRow(ctx, `SELECT coalesce(confirmed_flush_lsn > $2::pg_lsn, false) FROM pg_replication_slots WHERE slot_name = $1`, slot, mark).Scan(&done)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		if done {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("sluice did not confirm %s within 2 minutes", mark)
		}
		select {
		case err := <-daemonErr:
			return fmt.Errorf("sluice stopped while catching up: %v", err)
		case <-tick.C:
		}
	}
}
