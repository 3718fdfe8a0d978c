package postgres

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/sluice-cdc/sluice/integration/harness"
	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/snapshot"
)

// A table rewrite changes every row with no change event: ALTER COLUMN
// … TYPE … USING, in a transaction streamed in progress, and ADD COLUMN
// with a volatile DEFAULT. The event trigger the source creates announces
// each in its transaction, and the engine reads the table again: the
// sink ends equal to the table both times. A rewrite of a table the
// pipeline does not capture reads nothing.
func TestTableRewriteIsReadAgain(t *testing.T) {
	pg, ctx := testDB(t)
	exec(t, ctx, pg, "shop",
		"CREATE TABLE rw (id int PRIMARY KEY, n int, body text)",
		"INSERT INTO rw SELECT g, g, repeat('b', 100) FROM generate_series(1, 3000) g",
		"CREATE TABLE other (id int PRIMARY KEY, n int)",
		// The first rewrite (about 400 kB) is streamed in progress.
		"ALTER DATABASE shop SET logical_decoding_work_mem = '64kB'")
	opts := testOptions(pg, "public.rw")
	opts.Streaming = true
	src, err := New(opts, testLogger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	id := pipeline.TableID{Schema: "public", Table: "rw"}
	eng := snapshot.New(src, src.ChunkReader(4), snapshot.Options{Tables: []pipeline.TableID{id}, Fresh: true,
		Parallel: 2, ChunkRows: 256, Log: testLogger(t)})
	if err := eng.Open(ctx, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eng.Close(context.Background()) })
	triggers := func() string {
		return fmt.Sprint(selectRows(t, ctx, pg, "SELECT evtname, evtenabled::text FROM pg_event_trigger ORDER BY 1"))
	}
	const want = "[[sluice_rename A] [sluice_table_drop A] [sluice_table_rewrite A]]"
	if got := triggers(); got != want {
		t.Fatalf("event triggers %v, want %s", got, want)
	}
	// One disabled, or made by an earlier version (fired in origin
	// sessions only, or with an older function), is enabled always, with
	// this version's function, at the next start.
	exec(t, ctx, pg, "shop", "ALTER EVENT TRIGGER sluice_table_drop DISABLE", "ALTER EVENT TRIGGER sluice_rename ENABLE",
		"CREATE OR REPLACE FUNCTION public.sluice_rename() RETURNS event_trigger LANGUAGE plpgsql AS $$ BEGIN END $$")
	if err := src.ensureEventTriggers(ctx); err != nil {
		t.Fatal(err)
	}
	if got := triggers(); got != want {
		t.Fatalf("event triggers %v after a start, want %s", got, want)
	}
	if got := selectRows(t, ctx, pg, "SELECT prosrc LIKE '%composite type%' FROM pg_proc WHERE proname = 'sluice_rename'"); len(got) != 1 || got[0] != "[true]" {
		t.Fatalf("sluice_rename's function was not brought up to date: %v", got)
	}
	sink := newMemSink()
	settle := func(what, query string) {
		t.Helper()
		pumpEngine(t, ctx, eng, sink, func(pipeline.Batch) bool { return len(eng.Snapshotting()) == 0 })
		catchUp(t, ctx, pg, eng, sink)
		equalRows(t, what, sink.Table("public.rw"), selectRows(t, ctx, pg, query))
	}
	settle("the first snapshot", "SELECT id, n, body FROM rw")
	for i, ddl := range []string{"ALTER TABLE rw ALTER COLUMN n TYPE bigint USING n * 100", "ALTER TABLE rw ADD COLUMN u uuid DEFAULT gen_random_uuid()",
		"ALTER TABLE rw RENAME COLUMN body TO text"} {
		exec(t, ctx, pg, "shop", ddl)
		catchUp(t, ctx, pg, eng, sink)
		if n := eng.Stats().Rewrites; n != int64(i+1) {
			t.Fatalf("after %s: %d rewrites seen, want %d", ddl, n, i+1)
		}
		settle("after "+ddl, []string{"SELECT id, n, body FROM rw", "SELECT id, n, body, u::text FROM rw", "SELECT id, n, text, u::text FROM rw"}[i])
	}
	// A column rename is announced alone: a COMMENT ON COLUMN is not.
	exec(t, ctx, pg, "shop", "COMMENT ON COLUMN rw.n IS 'n'")
	catchUp(t, ctx, pg, eng, sink)
	if n := eng.Stats().Rewrites; n != 3 {
		t.Fatalf("after COMMENT ON COLUMN: %d rewrites, want 3", n)
	}

	// Not captured: nothing is read.
	before := eng.Stats().Chunks
	exec(t, ctx, pg, "shop", "ALTER TABLE other ALTER COLUMN n TYPE bigint")
	catchUp(t, ctx, pg, eng, sink)
	if len(eng.Snapshotting()) > 0 || eng.Stats().Chunks != before || eng.Stats().Rewrites != 3 {
		t.Fatalf("a rewrite of a table not captured read chunks: %v, %+v", eng.Snapshotting(), eng.Stats())
	}

	// The first rewrite went through the streamed path. The server
	// publishes the slot's counters a moment after decoding.
	deadline := time.Now().Add(30 * time.Second)
	for {
		var streamed int64
		if err := src.pool.QueryRow(ctx, "SELECT stream_txns FROM pg_stat_replication_slots WHERE slot_name = $1", opts.Slot).Scan(&streamed); err != nil {
			t.Fatal(err)
		}
		if streamed >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no transaction was streamed in progress")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A captured table dropped and created again (a reload: DROP TABLE,
// CREATE TABLE, INSERT) leaves no ghost of the old table's rows in the
// sink: the drop trigger's message empties it there at the DROP, the new
// table (which the publication lacks) is put back and read, and a table
// dropped for good leaves the sink empty. A temporary table of the name
// changes nothing.
func TestTableDroppedAndCreatedAgain(t *testing.T) {
	pg, ctx := testDB(t)
	exec(t, ctx, pg, "shop", "CREATE TABLE dr (id int PRIMARY KEY, n int)", "INSERT INTO dr SELECT g, g FROM generate_series(1, 500) g")
	_, eng, sink := snapshotOne(t, ctx, pg, "dr")
	equalRows(t, "the first snapshot", sink.Table("public.dr"), selectRows(t, ctx, pg, "SELECT id, n FROM dr"))

	exec(t, ctx, pg, "shop", "BEGIN; CREATE TEMPORARY TABLE dr (id int PRIMARY KEY); DROP TABLE dr; COMMIT")
	catchUp(t, ctx, pg, eng, sink)
	if rows := sink.Table("public.dr"); len(rows) != 500 {
		t.Fatalf("after a temporary table of the name was dropped the sink holds %d rows, want 500", len(rows))
	}

	// A session acting as a replica (session_replication_role) fires
	// the trigger too.
	exec(t, ctx, pg, "shop", "BEGIN; SET LOCAL session_replication_role = replica; DROP TABLE dr; COMMIT", "CREATE TABLE dr (id int PRIMARY KEY, n int, tag text)",
		"INSERT INTO dr VALUES (1, -1, 'again'), (1000, 2, 'again')")
	readAgain(t, ctx, pg, eng, sink, 1) // at the heartbeat that finds dr out of the publication
	equalRows(t, "after DROP and CREATE", sink.Table("public.dr"), selectRows(t, ctx, pg, "SELECT id, n, tag FROM dr"))

	exec(t, ctx, pg, "shop", "DROP TABLE dr")
	catchUp(t, ctx, pg, eng, sink)
	if rows := sink.Table("public.dr"); len(rows) != 0 {
		t.Fatalf("after DROP the sink holds %d rows of the dropped table", len(rows))
	}

	// Created again after heartbeats have found it gone: it is put back
	// in the publication and read.
	heartbeatsPast(t, ctx, pg, eng, sink, 2)
	exec(t, ctx, pg, "shop", "CREATE TABLE dr (id int PRIMARY KEY, n int)", "INSERT INTO dr VALUES (7, 7), (8, 8), (9, 9)")
	readAgain(t, ctx, pg, eng, sink, 2)
	equalRows(t, "after a later CREATE", sink.Table("public.dr"), selectRows(t, ctx, pg, "SELECT id, n FROM dr"))

	// Renamed away, changed under the other name (left out), renamed
	// back: read again.
	exec(t, ctx, pg, "shop", "ALTER TABLE dr RENAME TO dr_away")
	heartbeatsPast(t, ctx, pg, eng, sink, 2)
	exec(t, ctx, pg, "shop", "UPDATE dr_away SET n = -n", "INSERT INTO dr_away VALUES (10, 10)", "ALTER TABLE dr_away RENAME TO dr")
	readAgain(t, ctx, pg, eng, sink, 3)
	equalRows(t, "after the table was renamed back", sink.Table("public.dr"), selectRows(t, ctx, pg, "SELECT id, n FROM dr"))
	if rows := sink.Table("public.dr_away"); len(rows) != 0 {
		t.Fatalf("the sink holds %d rows of dr_away, a table the pipeline does not capture", len(rows))
	}
}

// heartbeatsPast reads until n heartbeats written after now went through.
func heartbeatsPast(t *testing.T, ctx context.Context, pg *harness.Postgres, eng *snapshot.Engine, sink *memSink, n int) {
	t.Helper()
	from := currentLSN(t, ctx, pg)
	seen := 0
	pumpEngine(t, ctx, eng, sink, func(b pipeline.Batch) bool {
		for _, r := range b.Records {
			if r.Op == pipeline.OpHeartbeat && pglogrepl.LSN(r.Version[1]) > from {
				seen++
			}
		}
		return seen >= n
	})
}

// readAgain reads until the engine has read tables again rewrites times
// in all and is done, within a minute.
func readAgain(t *testing.T, ctx context.Context, pg *harness.Postgres, eng *snapshot.Engine, sink *memSink, rewrites int64) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for eng.Stats().Rewrites < rewrites {
		if time.Now().After(deadline) {
			t.Fatalf("%d tables read again after a minute, want %d", eng.Stats().Rewrites, rewrites)
		}
		catchUp(t, ctx, pg, eng, sink)
	}
	pumpEngine(t, ctx, eng, sink, func(pipeline.Batch) bool { return len(eng.Snapshotting()) == 0 })
	catchUp(t, ctx, pg, eng, sink)
}

// An enum label renamed (ALTER TYPE … RENAME VALUE) changes every row that
// holds it, in a column of the enum or of an array of it, with no change
// event: the tables with such a column are read again. A label added
// changes no row and reads nothing.
func TestEnumLabelRenamedIsReadAgain(t *testing.T) {
	pg, ctx := testDB(t)
	exec(t, ctx, pg, "shop", "CREATE TYPE mood AS ENUM ('sad', 'ok')",
		"CREATE TABLE em (id int PRIMARY KEY, md mood, mds mood[])",
		"INSERT INTO em SELECT g, (ARRAY['sad', 'ok'])[1 + g % 2]::mood, ARRAY['ok', 'sad']::mood[] FROM generate_series(1, 200) g")
	_, eng, sink := snapshotOne(t, ctx, pg, "em")
	exec(t, ctx, pg, "shop", "ALTER TYPE mood RENAME VALUE 'sad' TO 'blue'")
	catchUp(t, ctx, pg, eng, sink)
	if n := eng.Stats().Rewrites; n != 1 {
		t.Fatalf("after RENAME VALUE: %d rewrites, want 1", n)
	}
	pumpEngine(t, ctx, eng, sink, func(pipeline.Batch) bool { return len(eng.Snapshotting()) == 0 })
	catchUp(t, ctx, pg, eng, sink)
	equalRows(t, "after RENAME VALUE", sink.Table("public.em"), selectRows(t, ctx, pg, "SELECT id, md::text, mds::text[] FROM em"))
	exec(t, ctx, pg, "shop", "ALTER TYPE mood ADD VALUE 'happy'")
	catchUp(t, ctx, pg, eng, sink)
	if n := eng.Stats().Rewrites; n != 1 || len(eng.Snapshotting()) > 0 {
		t.Fatalf("after ADD VALUE: %d rewrites, snapshotting %v", n, eng.Snapshotting())
	}
}

// openPipeline starts a source capturing the tables of schema public and
// an incremental engine over it, opened at from (nil: a fresh pipeline,
// which snapshots them). The caller closes the engine.
func openPipeline(t *testing.T, ctx context.Context, pg *harness.Postgres, from pipeline.Position, tables ...string) (*Source, *snapshot.Engine) {
	t.Helper()
	var names []string
	var ids []pipeline.TableID
	for _, table := range tables {
		names = append(names, "public."+table)
		ids = append(ids, pipeline.TableID{Schema: "public", Table: table})
	}
	src, err := New(testOptions(pg, names...), testLogger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	eng := snapshot.New(src, src.ChunkReader(4), snapshot.Options{Tables: ids, Fresh: true, Parallel: 2, ChunkRows: 64, Log: testLogger(t)})
	if err := eng.Open(ctx, from); err != nil {
		t.Fatal(err)
	}
	return src, eng
}

// snapshotOne starts a source capturing public.table and an engine over
// it, and reads until the table's first snapshot is in the sink and the
// stream caught up.
func snapshotOne(t *testing.T, ctx context.Context, pg *harness.Postgres, table string) (*Source, *snapshot.Engine, *memSink) {
	t.Helper()
	src, eng := openPipeline(t, ctx, pg, nil, table)
	t.Cleanup(func() { _ = eng.Close(context.Background()) })
	sink := newMemSink()
	pumpEngine(t, ctx, eng, sink, func(pipeline.Batch) bool { return len(eng.Snapshotting()) == 0 })
	catchUp(t, ctx, pg, eng, sink)
	return src, eng, sink
}

// A composite type's attribute added or dropped (ALTER TYPE … ADD/DROP
// ATTRIBUTE … CASCADE) changes the value of every row with a column of
// the type, with no change event: those tables are read again.
func TestCompositeAttributeChangeIsReadAgain(t *testing.T) {
	pg, ctx := testDB(t)
	exec(t, ctx, pg, "shop", "CREATE TYPE pair AS (a int, b text)",
		"CREATE TABLE cp (id int PRIMARY KEY, p pair, ps pair[])",
		"INSERT INTO cp SELECT g, ROW(g, 'b' || g)::pair, ARRAY[ROW(g, 'x')::pair] FROM generate_series(1, 100) g")
	_, eng, sink := snapshotOne(t, ctx, pg, "cp")
	for i, ddl := range []string{"ALTER TYPE pair ADD ATTRIBUTE c int CASCADE", "ALTER TYPE pair DROP ATTRIBUTE a CASCADE"} {
		exec(t, ctx, pg, "shop", ddl)
		readAgain(t, ctx, pg, eng, sink, int64(i+1))
		equalRows(t, "after "+ddl, sink.Table("public.cp"), selectRows(t, ctx, pg, "SELECT id, p::text, ps::text[] FROM cp"))
	}
}
