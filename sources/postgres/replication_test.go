package postgres

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-cdc/sluice/pipeline"
)

// TestInterleavedTransactions: T1 begins first and commits last; its
// changes are ordered after T2's (commit order), by version and in the
// stream, and T1's update of T2's row wins.
func TestInterleavedTransactions(t *testing.T) {
	pg, ctx := testDB(t)
	exec(t, ctx, pg, "shop", "CREATE TABLE t (id int PRIMARY KEY, v text)")
	src := openSource(t, ctx, testOptions(pg, "public.t"), nil)

	c1, err := pgx.Connect(ctx, pg.DSN("shop"))
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close(context.Background())
	t1, err := c1.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := t1.Exec(ctx, "INSERT INTO t VALUES (1, 't1')"); err != nil {
		t.Fatal(err)
	}
	exec(t, ctx, pg, "shop", "INSERT INTO t VALUES (2, 't2')") // T2 commits
	if _, err := t1.Exec(ctx, "UPDATE t SET v = 't1 saw t2' WHERE id = 2"); err != nil {
		t.Fatal(err)
	}
	if err := t1.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	r := newReader(t, src, true)
	r.until(ctx, "both transactions", func() bool { return len(r.sink.Records) >= 3 })
	recs := r.sink.Records
	if recs[0].Op != pipeline.OpInsert || fmt.Sprint(recs[0].After) != "[2 t2]" {
		t.Fatalf("first record %v %v, want T2's insert", recs[0].Op, recs[0].After)
	}
	if recs[1].After[0] != int64(1) || recs[2].Op != pipeline.OpUpdate {
		t.Fatalf("T1's records out of order: %v %v", recs[1].After, recs[2].After)
	}
	if !recs[0].Version.Less(recs[1].Version) || !recs[1].Version.Less(recs[2].Version) {
		t.Fatalf("versions not in commit order: %v %v %v", recs[0].Version, recs[1].Version, recs[2].Version)
	}
	if recs[1].Version[1] != recs[2].Version[1] || recs[1].Version[3] != rowBase || recs[2].Version[3] != rowBase+1 {
		t.Fatalf("T1's versions %v %v: want one commit LSN, indexes rowBase and rowBase+1", recs[1].Version, recs[2].Version)
	}
	equalRows(t, "state", r.sink.Table("public.t"), selectRows(t, ctx, pg, "SELECT * FROM t"))
}

