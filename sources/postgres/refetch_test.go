package postgres

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluice-cdc/sluice/pipeline"
)

// A primary-key UPDATE of a row whose TOASTed column it leaves unchanged
// (REPLICA IDENTITY DEFAULT) arrives as a delete and an insert whose
// insert carries the column's real value, re-read by the new key: also
// when the new key held a row that was deleted before, and when the row
// was inserted in the same transaction. Nothing becomes NULL and no
// deleted row's value comes back.
func TestKeyUpdateCarriesUnchangedToastedValue(t *testing.T) {
	pg, ctx := testDB(t)
	big := func(seed int) string {
		return "(SELECT string_agg(md5((g * " + string(rune('0'+seed)) + ")::text), '') FROM generate_series(1, 1000) g)"
	}
	exec(t, ctx, pg, "shop", "CREATE TABLE t (id int PRIMARY KEY, body text, n int)")
	opts := testOptions(pg, "public.t")
	src := openSource(t, ctx, opts, nil)
	exec(t, ctx, pg, "shop",
		"INSERT INTO t VALUES (3001, "+big(1)+", 1), (3002, "+big(2)+", 2)",
		"DELETE FROM t WHERE id = 3001",
		"UPDATE t SET id = 3001, n = 3 WHERE id = 3002",
		"BEGIN; INSERT INTO t VALUES (4001, "+big(3)+", 4); COMMIT",
		"BEGIN; INSERT INTO t VALUES (5001, "+big(4)+", 5); UPDATE t SET id = 5002 WHERE id = 5001; COMMIT",
		"UPDATE t SET id = 4002 WHERE id = 4001",
	)
	r := newReader(t, src, false)
	target := currentLSN(t, ctx, pg)
	r.reachLSN(ctx, target)
	moved := 0
	for _, rec := range r.sink.Records {
		if rec.Op != pipeline.OpInsert || rec.Before != nil {
			continue
		}
		id, n := fmt.Sprint(rec.After[0]), fmt.Sprint(rec.After[2])
		// The inserts that come from key moves: 3002→3001 (n=3),
		// 4001→4002 and 5001→5002.
		if (id == "3001" && n == "3") || id == "4002" || id == "5002" {
			if rec.After[1] == pipeline.UnchangedValue || rec.After[1] == nil {
				t.Fatalf("insert of key %s carries %v for the TOASTed column", id, rec.After[1])
			}
			moved++
		}
	}
	if moved != 3 {
		t.Fatalf("%d key moves seen, want 3", moved)
	}
	equalRows(t, "public.t", r.sink.Table("public.t"), selectRows(t, ctx, pg, "SELECT id, body, n FROM t"))
}

// waitVisible tells a committed transaction (visible at once) from one
// still open (waited for until the context ends), by its 32-bit xid.
func TestWaitVisible(t *testing.T) {
	pg, ctx := testDB(t)
	pool, err := pgxpool.New(ctx, pg.DSN("shop"))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var committed int64
	if err := pool.QueryRow(ctx, "SELECT txid_current()").Scan(&committed); err != nil {
		t.Fatal(err)
	}
	if err := waitVisible(ctx, pool, uint32(committed), nil); err != nil {
		t.Fatalf("committed xid %d not visible: %v", committed, err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	var open int64
	if err := tx.QueryRow(ctx, "SELECT txid_current()").Scan(&open); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if err := waitVisible(short, pool, uint32(open), nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("open xid %d: the wait ended with %v, want the context's deadline", open, err)
	}
}
