package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/snapshot/snaptest"
)

// TestInitialLoadWithConcurrentWrites loads 10k rows (and a composite-key
// table with values that need COPY escapes) while another session keeps
// inserting, updating and deleting; the sink state built by version from
// the snapshot and the stream equals the tables. A leftover slot (as an
// interrupted load leaves it) is dropped and recreated.
func TestInitialLoadWithConcurrentWrites(t *testing.T) {
	pg, ctx := testDB(t)
	exec(t, ctx, pg, "shop",
		"CREATE TABLE t (id int PRIMARY KEY, v text, n bigint)",
		"INSERT INTO t SELECT g, 'row ' || g, g * 10 FROM generate_series(1, 10000) g",
		"CREATE TABLE c (a text, b int, payload text, PRIMARY KEY (a, b))",
		`INSERT INTO c SELECT chr(65 + g % 7) || E'\t' || (g % 13), g, CASE WHEN g % 5 = 0 THEN NULL
			ELSE E'tab\there nl\nthere back\\slash cr\r quote'' caf\u00e9 ' || g END FROM generate_series(1, 3000) g`,
		"ANALYZE t",
		"SELECT pg_create_logical_replication_slot('sluice_test', 'pgoutput')", // left by an "interrupted" load
	)
	opts := testOptions(pg, "public.t", "public.c")
	opts.Snapshot = SnapshotOptions{Mode: SnapshotInitial, Parallel: 3, ChunkRows: 700}

	writeCtx, stopWrites := context.WithCancel(ctx)
	var writes atomic.Int64
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
		rnd := rand.New(rand.NewSource(1))
		next := 10001
		for writeCtx.Err() == nil {
			var err error
			switch rnd.Intn(4) {
			case 0:
				_, err = c.Exec(ctx, "INSERT INTO t VALUES ($1, 'new', 1)", next)
				next++
			case 1:
				_, err = c.Exec(ctx, "UPDATE t SET v = v || '+', n = n + 1 WHERE id = $1", 1+rnd.Intn(next-1))
			case 2:
				_, err = c.Exec(ctx, "DELETE FROM t WHERE id = $1", 1+rnd.Intn(next-1))
			case 3:
				_, err = c.Exec(ctx, "UPDATE c SET payload = coalesce(payload, '') || E'\\t+' WHERE b = $1", 1+rnd.Intn(3000))
			}
			if err != nil && writeCtx.Err() == nil {
				t.Error(err)
				return
			}
			writes.Add(1)
		}
	}()

	src := openSource(t, ctx, opts, nil)
	cp := src.start
	if st := src.Status(); st.Phase != "snapshot" {
		t.Errorf("status phase %q during the load", st.Phase)
	}
	r := newReader(t, src, true)
	r.until(ctx, "the end of the load", func() bool { return r.lastPos != nil })
	if posLSN(t, r.lastPos) != cp || len(r.batches[len(r.batches)-1].Records) != 0 {
		t.Fatalf("first position %s (batch of %d records), want an empty batch at the consistent point %s",
			posLSN(t, r.lastPos), len(r.batches[len(r.batches)-1].Records), cp)
	}
	var reads int
	seenBarrier := map[string]bool{}
	for _, b := range r.batches[:len(r.batches)-1] {
		if b.Pos != nil {
			t.Fatal("a snapshot batch carries a position")
		}
		for _, rec := range b.Records {
			tbl := rec.Table.ID.String()
			switch rec.Op {
			case pipeline.OpTruncate:
				if rec.Version != snapshotVersion(0, cp, barrierIndex) || seenBarrier[tbl] {
					t.Fatalf("barrier of %s: %v (seen before: %v)", tbl, rec.Version, seenBarrier[tbl])
				}
				seenBarrier[tbl] = true
			case pipeline.OpRead:
				if !seenBarrier[tbl] {
					t.Fatalf("row of %s before its barrier", tbl)
				}
				if rec.Version != snapshotVersion(0, cp, snapshotRow) {
					t.Fatalf("snapshot row version %v", rec.Version)
				}
				reads++
			default:
				t.Fatalf("%v record during the load", rec.Op)
			}
		}
	}
	if reads < 10000 {
		t.Fatalf("%d snapshot rows", reads)
	}
	st := src.Status()
	if len(st.Tables) != 2 || !st.Tables[0].Done || !st.Tables[1].Done || st.Tables[1].RowsDone != 3000 {
		// Reported, and the comparison below still runs: it tells a
		// miscount from rows missing in the sink (seen once in CI, with
		// 2,992 rows of c counted, not reproduced in 65 runs since).
		t.Errorf("table progress %+v", st.Tables)
	}

	// Keep writing into the stream phase, then stop and catch up.
	for writes.Load() < 200 {
		r.step(ctx, "more writes")
	}
	stopWrites()
	wg.Wait()
	target := currentLSN(t, ctx, pg)
	r.reachLSN(ctx, target)
	equalRows(t, "public.t", r.sink.Table("public.t"), selectRows(t, ctx, pg, "SELECT id, v, n FROM t"))
	equalRows(t, "public.c", r.sink.Table("public.c"), selectRows(t, ctx, pg, "SELECT a, b, payload FROM c"))
	if got := confirmedLSN(t, ctx, pg, opts.Slot); got < cp {
		t.Fatalf("slot confirmed %s, below the consistent point %s", got, cp)
	}
	t.Logf("%d snapshot rows, %d concurrent writes, %d batches", reads, writes.Load(), len(r.batches))
}