// TestReconnectAfterTerminate: the walsender is killed repeatedly while
// rows are inserted; every row arrives exactly once.
func TestReconnectAfterTerminate(t *testing.T) {
	pg, ctx := testDB(t)
	exec(t, ctx, pg, "shop", "CREATE TABLE t (id int PRIMARY KEY)")
	opts := testOptions(pg, "public.t")
	src := openSource(t, ctx, opts, nil)

	const rows = 3000
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		c, err := pgx.Connect(ctx, pg.DSN("shop"))
		if err != nil {
			t.Error(err)
			return
		}
		defer c.Close(context.Background())
		for i := 1; i <= rows; i += 10 {
			if _, err := c.Exec(ctx, "INSERT INTO t SELECT g FROM generate_series($1::int, $2::int) g", i, i+9); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	killed := 0
	wg.Add(1)
	go func() {
		defer wg.Done()
		c, err := pgx.Connect(ctx, pg.DSN("shop"))
		if err != nil {
			t.Error(err)
			return
		}
		defer c.Close(context.Background())
		for killed < 3 && ctx.Err() == nil {
			var n int
			_ = c.QueryRow(ctx, "SELECT count(pg_terminate_backend(active_pid)) FROM pg_replication_slots WHERE slot_name = $1 AND active", opts.Slot).Scan(&n)
			killed += n
			if n == 0 { // poll until the source has reconnected
				select {
				case <-ctx.Done():
				case <-time.After(20 * time.Millisecond):
				}
			}
		}
	}()
	r := newReader(t, src, true)
	r.until(ctx, "all rows", func() bool { return len(r.sink.Table("public.t")) == rows })
	wg.Wait()
	if killed < 3 {
		t.Fatalf("walsender killed %d times", killed)
	}
	target := currentLSN(t, ctx, pg)
	r.reachLSN(ctx, target)
	seen := map[string]int{}
	for _, rec := range r.sink.Records {
		if rec.Op == pipeline.OpInsert {
			seen[fmt.Sprint(rec.After)]++
		}
	}
	for k, n := range seen {
		if n != 1 {
			t.Fatalf("row %s delivered %d times", k, n)
		}
	}
	if len(seen) != rows {
		t.Fatalf("%d distinct rows, want %d", len(seen), rows)
	}
	if src.m == nil || !src.Status().Connected {
		waitFor(t, ctx, "reconnected", func() bool { return src.Status().Connected })
	}
}

// TestIdleDatabaseAdvances: the captured database is idle while another
// database on the server writes; heartbeats and keepalive positions, once
// acknowledged, move the slot's confirmed_flush_lsn and restart_lsn on.
func TestIdleDatabaseAdvances(t *testing.T) {
	pg, ctx := testDB(t)
	exec(t, ctx, pg, "shop", "CREATE TABLE t (id int PRIMARY KEY)")
	if err := pg.CreateDatabase(ctx, "busy"); err != nil {
		t.Fatal(err)
	}
	opts := testOptions(pg, "public.t")
	src := openSource(t, ctx, opts, nil)
	startConfirmed := confirmedLSN(t, ctx, pg, opts.Slot)
	startRestart := queryLSN(t, ctx, pg, "shop", "SELECT restart_lsn::text FROM pg_replication_slots WHERE slot_name = $1", opts.Slot)

	exec(t, ctx, pg, "busy", "CREATE TABLE w (id int, pad text)",
		"INSERT INTO w SELECT g, repeat('x', 200) FROM generate_series(1, 20000) g")
	busyEnd := currentLSN(t, ctx, pg)

	r := newReader(t, src, true)
	sawHeartbeat := func() bool {
		for _, rec := range r.sink.Records {
			if rec.Op == pipeline.OpHeartbeat {
				if rec.EventTime.IsZero() || time.Since(rec.EventTime) > time.Minute {
					t.Fatalf("heartbeat event time %v", rec.EventTime)
				}
				return true
			}
		}
		return false
	}
	r.until(ctx, "a heartbeat positioned past the other database's writes", func() bool {
		return r.lastPos != nil && posLSN(t, r.lastPos) >= busyEnd && sawHeartbeat()
	})
	waitFor(t, ctx, "confirmed_flush_lsn past the busy writes", func() bool {
		return confirmedLSN(t, ctx, pg, opts.Slot) >= busyEnd
	})
	if confirmedLSN(t, ctx, pg, opts.Slot) <= startConfirmed {
		t.Fatal("confirmed_flush_lsn did not move")
	}
	// restart_lsn follows once the server logs a running-transactions
	// record (a checkpoint writes one) and the slot confirms past it.
	waitFor(t, ctx, "restart_lsn to advance", func() bool {
		exec(t, ctx, pg, "shop", "CHECKPOINT")
		r.step(ctx, "restart_lsn to advance")
		return queryLSN(t, ctx, pg, "shop", "SELECT restart_lsn::text FROM pg_replication_slots WHERE slot_name = $1", opts.Slot) > startRestart
	})
	st := src.Status()
	if st.Phase != PhaseStream || !st.Connected || st.LastEventTime.IsZero() {
		t.Fatalf("status %+v", st)
	}
}

// TestStreamingLargeTransaction: with Streaming, a transaction larger than
// the server's logical_decoding_work_mem arrives whole, at its commit,
// split into chunks of which only the last carries a position.
func TestStreamingLargeTransaction(t *testing.T) {
	pg, ctx := testDB(t)
	exec(t, ctx, pg, "shop", "CREATE TABLE t (id int PRIMARY KEY, pad text)",
		"ALTER SYSTEM SET logical_decoding_work_mem = '64kB'", "SELECT pg_reload_conf()")
	opts := testOptions(pg, "public.t")
	opts.Streaming = true
	src := openSource(t, ctx, opts, nil)
	exec(t, ctx, pg, "shop", "INSERT INTO t SELECT g, repeat('p', 100) FROM generate_series(1, 12000) g")
	r := newReader(t, src, true)
	r.until(ctx, "the large transaction", func() bool { return len(r.sink.Table("public.t")) == 12000 })
	var withPos, without int
	for _, b := range r.batches {
		if len(b.Records) == 0 || b.Records[0].Op != pipeline.OpInsert {
			continue
		}
		if b.Pos == nil {
			without++
		} else {
			withPos++
		}
	}
	if withPos != 1 || without == 0 {
		t.Fatalf("batches of the transaction: %d with a position, %d without; want 1 and some", withPos, without)
	}
	if !strings.Contains(fmt.Sprint(src.stream.pluginArgs()), "streaming 'on'") {
		t.Fatal("streaming not requested")
	}
}
