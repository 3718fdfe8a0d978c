package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-cdc/sluice/integration/harness"
	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/snapshot"
	"github.com/sluice-cdc/sluice/snapshot/snaptest"
)

// incremental opens a source (no initial load) wrapped in the snapshot
// engine; fresh snapshots every table at once.
func incremental(t *testing.T, ctx context.Context, pg *harness.Postgres, fresh bool, reg prometheus.Registerer, tables ...string) *snapshot.Engine {
	t.Helper()
	return incrementalRO(t, ctx, pg, fresh, false, nil, reg, tables...)
}

// incrementalRO is incremental with read-only watermarks when readOnly
// (WAL positions the stream meets, marks.go), and the source's reader
// wrapped by wrap when it is set.
func incrementalRO(t *testing.T, ctx context.Context, pg *harness.Postgres, fresh, readOnly bool, wrap func(snapshot.Reader) snapshot.Reader,
	reg prometheus.Registerer, tables ...string) *snapshot.Engine {
	t.Helper()
	opts := testOptions(pg, tables...)
	opts.Snapshot.ReadOnly = readOnly
	src, err := New(opts, testLogger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]pipeline.TableID, len(tables))
	for i, tb := range tables {
		s, n, _ := strings.Cut(tb, ".")
		ids[i] = pipeline.TableID{Schema: s, Table: n}
	}
	var rd snapshot.Reader = src.ChunkReader(8)
	if wrap != nil {
		rd = wrap(rd)
	}
	eng := snapshot.New(src, rd, snapshot.Options{Tables: ids, Fresh: fresh, Parallel: 4,
		ChunkRows: 64, MaxChunkRows: 512, ChunkTime: 20 * time.Millisecond, Log: testLogger(t), Registerer: reg})
	if err := eng.Open(ctx, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eng.Close(context.Background()) })
	return eng
}

// pumpEngine reads batches into sink, acknowledging positions, until done
// holds after a batch.
func pumpEngine(t *testing.T, ctx context.Context, eng *snapshot.Engine, sink *memSink, done func(b pipeline.Batch) bool) pipeline.Position {
	t.Helper()
	var last pipeline.Position
	for {
		b, err := eng.Read(ctx)
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		sink.Apply(b.Records)
		if b.Pos != nil {
			last = b.Pos
			if err := eng.Ack(ctx, b.Pos); err != nil {
				t.Fatal(err)
			}
		}
		if done(b) {
			return last
		}
	}
}

// catchUp reads until the stream passed everything committed so far.
func catchUp(t *testing.T, ctx context.Context, pg *harness.Postgres, eng *snapshot.Engine, sink *memSink) {
	t.Helper()
	lsn := currentLSN(t, ctx, pg)
	pumpEngine(t, ctx, eng, sink, func(b pipeline.Batch) bool {
		return b.Pos != nil && posLSN(t, snapshot.StreamPosition(b.Pos)) >= lsn
	})
}

// createItemsAndPairs creates the tables writeRandomly writes: items, an
// int key, 6,000 rows; pairs, a composite key whose first column has two
// values, 3,000 rows.
func createItemsAndPairs(t *testing.T, ctx context.Context, pg *harness.Postgres) {
	t.Helper()
	exec(t, ctx, pg, "shop",
		"CREATE TABLE items (id bigint PRIMARY KEY, v text)",
		"INSERT INTO items SELECT g, 'v' || g FROM generate_series(0, 5999) g",
		"CREATE TABLE pairs (a int, b text, n bigint, PRIMARY KEY (a, b))",
		"INSERT INTO pairs SELECT 1 + g % 2, 'k' || lpad(g::text, 4, '0'), g FROM generate_series(0, 2999) g",
		"ANALYZE items, pairs")
}

