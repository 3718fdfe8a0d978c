package postgres

import (
	"context"
	"testing"
	"time"

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
	if got := selectRows(t, ctx, pg, "SELECT evtname FROM pg_event_trigger"); len(got) != 1 || got[0] != "[sluice_table_rewrite]" {
		t.Fatalf("event triggers %v, want sluice_table_rewrite", got)
	}
	sink := newMemSink()
	settle := func(what, query string) {
		t.Helper()
		pumpEngine(t, ctx, eng, sink, func(pipeline.Batch) bool { return len(eng.Snapshotting()) == 0 })
		catchUp(t, ctx, pg, eng, sink)
		equalRows(t, what, sink.Table("public.rw"), selectRows(t, ctx, pg, query))
	}
	settle("the first snapshot", "SELECT id, n, body FROM rw")
	for i, ddl := range []string{"ALTER TABLE rw ALTER COLUMN n TYPE bigint USING n * 100", "ALTER TABLE rw ADD COLUMN u uuid DEFAULT gen_random_uuid()"} {
		exec(t, ctx, pg, "shop", ddl)
		catchUp(t, ctx, pg, eng, sink)
		if n := eng.Stats().Rewrites; n != int64(i+1) {
			t.Fatalf("after %s: %d rewrites seen, want %d", ddl, n, i+1)
		}
		settle("after "+ddl, "SELECT id, n, body"+[]string{"", ", u::text"}[i]+" FROM rw")
	}

	// Not captured: nothing is read.
	before := eng.Stats().Chunks
	exec(t, ctx, pg, "shop", "ALTER TABLE other ALTER COLUMN n TYPE bigint")
	catchUp(t, ctx, pg, eng, sink)
	if len(eng.Snapshotting()) > 0 || eng.Stats().Chunks != before || eng.Stats().Rewrites != 2 {
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
