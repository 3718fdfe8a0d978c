package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/snapshot"
)

// A captured table dropped from the publication while the stream runs,
// and then the publication set to publish inserts only, would send no
// update of what was left out from then on, with no error anywhere. The
// heartbeats show each moment: the source puts the publication back and
// the engine reads the tables left out again, so the sink ends equal to
// the tables, the rows changed while they were left out included. A table
// dropped is left out without a stop, and a copy swapped in under a
// captured name (an online schema change) is read again.
func TestPublicationAlteredIsPutBack(t *testing.T) {
	pg, ctx := testDB(t)
	exec(t, ctx, pg, "shop",
		"CREATE TABLE pa (id int PRIMARY KEY, n int)", "INSERT INTO pa SELECT g, g FROM generate_series(1, 500) g",
		"CREATE TABLE pb (id int PRIMARY KEY, n int)", "INSERT INTO pb SELECT g, g FROM generate_series(1, 500) g")
	opts := testOptions(pg, "public.pa", "public.pb")
	src, err := New(opts, testLogger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	ids := []pipeline.TableID{{Schema: "public", Table: "pa"}, {Schema: "public", Table: "pb"}}
	eng := snapshot.New(src, src.ChunkReader(4), snapshot.Options{Tables: ids, Fresh: true, Parallel: 2, ChunkRows: 128, Log: testLogger(t)})
	if err := eng.Open(ctx, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eng.Close(context.Background()) })
	sink := newMemSink()
	// settle reads until the engine has read rewrites tables again, and
	// compares both tables.
	settle := func(what string, rewrites int64) {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for eng.Stats().Rewrites < rewrites {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d tables read again after a minute, want %d", what, eng.Stats().Rewrites, rewrites)
			}
			catchUp(t, ctx, pg, eng, sink)
		}
		pumpEngine(t, ctx, eng, sink, func(pipeline.Batch) bool { return len(eng.Snapshotting()) == 0 })
		catchUp(t, ctx, pg, eng, sink)
		equalRows(t, what+": pa", sink.Table("public.pa"), selectRows(t, ctx, pg, "SELECT id, n FROM pa"))
		equalRows(t, what+": pb", sink.Table("public.pb"), selectRows(t, ctx, pg, "SELECT id, n FROM pb"))
		if got := eng.Stats().Rewrites; got != rewrites {
			t.Fatalf("%s: %d tables read again, want %d", what, got, rewrites)
		}
	}
	settle("the first snapshot", 0)

	exec(t, ctx, pg, "shop", "ALTER PUBLICATION sluice_test DROP TABLE pb",
		"UPDATE pb SET n = n + 1000 WHERE id <= 100", "INSERT INTO pb VALUES (1001, 1001)", "UPDATE pa SET n = -n WHERE id <= 10")
	settle("after pb left the publication", 1)
	if got := selectRows(t, ctx, pg, "SELECT count(*) FROM pg_publication_tables WHERE pubname = 'sluice_test'"); got[0] != "[2]" {
		t.Fatalf("the publication lists %s tables, want 2", got[0])
	}

	exec(t, ctx, pg, "shop", "ALTER PUBLICATION sluice_test SET (publish = 'insert')",
		"UPDATE pa SET n = 7 WHERE id > 400", "UPDATE pb SET n = 8 WHERE id > 400", "INSERT INTO pa VALUES (1001, 1001)")
	settle("after the publication stopped publishing updates", 3)
	if got := selectRows(t, ctx, pg, "SELECT pubupdate AND pubdelete AND pubtruncate FROM pg_publication WHERE pubname = 'sluice_test'"); got[0] != "[true]" {
		t.Fatalf("the publication publishes every operation: %s", got[0])
	}

	// A captured table dropped leaves the publication too: nothing to put
	// back or read, and the other table goes on.
	exec(t, ctx, pg, "shop", "DROP TABLE pb", "UPDATE pa SET n = 9 WHERE id <= 3")
	dropped := currentLSN(t, ctx, pg)
	heartbeats := 0 // past the drop, each checking the publication
	pumpEngine(t, ctx, eng, sink, func(b pipeline.Batch) bool {
		for _, r := range b.Records {
			if r.Op == pipeline.OpHeartbeat && pglogrepl.LSN(r.Version[1]) > dropped {
				heartbeats++
			}
		}
		return heartbeats >= 3
	})
	catchUp(t, ctx, pg, eng, sink)
	equalRows(t, "after pb was dropped: pa", sink.Table("public.pa"), selectRows(t, ctx, pg, "SELECT id, n FROM pa"))
	if got := eng.Stats().Rewrites; got != 3 {
		t.Fatalf("after pb was dropped: %d tables read again, want 3", got)
	}

	// An online schema change's swap (pg-osc): a copy with a new column
	// takes pa's name, and the new relation is not in the publication.
	exec(t, ctx, pg, "shop", "CREATE TABLE pa_new (id int PRIMARY KEY, n int, tag text)",
		"INSERT INTO pa_new SELECT id, n, 'tag' || (id % 7) FROM pa",
		"BEGIN; ALTER TABLE pa RENAME TO pa_old; ALTER TABLE pa_new RENAME TO pa; COMMIT",
		"INSERT INTO pa VALUES (2000, 1, 'after')")
	deadline := time.Now().Add(time.Minute)
	for eng.Stats().Rewrites < 4 {
		if time.Now().After(deadline) {
			t.Fatalf("after the swap: %d tables read again after a minute, want 4", eng.Stats().Rewrites)
		}
		catchUp(t, ctx, pg, eng, sink)
	}
	pumpEngine(t, ctx, eng, sink, func(pipeline.Batch) bool { return len(eng.Snapshotting()) == 0 })
	catchUp(t, ctx, pg, eng, sink)
	equalRows(t, "after the swap: pa", sink.Table("public.pa"), selectRows(t, ctx, pg, "SELECT id, n, tag FROM pa"))

	// The old table, under its new name, is still in the publication (it
	// holds the relation): its changes are not captured.
	exec(t, ctx, pg, "shop", "UPDATE pa_old SET n = -n WHERE id <= 5", "INSERT INTO pa VALUES (2001, 1, 'last')")
	catchUp(t, ctx, pg, eng, sink)
	if rows := sink.Table("public.pa_old"); len(rows) != 0 {
		t.Fatalf("the sink holds %d rows of pa_old, a table the pipeline does not capture", len(rows))
	}
	equalRows(t, "after pa_old changed: pa", sink.Table("public.pa"), selectRows(t, ctx, pg, "SELECT id, n, tag FROM pa"))
}