// writeRandomly runs random transactions on items and pairs until stop:
// inserts, updates, deletes, primary-key updates, 1 to 3 statements each.
func writeRandomly(ctx context.Context, dsn string, seed uint64, stop *atomic.Bool, n *atomic.Int64) error {
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	rng := rand.New(rand.NewPCG(seed, 1))
	stmts := []func() string{
		func() string {
			return fmt.Sprintf("INSERT INTO items VALUES (%d, 'i%d') ON CONFLICT (id) DO UPDATE SET v = excluded.v", rng.IntN(8000), rng.IntN(1e6))
		},
		func() string {
			return fmt.Sprintf("UPDATE items SET v = 'u%d' WHERE id = %d", rng.IntN(1e6), rng.IntN(8000))
		},
		func() string { return fmt.Sprintf("DELETE FROM items WHERE id = %d", rng.IntN(8000)) },
		func() string {
			return fmt.Sprintf("UPDATE items SET id = %d WHERE id = %d", 8000+rng.IntN(4000), rng.IntN(8000))
		},
		func() string {
			return fmt.Sprintf("INSERT INTO pairs VALUES (%d, 'k%04d', %d) ON CONFLICT (a, b) DO UPDATE SET n = excluded.n",
				1+rng.IntN(2), rng.IntN(3000), rng.IntN(1e6))
		},
		func() string {
			return fmt.Sprintf("DELETE FROM pairs WHERE a = %d AND b = 'k%04d'", 1+rng.IntN(2), rng.IntN(3000))
		},
		func() string {
			return fmt.Sprintf("UPDATE pairs SET a = 3 - a, b = 'm%04d' WHERE a = %d AND b = 'k%04d'", rng.IntN(3000), 1+rng.IntN(2), rng.IntN(3000))
		},
	}
	for !stop.Load() {
		tx, err := c.Begin(ctx)
		if err != nil {
			return err
		}
		ok := true
		for range 1 + rng.IntN(3) {
			if _, err := tx.Exec(ctx, stmts[rng.IntN(len(stmts))]()); err != nil {
				ok = false // a key taken by another row: try another
				break
			}
		}
		if ok {
			if err := tx.Commit(ctx); err != nil {
				return err
			}
			n.Add(1)
		} else if err := tx.Rollback(ctx); err != nil {
			return err
		}
	}
	return nil
}

// Against a real server, under two writers running random transactions
// (inserts, updates, deletes, key updates), the engine snapshots an int
// key table and a composite key whose first column has two values, with
// 4 windows over 4 ranges each and chunks of 64 to 512 rows; the
// version-guarded sink then equals both tables. Odd trials write nothing
// (snapshot.read_only: watermarks are WAL positions the stream meets);
// even ones cut their chunks at 2,000 bytes (about 30 of these rows),
// before the row limit.
func TestIncrementalSnapshotUnderConcurrentWrites(t *testing.T) {
	for trial := range harness.Trials(2) {
		readOnly := trial%2 == 1
		t.Run(fmt.Sprintf("%d/read_only=%v", trial, readOnly), func(t *testing.T) {
			pg, ctx := testDB(t)
			createItemsAndPairs(t, ctx, pg)
			var stop atomic.Bool
			var txns atomic.Int64
			var wg sync.WaitGroup
			errs := make(chan error, 2)
			for w := range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs <- writeRandomly(ctx, pg.DSN("shop"), uint64(trial*10+w), &stop, &txns)
				}()
			}
			reg := prometheus.NewRegistry()
			var wrap func(snapshot.Reader) snapshot.Reader
			if !readOnly {
				wrap = func(rd snapshot.Reader) snapshot.Reader { return snaptest.ByteBound{Reader: rd, N: 2000} }
			}
			eng := incrementalRO(t, ctx, pg, true, readOnly, wrap, reg, "public.items", "public.pairs")
			sink := newMemSink()
			pumpEngine(t, ctx, eng, sink, func(pipeline.Batch) bool { return len(eng.Snapshotting()) == 0 })
			stop.Store(true)
			wg.Wait()
			for range 2 {
				if err := <-errs; err != nil {
					t.Fatal(err)
				}
			}
			catchUp(t, ctx, pg, eng, sink)
			equalRows(t, "items", sink.Table("public.items"), selectRows(t, ctx, pg, "SELECT id, v FROM items"))
			equalRows(t, "pairs", sink.Table("public.pairs"), selectRows(t, ctx, pg, "SELECT a::bigint, b, n FROM pairs"))
			st := eng.Stats()
			t.Logf("%d writer transactions during the snapshot; %d chunks (%d cut at their bytes), %d read again",
				txns.Load(), st.Chunks, st.Cut, st.Redone)
			if txns.Load() < 50 || st.Chunks < 20 {
				t.Fatalf("too little overlap to mean anything: %d transactions, %d chunks", txns.Load(), st.Chunks)
			}
			if !readOnly && st.Cut < 20 {
				t.Fatalf("%d chunks cut at 2,000 bytes, want at least 20", st.Cut)
			}
		})
	}
}

