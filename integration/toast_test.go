package integration

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sluice-cdc/sluice/integration/harness"
)

// Primary-key updates of rows whose large (TOASTed, out-of-line) column
// they leave untouched, under REPLICA IDENTITY DEFAULT: pgoutput sends the
// new key's row with that column "unchanged", and no sink holds a value
// for the new key. A randomized workload of key moves, the same moves
// inside one transaction with the insert, deletes and re-inserts of the
// moved-to key, and plain updates runs on two connections while sluice
// feeds every sink kind; at the end `sluice verify` finds every sink equal
// to PostgreSQL — no large value NULL, none left from a deleted row.
func TestToastedKeyUpdatesLandInEverySink(t *testing.T) {
	pg, k, reg := kafkaStack(t)
	osn, es := sharedSearch(t, harness.OpenSearch), sharedSearch(t, harness.Elasticsearch)
	rd := harness.RedisT(t)
	ctx := context.Background()
	for _, db := range []string{"tsrc", "tdst"} {
		if err := pg.CreateDatabase(ctx, db); err != nil {
			t.Fatal(err)
		}
	}
	// big(x) is about 32 KB of hex: stored out of line even compressed.
	const big = `(SELECT string_agg(md5(g::text || '/' || %s), '') FROM generate_series(1, 1000) g)`
	if err := pg.Exec(ctx, "tsrc", `CREATE TABLE docs (id int PRIMARY KEY, body text, blob bytea, n int NOT NULL)`,
		fmt.Sprintf(`INSERT INTO docs SELECT i, %s, convert_to(%s, 'UTF8'), 0 FROM generate_series(1, 200) i`,
			fmt.Sprintf(big, "i::text"), fmt.Sprintf(big, "'b' || i"))); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg := writeConfig(t, dir, fmt.Sprintf(`pipeline: toast
source:
  postgres:
    dsn: %s
    tables: [public.docs]
    heartbeat_interval: 200ms
sinks:
  - postgres: {name: pg, dsn: "%s"}
  - duckdb: {name: duck, path: ./sink.duckdb}
  - redis: {name: cache, addr: "%s"}
  - bleve: {name: local, path: ./sink.bleve}
  - opensearch: {name: os_toast, urls: ["%s"], index_template: "toast.{table}"}
  - elasticsearch: {name: es_toast, urls: ["%s"], index_template: "toast.{table}"}
  - kafka:
      name: events
      brokers: [%s]
      create_topics: {partitions: 2, compact: true}
      producer: {delivery_timeout: 10s}
      registry: {url: %s}
offsets: {dir: ./offsets}
runtime: {checkpoint_interval: 100ms}
`, pg.DSN("tsrc"), pg.DSN("tdst"), rd.Addr(), osn.URL, es.URL, k.Addr(), reg.URL()))
	d := startDaemon(t, cfg)
	d.waitAddr(t, 2*time.Minute)
	waitFile(t, filepath.Join(dir, "offsets", "checkpoint.json"), d)

	var moves, sameTx atomic.Int64
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := pgx.Connect(ctx, pg.DSN("tsrc"))
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close(ctx)
			rng := rand.New(rand.NewPCG(uint64(w), 5))
			next := 10_000 + w*100_000 // fresh keys, disjoint per writer
			pick := func() int {
				var id int
				// A key this writer's range or the loaded rows hold now.
				if err := c.QueryRow(ctx, `SELECT id FROM docs WHERE id <= 200 OR id / 100000 = $1 ORDER BY random() LIMIT 1`, w).Scan(&id); err != nil {
					return 1
				}
				return id
			}
			for range 150 {
				var err error
				switch op := rng.IntN(10); {
				case op < 4: // move a row to a fresh key, leaving the large columns untouched
					next++
					_, err = c.Exec(ctx, `UPDATE docs SET id = $1, n = n + 1 WHERE id = $2`, next, pick())
					moves.Add(1)
				case op < 6: // insert two, delete one, move the other onto it: one transaction
					a, b := next+1, next+2
					next += 2
					err = pgx.BeginFunc(ctx, c, func(tx pgx.Tx) error {
						_, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO docs VALUES ($1::int, %s, convert_to(%s, 'UTF8'), 1), ($2::int, %s, convert_to(%s, 'UTF8'), 2)`,
							fmt.Sprintf(big, "$1::int::text"), fmt.Sprintf(big, "'x' || $1::int"), fmt.Sprintf(big, "$2::int::text"), fmt.Sprintf(big, "'y' || $2::int")), a, b)
						if err == nil {
							_, err = tx.Exec(ctx, `DELETE FROM docs WHERE id = $1`, a)
						}
						if err == nil {
							_, err = tx.Exec(ctx, `UPDATE docs SET id = $1, n = 3 WHERE id = $2`, a, b)
						}
						return err
					})
					sameTx.Add(1)
				case op < 7: // delete a row and insert its key again with other values
					id := pick()
					err = pgx.BeginFunc(ctx, c, func(tx pgx.Tx) error {
						if _, err := tx.Exec(ctx, `DELETE FROM docs WHERE id = $1`, id); err != nil {
							return err
						}
						_, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO docs VALUES ($1::int, %s, NULL, 9)`, fmt.Sprintf(big, "'again' || $1::int")), id)
						return err
					})
					// Both writers may pick one of the loaded rows: the
					// second's delete then finds the row the first deleted
					// (not the one it inserted) and its insert collides.
					// Its transaction rolled back; nothing happened.
					if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) && pgErr.Code == "23505" {
						err = nil
					}
				case op < 9:
					_, err = c.Exec(ctx, `UPDATE docs SET n = n + 1 WHERE id = $1`, pick())
				default:
					_, err = c.Exec(ctx, fmt.Sprintf(`UPDATE docs SET body = %s WHERE id = $1::int`, fmt.Sprintf(big, "'new' || $1::int")), pick())
				}
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	mark := commitMarkOn(t, ctx, pg.DSN("tsrc"), `UPDATE docs SET n = n WHERE id = (SELECT min(id) FROM docs)`)
	waitSlotConfirmed(t, ctx, pg.DSN("tsrc"), "sluice_toast", mark, d)
	d.signal(syscall.SIGTERM)
	if code := d.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("exit %d:\n%s", code, d.logs())
	}
	expectVerifyEqual(t, cfg)
	t.Logf("%d key moves, %d insert-delete-move transactions", moves.Load(), sameTx.Load())
}