// A publication FOR ALL TABLES sends every table's changes: those of
// tables the pipeline does not capture are left out. A captured table
// dropped is not read again at every heartbeat while it is gone, and one
// created again (which such a publication takes in at once) is read.
func TestPublicationForAllTables(t *testing.T) {
	pg, ctx := testDB(t)
	exec(t, ctx, pg, "shop", "CREATE PUBLICATION sluice_test FOR ALL TABLES",
		"CREATE TABLE fa (id int PRIMARY KEY, n int)", "INSERT INTO fa SELECT g, g FROM generate_series(1, 100) g",
		"CREATE TABLE other (id int PRIMARY KEY, n int)")
	src, eng, sink := snapshotOne(t, ctx, pg, "fa")
	exec(t, ctx, pg, "shop", "INSERT INTO other VALUES (1, 1), (2, 2)", "UPDATE fa SET n = -n WHERE id <= 10")
	catchUp(t, ctx, pg, eng, sink)
	equalRows(t, "fa", sink.Table("public.fa"), selectRows(t, ctx, pg, "SELECT id, n FROM fa"))
	if rows, left := sink.Table("public.other"), testutil.ToFloat64(src.m.leftOut); len(rows) != 0 || left != 2 {
		t.Fatalf("the sink holds %d rows of a table the pipeline does not capture; %v changes counted left out, want 2", len(rows), left)
	}

	exec(t, ctx, pg, "shop", "DROP TABLE fa")
	heartbeatsPast(t, ctx, pg, eng, sink, 3)
	if n := eng.Stats().Rewrites; n != 0 || len(sink.Table("public.fa")) != 0 {
		t.Fatalf("after DROP: %d tables read again (want 0), %d rows in the sink", n, len(sink.Table("public.fa")))
	}
	if g := testutil.ToFloat64(src.m.tablesGone); g != 1 {
		t.Fatalf("after DROP: captured_tables_gone %v, want 1", g)
	}
	exec(t, ctx, pg, "shop", "CREATE TABLE fa (id int PRIMARY KEY, n int)", "INSERT INTO fa VALUES (5, 5)")
	readAgain(t, ctx, pg, eng, sink, 1)
	equalRows(t, "fa created again", sink.Table("public.fa"), selectRows(t, ctx, pg, "SELECT id, n FROM fa"))
	if g := testutil.ToFloat64(src.m.tablesGone); g != 0 {
		t.Fatalf("after CREATE: captured_tables_gone %v, want 0", g)
	}
}