// Commit order in the log and visibility order can differ: a transaction
// whose commit record is written waits for a synchronous standby that
// never answers, so the stream decodes it while other sessions' snapshots
// still see it in progress. Its commit lands before the chunk's low
// watermark, the chunk's read cannot see it, and no change of it falls in
// the window: emitted, the chunk's older row would sort above the
// transaction's change for good. The engine must read the chunk again
// until the transaction is visible. With read-only watermarks (WAL
// positions, marks.go) the same guard applies.
func TestIncrementalSnapshotRedoesAChunkHiddenByVisibilitySkew(t *testing.T) {
	for _, readOnly := range []bool{false, true} {
		t.Run(fmt.Sprint("read_only=", readOnly), func(t *testing.T) { visibilitySkew(t, readOnly) })
	}
}

func visibilitySkew(t *testing.T, readOnly bool) {
	pg, ctx := testDB(t, skewSettings)
	exec(t, ctx, pg, "shop",
		"CREATE TABLE items (id bigint PRIMARY KEY, v text)",
		"INSERT INTO items SELECT g, 'before' FROM generate_series(1, 100) g")
	eng := incrementalRO(t, ctx, pg, false, readOnly, nil, nil, "public.items")
	sink := newMemSink()

	show := invisibleCommit(t, ctx, pg, "UPDATE items SET v = 'skewed' WHERE id = 50")
	// The stream decodes the commit now; the chunk is requested after it.
	catchUp(t, ctx, pg, eng, sink)
	if _, err := eng.Request(pipeline.TableID{Schema: "public", Table: "items"}, ""); err != nil {
		t.Fatal(err)
	}
	pumpEngine(t, ctx, eng, sink, func(pipeline.Batch) bool { return eng.Stats().Redone >= 2 || len(eng.Snapshotting()) == 0 })
	// Visibility catches up.
	if err := show(); err != nil {
		t.Fatal(err)
	}
	pumpEngine(t, ctx, eng, sink, func(pipeline.Batch) bool { return len(eng.Snapshotting()) == 0 })
	catchUp(t, ctx, pg, eng, sink)
	equalRows(t, "items", sink.Table("public.items"), selectRows(t, ctx, pg, "SELECT id, v FROM items"))
	if n := eng.Stats().Redone; n < 2 {
		t.Fatalf("the chunk was read again %d times while the update was invisible, want at least 2", n)
	}
}

// A table keyed by its replica identity index (unique, NOT NULL, no
// primary key) is read in that index's order; a table with neither
// (REPLICA IDENTITY FULL) is refused with the statements that fix it.
func TestIncrementalSnapshotKeysAndRefusal(t *testing.T) {
	pg, ctx := testDB(t)
	exec(t, ctx, pg, "shop",
		"CREATE TABLE ri (code text NOT NULL, n int NOT NULL, v text)",
		"CREATE UNIQUE INDEX ri_key ON ri (code, n)",
		"ALTER TABLE ri REPLICA IDENTITY USING INDEX ri_key",
		"INSERT INTO ri SELECT 'c' || (g % 7), g, 'v' || g FROM generate_series(1, 1000) g",
		// Keys across a DST change, read by sessions whose database
		// default zone is not UTC (sluice pins UTC on its own).
		"ALTER DATABASE shop SET TimeZone = 'America/St_Johns'",
		"CREATE TABLE tz (ts timestamptz, u uuid, PRIMARY KEY (ts, u))",
		"INSERT INTO tz SELECT timestamptz '2026-11-01 00:00:00-02:30' + g * interval '37 seconds', md5(g::text)::uuid FROM generate_series(1, 600) g",
		"INSERT INTO tz SELECT ts, md5(u::text)::uuid FROM tz WHERE extract(second FROM ts)::int % 3 = 0",
		"CREATE TABLE bag (v text)",
		"ALTER TABLE bag REPLICA IDENTITY FULL",
		"INSERT INTO bag VALUES ('x'), ('x')")
	opts := testOptions(pg, "public.ri", "public.tz", "public.bag")
	opts.FullIdentityTables = []string{"public.bag"}
	src, err := New(opts, testLogger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	eng := snapshot.New(src, src.ChunkReader(4), snapshot.Options{Parallel: 2, ChunkRows: 64, MaxChunkRows: 128,
		Tables: []pipeline.TableID{{Schema: "public", Table: "ri"}, {Schema: "public", Table: "tz"}, {Schema: "public", Table: "bag"}}, Log: testLogger(t)})
	if err := eng.Open(ctx, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eng.Close(context.Background()) })
	sink := newMemSink()
	for _, tb := range []string{"ri", "tz", "bag"} {
		if _, err := eng.Request(pipeline.TableID{Schema: "public", Table: tb}, ""); err != nil {
			t.Fatal(err)
		}
	}
	for len(eng.Snapshotting()) > 0 {
		catchUp(t, ctx, pg, eng, sink)
		exec(t, ctx, pg, "shop", "SELECT pg_logical_emit_message(true, 'test', 'tick')")
	}
	catchUp(t, ctx, pg, eng, sink)
	equalRows(t, "ri", sink.Table("public.ri"), selectRows(t, ctx, pg, "SELECT code, n::bigint, v FROM ri"))
	var tzRows int
	if err := pgxQueryRow(ctx, pg, "SELECT count(*) FROM tz", &tzRows); err != nil {
		t.Fatal(err)
	}
	if got := len(sink.Table("public.tz")); got != tzRows {
		t.Fatalf("tz: the sink holds %d rows, the table %d", got, tzRows)
	}
	if st := eng.Status(); !strings.Contains(st.SnapshotError, "public.bag") || !strings.Contains(st.SnapshotError, "REPLICA IDENTITY USING INDEX") {
		t.Fatalf("status error %q, want bag's refusal with the fix", st.SnapshotError)
	}
}

