package postgres

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-cdc/sluice/pipeline"
)

// An ALTER TABLE issued while the initial load holds its locks (the load
// stalled: nothing reads its batches) waits no longer than giveWayAfter:
// the load then fails with a *GiveWayError naming the ALTER, its
// transactions end, and the ALTER and a SELECT queued behind it complete
// while the source is still open. A restart from the last checkpoint
// reads the rest in chunks; the sink then equals both tables, under a
// writer running random transactions throughout.
func TestInitialLoadGivesWayToASchemaChange(t *testing.T) {
	defer func(d time.Duration) { giveWayAfter = d }(giveWayAfter)
	giveWayAfter = 2 * time.Second
	pg, ctx := testDB(t)
	createItemsAndPairs(t, ctx, pg)
	var stop atomic.Bool
	var txns atomic.Int64
	done := make(chan error, 1)
	go func() { done <- writeRandomly(ctx, pg.DSN("shop"), 7, &stop, &txns) }()
	stopWriter := func() {
		if stop.Swap(true) {
			return
		}
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
	t.Cleanup(stopWriter)

	sink := newMemSink()
	first := openLoad(t, ctx, pg, nil)
	t.Cleanup(func() { _ = first.Close(context.Background()) })
	var loaded int
	checkpoint := pumpEngine(t, ctx, first, sink, func(b pipeline.Batch) bool {
		loaded += len(b.Records)
		return loaded >= 1000 && b.Pos != nil
	})

	// Nothing reads the load now: its buffer fills and its readers keep
	// their transactions, with their locks.
	const alter = "ALTER TABLE items ALTER COLUMN v SET DEFAULT 'none'"
	altered := goExec(ctx, pg.DSN("shop"), alter)
	waitFor(t, ctx, "the ALTER to wait for the load's lock", func() bool {
		var waiting bool
		err := pgxQueryRow(ctx, pg, "SELECT count(*) > 0 FROM pg_locks WHERE NOT granted AND mode = 'AccessExclusiveLock' AND relation = 'items'::regclass", &waiting)
		if err != nil {
			t.Fatal(err)
		}
		return waiting
	})
	queued := goExec(ctx, pg.DSN("shop"), "SELECT count(*) FROM items")
	for what, ch := range map[string]<-chan error{"the ALTER": altered, "the SELECT queued behind it": queued} {
		select {
		case err := <-ch:
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
		case <-ctx.Done():
			t.Fatalf("%s still waits: the load did not give way", what)
		}
	}

	// The load's error reaches Read after the batches it queued.
	var gw *GiveWayError
	for {
		b, err := first.Read(ctx)
		if err != nil {
			if !errors.As(err, &gw) || !pipeline.IsRestart(err) {
				t.Fatalf("read: %v, want the load giving way, marked for a restart", err)
			}
			break
		}
		sink.Apply(b.Records)
		loaded += len(b.Records)
		if b.Pos != nil {
			checkpoint = b.Pos
			if err := first.Ack(ctx, b.Pos); err != nil {
				t.Fatal(err)
			}
		}
	}
	if gw.Query != alter || gw.Table != "items" || gw.Mode != "AccessExclusiveLock" || gw.Waited < giveWayAfter {
		t.Fatalf("gave way to %+v, want the ALTER on items after %s", gw, giveWayAfter)
	}
	_ = first.Close(context.Background())

	reads := resumeLoad(t, ctx, pg, checkpoint, sink, stopWriter)
	t.Logf("the first run handed over %d records; the restart read %d rows in chunks; %d writer transactions",
		loaded, reads, txns.Load())
	if reads == 0 || reads >= 9000 {
		t.Fatalf("the restart read %d rows: want the rest of the load, not none and not all 9000", reads)
	}
}

// goExec runs sql on a connection of its own and reports its outcome.
func goExec(ctx context.Context, dsn, sql string) <-chan error {
	out := make(chan error, 1)
	go func() {
		c, err := pgx.Connect(ctx, dsn)
		if err != nil {
			out <- err
			return
		}
		defer c.Close(context.Background())
		_, err = c.Exec(ctx, sql)
		out <- err
	}()
	return out
}