// A captured table left out of the publication while the pipeline was
// stopped: the slot holds none of its changes of that time. The restart
// puts it back, and the engine reads it again and sweeps the rows deleted
// meanwhile (Invariant 14), so the sink ends equal to the table, also when
// the first start after it crashes before its first checkpoint.
func TestPublicationAlteredWhileStopped(t *testing.T) {
	pg, ctx := testDB(t)
	exec(t, ctx, pg, "shop", "CREATE TABLE ws (id int PRIMARY KEY, n int)", "INSERT INTO ws SELECT g, g FROM generate_series(1, 100) g",
		"CREATE TABLE ws_added (id int PRIMARY KEY, n int)", "INSERT INTO ws_added SELECT g, g FROM generate_series(1, 100) g")
	sink := newMemSink()
	_, first := openPipeline(t, ctx, pg, nil, "ws")
	pumpEngine(t, ctx, first, sink, func(pipeline.Batch) bool { return len(first.Snapshotting()) == 0 })
	catchUp(t, ctx, pg, first, sink)
	from := currentLSN(t, ctx, pg)
	pos := pumpEngine(t, ctx, first, sink, func(b pipeline.Batch) bool {
		return b.Pos != nil && len(b.Records) > 0 && b.Records[0].Op == pipeline.OpHeartbeat && pglogrepl.LSN(b.Records[0].Version[1]) > from
	})
	_ = first.Close(context.Background())

	exec(t, ctx, pg, "shop", "ALTER PUBLICATION sluice_test DROP TABLE ws",
		"UPDATE ws SET n = -n WHERE id <= 20", "INSERT INTO ws VALUES (1000, 1000)", "DELETE FROM ws WHERE id BETWEEN 50 AND 59")
	// A crash right after the start put the publication back, before any
	// checkpoint: the next start finds nothing to put back, and reads the
	// table again from the rewrite message committed with the ALTER.
	// ws_added joins the pipeline: put in the publication with a rewrite
	// message too, it is read once (its run as an added table), not twice.
	_, crashed := openPipeline(t, ctx, pg, pos, "ws", "ws_added")
	_ = crashed.Close(context.Background())
	_, second := openPipeline(t, ctx, pg, pos, "ws", "ws_added")
	t.Cleanup(func() { _ = second.Close(context.Background()) })
	catchUp(t, ctx, pg, second, sink)
	pumpEngine(t, ctx, second, sink, func(pipeline.Batch) bool { return len(second.Snapshotting()) == 0 })
	catchUp(t, ctx, pg, second, sink)
	equalRows(t, "after the restart", sink.Table("public.ws"), selectRows(t, ctx, pg, "SELECT id, n FROM ws"))
	equalRows(t, "after the restart", sink.Table("public.ws_added"), selectRows(t, ctx, pg, "SELECT id, n FROM ws_added"))
	runs := map[string]int{}
	for _, ts := range second.Status().Tables {
		runs[ts.Table]++
	}
	if runs["public.ws"] != 1 || runs["public.ws_added"] != 1 {
		t.Fatalf("snapshot runs per table %v, want one each", runs)
	}
}