// TestInitialLoadSingleReader: one reader plans and copies; a table without
// a key (REPLICA IDENTITY FULL) is copied whole.
func TestInitialLoadSingleReader(t *testing.T) {
	pg, ctx := testDB(t)
	exec(t, ctx, pg, "shop",
		"CREATE TABLE k (id bigint PRIMARY KEY, at timestamptz, amount numeric(12,2), tags text[], raw bytea)",
		`INSERT INTO k SELECT g, '2024-01-01 00:00:00+00'::timestamptz + g * interval '1 minute', g / 7.0,
			ARRAY['a' || g, NULL, 'x,y'], decode(lpad(to_hex(g), 8, '0'), 'hex') FROM generate_series(1, 2500) g`,
		"CREATE TABLE bag (x int, y text)",
		"INSERT INTO bag SELECT g % 3, 'dup' FROM generate_series(1, 50) g",
	)
	opts := testOptions(pg, "public.k", "public.bag")
	opts.FullIdentityTables = []string{"public.bag"}
	opts.Snapshot = SnapshotOptions{Mode: SnapshotInitial, Parallel: 1, ChunkRows: 300}
	src := openSource(t, ctx, opts, nil)
	r := newReader(t, src, true)
	r.until(ctx, "the end of the load", func() bool { return r.lastPos != nil })
	var kRows, bagRows int
	byID := map[int64][]any{}
	for _, rec := range r.sink.Records {
		if rec.Op != pipeline.OpRead {
			continue
		}
		switch rec.Table.ID.Table {
		case "k":
			kRows++
			byID[rec.After[0].(int64)] = rec.After
		case "bag":
			bagRows++
		}
	}
	if kRows != 2500 || bagRows != 50 {
		t.Fatalf("rows: k %d, bag %d", kRows, bagRows)
	}
	// Snapshot values equal what the stream produces for the same row.
	exec(t, ctx, pg, "shop", "INSERT INTO k SELECT id + 100000, at, amount, tags, raw FROM k WHERE id IN (7, 1234)")
	var streamed []pipeline.Record
	r.until(ctx, "the copied rows", func() bool {
		streamed = streamed[:0]
		for _, rec := range r.sink.Records {
			if rec.Op == pipeline.OpInsert {
				streamed = append(streamed, rec)
			}
		}
		return len(streamed) == 2
	})
	for _, rec := range streamed {
		id := rec.After[0].(int64) - 100000
		snap := fmt.Sprintf("%#v", byID[id][1:])
		stream := fmt.Sprintf("%#v", rec.After[1:])
		if snap != stream {
			t.Errorf("row %d: snapshot %s\nstream %s", id, snap, stream)
		}
	}
}

// TestInitialLoadStateCoversTheTableWhileWalking: the load queues each key
// range as soon as the walk of the key index finds its upper boundary, and
// the rest of the table is one range (the tail) whose lower end follows
// the walk. After every batch, the load state a checkpoint would record
// — the ranges a restart reads — plus the rows handed over so far are the
// whole table, each row exactly once, also while the walk is under way
// (asserted to have been seen); every range ends at a ChunkRows-th row in
// key order.
func TestInitialLoadStateCoversTheTableWhileWalking(t *testing.T) {
	pg, ctx := testDB(t)
	const rows, chunk = 24000, 20
	exec(t, ctx, pg, "shop",
		"CREATE TABLE w (id int PRIMARY KEY, v text)",
		fmt.Sprintf("INSERT INTO w SELECT g, 'row ' || g FROM generate_series(1, %d) g", rows))
	opts := testOptions(pg, "public.w")
	opts.Snapshot = SnapshotOptions{Mode: SnapshotInitial, Parallel: 2, ChunkRows: chunk}
	src := openSource(t, ctx, opts, nil)
	r := newReader(t, src, false)
	w := snaptest.NewLoadWatch(rows, chunk, func(c []byte) int {
		if c == nil {
			return -1
		}
		var key []string
		if err := json.Unmarshal(c, &key); err != nil || len(key) != 1 {
			t.Fatalf("cursor %s: %v", c, err)
		}
		id, err := strconv.Atoi(key[0])
		if err != nil {
			t.Fatal(err)
		}
		return id
	})
	for r.lastPos == nil {
		r.step(ctx, "the end of the load")
		st, ok := src.LoadState()
		w.After(t, r.batches[len(r.batches)-1].Records, st, ok)
	}
	w.Done(t)
}