func pgxQueryRow(ctx context.Context, pg *harness.Postgres, sql string, into ...any) error {
	c, err := pgx.Connect(ctx, pg.DSN("shop"))
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	return c.QueryRow(ctx, sql).Scan(into...)
}

// afterChunk is a snapshot.Reader that runs hook once, after the first
// chunk read and before its high watermark.
type afterChunk struct {
	snapshot.Reader
	once sync.Once
	hook func()
}

func (a *afterChunk) Chunk(ctx context.Context, t snapshot.Target, after, upTo snapshot.Cursor, limit, maxBytes int) (snapshot.Chunk, error) {
	c, err := a.Reader.Chunk(ctx, t, after, upTo, limit, maxBytes)
	a.once.Do(a.hook)
	return c, err
}

// Updates inside a chunk's window that leave a TOASTed value unchanged
// (REPLICA IDENTITY DEFAULT) send it as unchanged; the rows are dropped
// from the chunk, and a sink new to the table has no value to keep. The
// engine reads those keys again, so every row lands with its value.
func TestIncrementalSnapshotReadsUnchangedToastAgain(t *testing.T) {
	pg, ctx := testDB(t)
	exec(t, ctx, pg, "shop",
		"CREATE TABLE doc (id bigint PRIMARY KEY, n int, body text)",
		"INSERT INTO doc SELECT g, 0, (SELECT string_agg(md5(random()::text || x || g), '') FROM generate_series(1, 200) x) FROM generate_series(1, 300) g")
	src, err := New(testOptions(pg, "public.doc"), testLogger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	rd := &afterChunk{Reader: src.ChunkReader(4), hook: func() {
		if err := pg.Exec(ctx, "shop", "UPDATE doc SET n = n + 1 WHERE id <= 40"); err != nil {
			t.Error(err) // a worker goroutine: no FailNow here
		}
	}}
	eng := snapshot.New(src, rd, snapshot.Options{Tables: []pipeline.TableID{{Schema: "public", Table: "doc"}}, Fresh: true,
		Parallel: 1, ChunkRows: 64, MaxChunkRows: 64, Log: testLogger(t)})
	if err := eng.Open(ctx, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eng.Close(context.Background()) })
	sink := newMemSink()
	pumpEngine(t, ctx, eng, sink, func(pipeline.Batch) bool { return len(eng.Snapshotting()) == 0 })
	catchUp(t, ctx, pg, eng, sink)
	equalRows(t, "doc", sink.Table("public.doc"), selectRows(t, ctx, pg, "SELECT id, n::bigint, body FROM doc"))
	if n := eng.Stats().Refetched; n < 40 {
		t.Fatalf("%d keys read again, want the 40 updated in the window", n)
	}
}

