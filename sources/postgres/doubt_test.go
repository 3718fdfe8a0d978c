package postgres

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/sluice-cdc/sluice/integration/harness"
	"github.com/sluice-cdc/sluice/pipeline"
)

// Under a DEFERRABLE primary key two rows share a key inside a transaction
// for a while, and the changes name keys, not rows. Shifting every key by
// one (streamed as an in-progress transaction, and not), swapping two
// keys, moving a new row onto a held key and away again, deleting the row
// that held a key after a new one arrived, and inserting and deleting a
// row in one transaction — while another session keeps updating random
// rows and moving keys of a table whose key is not deferrable — leave the
// sink equal to both tables, every round.
func TestDeferrableKeyMoves(t *testing.T) {
	pg, ctx := testDB(t)
	rounds := harness.Trials(3)
	const rows = 3000
	exec(t, ctx, pg, "shop",
		// A deferrable key cannot be the replica identity: such a table
		// publishes its updates under FULL (or another unique index).
		"CREATE TABLE t (id int PRIMARY KEY DEFERRABLE, body text, n int)",
		"ALTER TABLE t REPLICA IDENTITY FULL",
		"CREATE TABLE plain (id int PRIMARY KEY, n int)",
		// The shifts of every row (about 400 kB) are streamed in progress.
		"ALTER DATABASE shop SET logical_decoding_work_mem = '64kB'")
	opts := testOptions(pg, "public.t", "public.plain")
	opts.Streaming = true
	src := openSource(t, ctx, opts, nil)
	exec(t, ctx, pg, "shop",
		"INSERT INTO t SELECT g, 'row ' || g || repeat('.', 100), 0 FROM generate_series(1, 3000) g",
		"INSERT INTO plain SELECT g, 0 FROM generate_series(1, 100) g")

	pool, err := pgxpool.New(ctx, pg.DSN("shop"))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	wctx, stop := context.WithCancel(ctx)
	writerDone := make(chan error, 1)
	var paused sync.Mutex // held: the writer waits (the sink is compared)
	go func() {
		rng := rand.New(rand.NewPCG(1, 2))
		for wctx.Err() == nil {
			paused.Lock()
			_, err := pool.Exec(wctx, "UPDATE t SET n = n + 1 WHERE id = $1", rng.IntN(rows+2*rounds)+1)
			if err == nil {
				_, err = pool.Exec(wctx, "UPDATE plain SET n = n + 1, id = id + 1000 WHERE id = $1", rng.IntN(100)+1)
			}
			paused.Unlock()
			if err != nil && wctx.Err() == nil && !isSerializationOrUnique(err) {
				writerDone <- err
				return
			}
		}
		writerDone <- nil
	}()

	r := newReader(t, src, false)
	for round := range rounds {
		// Under a deferrable key the shift and the writer can deadlock (the
		// writer's end-of-statement key check waits for the shift, which
		// waits for the row the writer updated); the victim is rolled back
		// whole, so it runs again.
		execPastDeadlocks(t, ctx, pg, "shop",
			// Every key moves one up: row k sits on k+1 before row k+1 leaves.
			"UPDATE t SET id = id + 1, body = body || 'x'",
			// Only the top rows, in a transaction too small to be streamed.
			"UPDATE t SET id = id + 1 WHERE id > (SELECT max(id) FROM t) - 50",
			// A swap.
			"UPDATE t SET id = CASE id WHEN 500 THEN 501 ELSE 500 END, n = n + 1000 WHERE id IN (500, 501)",
			// A new row lands on a held key and moves on: the key keeps
			// its row, which no change of the transaction carries.
			"BEGIN; SET CONSTRAINTS ALL DEFERRED; INSERT INTO t VALUES (700, 'visitor', -1); "+
				"UPDATE t SET id = 100000 + 1000 * "+strconv.Itoa(round)+" WHERE id = 700 AND body = 'visitor'; COMMIT",
			// A new row lands on a held key and the old row is deleted.
			"BEGIN; SET CONSTRAINTS ALL DEFERRED; INSERT INTO t VALUES (800, 'newcomer "+strconv.Itoa(round)+"', -2); "+
				"DELETE FROM t WHERE id = 800 AND body NOT LIKE 'newcomer%'; COMMIT",
			// A row inserted and deleted in one transaction.
			"BEGIN; INSERT INTO t VALUES (900000, 'brief', 0); DELETE FROM t WHERE id = 900000; COMMIT",
		)
		paused.Lock()
		r.reachLSN(ctx, currentLSN(t, ctx, pg))
		equalRows(t, "public.t, round "+strconv.Itoa(round), r.sink.Table("public.t"), selectRows(t, ctx, pg, "SELECT id, body, n FROM t"))
		paused.Unlock()
	}
	stop()
	if err := <-writerDone; err != nil {
		t.Fatal(err)
	}
	r.reachLSN(ctx, currentLSN(t, ctx, pg))
	equalRows(t, "public.t", r.sink.Table("public.t"), selectRows(t, ctx, pg, "SELECT id, body, n FROM t"))
	equalRows(t, "public.plain", r.sink.Table("public.plain"), selectRows(t, ctx, pg, "SELECT id, n FROM plain"))
	// t is REPLICA IDENTITY FULL: every update and delete, the appended
	// ones included, carries a full before image (body is never NULL).
	for _, rec := range r.sink.Records {
		if rec.Table == nil || rec.Table.ID.Table != "t" || (rec.Op != pipeline.OpUpdate && rec.Op != pipeline.OpDelete) {
			continue
		}
		if len(rec.Before) != 3 || rec.Before[1] == nil {
			t.Fatalf("%s of key %v without a full before image: %v", rec.Op, rec.After, rec.Before)
		}
	}
	// The shifts of every row went through the streamed path. The
	// server publishes the slot's counters a moment after decoding.
	deadline := time.Now().Add(30 * time.Second)
	for {
		var streamed int64
		if err := pool.QueryRow(ctx, "SELECT stream_txns FROM pg_stat_replication_slots WHERE slot_name = $1", opts.Slot).Scan(&streamed); err != nil {
			t.Fatal(err)
		}
		if streamed >= int64(rounds) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d transactions streamed in progress, want at least %d", streamed, rounds)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// isSerializationOrUnique reports the writer's update of a key a shift
// moved at the same moment (a unique violation under the immediate key of
// plain, or a deadlock against a shift).
// execPastDeadlocks runs each statement on a fresh connection, again when
// the server chose it as a deadlock's victim (it was rolled back whole).
func execPastDeadlocks(t *testing.T, ctx context.Context, pg *harness.Postgres, db string, sqls ...string) {
	t.Helper()
	for _, s := range sqls {
		for attempt := 1; ; attempt++ {
			err := pg.Exec(ctx, db, s)
			var pe interface{ SQLState() string }
			if err == nil {
				break
			}
			if !errors.As(err, &pe) || pe.SQLState() != "40P01" || attempt == 10 {
				t.Fatal(err)
			}
			t.Logf("attempt %d was a deadlock's victim: %v", attempt, err)
		}
	}
}

func isSerializationOrUnique(err error) bool {
	var pe interface{ SQLState() string }
	if !errors.As(err, &pe) {
		return false
	}
	switch pe.SQLState() {
	case "23505", "40P01", "40001":
		return true
	}
	return false
}

// Commit order in the WAL and visibility order can differ: a shift of a
// deferrable key whose commit waits for a synchronous standby that never
// answers is decoded while every other session still sees the rows on
// their old keys. Read then, the keys in doubt would bring the old rows
// back beside the shifted ones. The source says why it waits, hands over
// nothing of the shift until it is visible, and the sink then equals the
// table.
func TestDeferrableKeyMovesWaitForVisibility(t *testing.T) {
	pg, ctx := testDB(t, skewSettings)
	exec(t, ctx, pg, "shop",
		"CREATE TABLE t (id int PRIMARY KEY DEFERRABLE, body text)",
		"ALTER TABLE t REPLICA IDENTITY FULL")
	// Restored after the source's goroutines stop (cleanups run last
	// first).
	restore := slowVisible
	t.Cleanup(func() { slowVisible = restore })
	slowVisible = 100 * time.Millisecond
	core, logs := observer.New(zap.WarnLevel)
	src, err := New(testOptions(pg, "public.t"), zap.New(zapcore.NewTee(core, testLogger(t).Core())), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := src.Open(ctx, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = src.Close(context.Background()) })
	exec(t, ctx, pg, "shop", "INSERT INTO t SELECT g, 'row ' || g FROM generate_series(1, 200) g")
	r := newReader(t, src, false)
	r.reachLSN(ctx, currentLSN(t, ctx, pg))

	show := invisibleCommit(t, ctx, pg, "UPDATE t SET id = id + 1, body = body || 'x'")
	end := currentLSN(t, ctx, pg) // past the shift's commit record
	reached := make(chan error, 1)
	go func() {
		for {
			b, err := src.Read(ctx)
			if err != nil {
				reached <- err
				return
			}
			r.sink.Apply(b.Records)
			if pp, err := ParsePosition(b.Pos); b.Pos != nil && (err != nil || pp.LSN >= end) {
				reached <- err
				return
			}
		}
	}()
	waitFor(t, ctx, "the source to say it waits for the shift's visibility", func() bool {
		return logs.FilterMessageSnippet("not visible to other sessions yet").Len() > 0
	})
	select {
	case err := <-reached:
		t.Fatalf("the source handed the shift over while it was not visible (%v)", err)
	default:
	}
	if err := show(); err != nil {
		t.Fatal(err)
	}
	if err := <-reached; err != nil {
		t.Fatal(err)
	}
	var low int
	pool, err := pgxpool.New(ctx, pg.DSN("shop"))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := pool.QueryRow(ctx, "SELECT min(id) FROM t").Scan(&low); err != nil || low != 2 {
		t.Fatalf("the table's lowest key is %d (%v), want 2: the shift did not commit", low, err)
	}
	want := selectRows(t, ctx, pg, "SELECT id, body FROM t")
	equalRows(t, "public.t", r.sink.Table("public.t"), want)
}