// A captured table renamed away and back: its changes under the other
// name were left out, so it is read again from the rewrite message the
// source commits when a heartbeat shows it back. A crash right after, with
// the last checkpoint past the heartbeats that showed it gone, loses no
// read: the restarted decoder knows nothing of the table having been
// gone, but the slot replays the message.
func TestRenamedBackIsReadAgainAfterACrash(t *testing.T) {
	pg, ctx := testDB(t)
	exec(t, ctx, pg, "shop", "CREATE TABLE rb (id int PRIMARY KEY, n int)", "INSERT INTO rb SELECT g, g FROM generate_series(1, 100) g")
	sink := newMemSink()
	src, first := openPipeline(t, ctx, pg, nil, "rb")
	pumpEngine(t, ctx, first, sink, func(pipeline.Batch) bool { return len(first.Snapshotting()) == 0 })
	catchUp(t, ctx, pg, first, sink)
	read := func(done func(pipeline.Batch) bool) {
		t.Helper()
		for {
			b, err := first.Read(ctx)
			if err != nil {
				t.Fatalf("read: %v", err)
			}
			sink.Apply(b.Records)
			if done(b) {
				return
			}
		}
	}
	exec(t, ctx, pg, "shop", "ALTER TABLE rb RENAME TO rb_away", "UPDATE rb_away SET n = -n WHERE id <= 20")
	// The table is gone; a checkpoint past the heartbeats that showed it
	// (acknowledged: the restart replays none of them). From here on
	// nothing is acknowledged.
	pumpEngine(t, ctx, first, sink, func(pipeline.Batch) bool { return testutil.ToFloat64(src.m.tablesGone) == 1 })
	past := currentLSN(t, ctx, pg)
	pos := pumpEngine(t, ctx, first, sink, func(b pipeline.Batch) bool {
		return b.Pos != nil && posLSN(t, snapshot.StreamPosition(b.Pos)) >= past
	})
	exec(t, ctx, pg, "shop", "ALTER TABLE rb_away RENAME TO rb")
	read(func(pipeline.Batch) bool { return first.Stats().Rewrites >= 1 })
	_ = first.Close(context.Background()) // the crash: the read queued, none of it done

	_, second := openPipeline(t, ctx, pg, pos, "rb")
	t.Cleanup(func() { _ = second.Close(context.Background()) })
	catchUp(t, ctx, pg, second, sink)
	pumpEngine(t, ctx, second, sink, func(pipeline.Batch) bool { return len(second.Snapshotting()) == 0 })
	catchUp(t, ctx, pg, second, sink)
	equalRows(t, "after the restart", sink.Table("public.rb"), selectRows(t, ctx, pg, "SELECT id, n FROM rb"))
}

// A publication dropped while the pipeline was stopped is made again at
// start, in one transaction with a rewrite message per captured table, so
// each is read again from there (none of its changes in between was
// published). No row changes in between: PostgreSQL before 18 cannot
// decode a change made while the slot's publication did not exist.
func TestPublicationDroppedWhileStoppedIsMadeAndReadAgain(t *testing.T) {
	pg, ctx := testDB(t)
	exec(t, ctx, pg, "shop", "CREATE TABLE pd (id int PRIMARY KEY, n int)", "INSERT INTO pd SELECT g, g FROM generate_series(1, 100) g")
	_, first := openPipeline(t, ctx, pg, nil, "pd")
	sink := newMemSink()
	pumpEngine(t, ctx, first, sink, func(pipeline.Batch) bool { return len(first.Snapshotting()) == 0 })
	catchUp(t, ctx, pg, first, sink)
	past := currentLSN(t, ctx, pg)
	pos := pumpEngine(t, ctx, first, sink, func(b pipeline.Batch) bool {
		return b.Pos != nil && posLSN(t, snapshot.StreamPosition(b.Pos)) >= past
	})
	_ = first.Close(context.Background())

	exec(t, ctx, pg, "shop", "DROP PUBLICATION sluice_test")
	_, second := openPipeline(t, ctx, pg, pos, "pd")
	t.Cleanup(func() { _ = second.Close(context.Background()) })
	catchUp(t, ctx, pg, second, sink)
	pumpEngine(t, ctx, second, sink, func(pipeline.Batch) bool { return len(second.Snapshotting()) == 0 })
	if n := second.Stats().Rewrites; n != 1 {
		t.Fatalf("after the publication was made again: %d tables read again, want 1", n)
	}
	catchUp(t, ctx, pg, second, sink)
	equalRows(t, "after the restart", sink.Table("public.pd"), selectRows(t, ctx, pg, "SELECT id, n FROM pd"))
}