// A crash in the middle of the initial load: the engine positions the
// load's batches at the consistent point with the ranges not handed over,
// so a restart from the last batch the sinks hold streams from there and
// reads only the rest, in chunks, under a writer running random
// transactions throughout. The sink then equals both tables, and the
// second run read fewer rows than the tables hold.
func TestInitialLoadResumesIncrementallyAfterACrash(t *testing.T) {
	pg, ctx := testDB(t)
	createItemsAndPairs(t, ctx, pg)
	var stop atomic.Bool
	var txns atomic.Int64
	done := make(chan error, 1)
	go func() { done <- writeRandomly(ctx, pg.DSN("shop"), 42, &stop, &txns) }()
	sink := newMemSink()
	first := openLoad(t, ctx, pg, nil)
	var loaded int
	checkpoint := pumpEngine(t, ctx, first, sink, func(b pipeline.Batch) bool {
		loaded += len(b.Records)
		return loaded >= 3000 && b.Pos != nil
	})
	if bf := first.Backfilling(); len(bf) == 0 {
		t.Fatal("the initial load in progress lists no table as backfilling")
	}
	_ = first.Close(context.Background()) // the crash: nothing after the checkpoint is kept
	var pos struct {
		Snapshot struct{ Tables []json.RawMessage } `json:"snapshot"`
	}
	if err := json.Unmarshal(checkpoint, &pos); err != nil {
		t.Fatal(err)
	}
	pending := len(pos.Snapshot.Tables)
	if pending == 0 {
		t.Fatalf("the load's checkpoint %s shows no table left to read", checkpoint)
	}

	reads := resumeLoad(t, ctx, pg, checkpoint, sink, func() {
		stop.Store(true)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("first run handed over %d records; the restart read %d rows of %d tables in chunks; %d writer transactions",
		loaded, reads, pending, txns.Load())
	if reads == 0 || reads >= 9000 {
		t.Fatalf("the restart read %d rows: want the rest of the load, not none and not all 9000", reads)
	}
}

// openLoad opens an initial load of items and pairs (2 readers, ranges of
// 500 rows) through the snapshot engine, from a checkpoint when from is
// set.
func openLoad(t *testing.T, ctx context.Context, pg *harness.Postgres, from pipeline.Position) *snapshot.Engine {
	t.Helper()
	opts := testOptions(pg, "public.items", "public.pairs")
	opts.Snapshot = SnapshotOptions{Mode: SnapshotInitial, Parallel: 2, ChunkRows: 500}
	src, err := New(opts, testLogger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	ids := []pipeline.TableID{{Schema: "public", Table: "items"}, {Schema: "public", Table: "pairs"}}
	eng := snapshot.New(src, src.ChunkReader(4), snapshot.Options{Tables: ids, Parallel: 2, ChunkRows: 64,
		MaxChunkRows: 256, ChunkTime: 20 * time.Millisecond, Log: testLogger(t)})
	if err := eng.Open(ctx, from); err != nil {
		t.Fatal(err)
	}
	return eng
}

// resumeLoad resumes the load of items and pairs from checkpoint into
// sink until nothing is left to snapshot, calls stopWriters, catches up
// with the stream and checks that sink equals both tables. It returns how
// many rows the resumed load read.
func resumeLoad(t *testing.T, ctx context.Context, pg *harness.Postgres, checkpoint pipeline.Position, sink *memSink, stopWriters func()) int {
	t.Helper()
	eng := openLoad(t, ctx, pg, checkpoint)
	t.Cleanup(func() { _ = eng.Close(context.Background()) })
	reads := 0
	pumpEngine(t, ctx, eng, sink, func(b pipeline.Batch) bool {
		for _, r := range b.Records {
			if r.Op == pipeline.OpRead {
				reads++
			}
		}
		return len(eng.Snapshotting()) == 0
	})
	if bf := eng.Backfilling(); len(bf) != 0 {
		t.Fatalf("backfilling %v after the snapshot", bf)
	}
	stopWriters()
	catchUp(t, ctx, pg, eng, sink)
	equalRows(t, "items", sink.Table("public.items"), selectRows(t, ctx, pg, "SELECT id, v FROM items"))
	equalRows(t, "pairs", sink.Table("public.pairs"), selectRows(t, ctx, pg, "SELECT a::bigint, b, n FROM pairs"))
	return reads
}
