package postgres

import (
	"context"
	"math/rand"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-cdc/sluice/integration/harness"
)

// Slot creation and initial load repeated under concurrent single-row
// committers: some commit lands at (or right after) the consistent point
// in some of the runs, and every run must end with the sink equal to the
// table. The table is large next to the writes, so a lost change is
// rarely overwritten by a later one of the same row. Before streamed versions started above the snapshot rows' index,
// about one run in three lost the change committed at the consistent
// point.
func TestInitialLoadRepeatedUnderConcurrentCommits(t *testing.T) {
	trials := harness.Trials(50)
	pg, ctx := testDB(t)
	exec(t, ctx, pg, "shop",
		"CREATE TABLE t (id int PRIMARY KEY, n bigint NOT NULL)",
		"INSERT INTO t SELECT g, 0 FROM generate_series(1, 5000) g")
	opts := testOptions(pg, "public.t")
	opts.Snapshot = SnapshotOptions{Mode: SnapshotInitial, Parallel: 1, ChunkRows: 1000}
	atPoint := 0
	for trial := range trials {
		writeCtx, stopWrites := context.WithCancel(ctx)
		var writes atomic.Int64
		var wg sync.WaitGroup
		for w := range 6 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c, err := pgx.Connect(ctx, pg.DSN("shop"))
				if err != nil {
					t.Error(err)
					return
				}
				defer c.Close(context.Background())
				rnd := rand.New(rand.NewSource(int64(trial*10 + w)))
				for writeCtx.Err() == nil {
					id := 1 + rnd.Intn(5000)
					var err error
					switch rnd.Intn(8) {
					case 0:
						_, err = c.Exec(ctx, "DELETE FROM t WHERE id = $1", id)
					case 1:
						_, err = c.Exec(ctx, "INSERT INTO t VALUES ($1, 0) ON CONFLICT (id) DO NOTHING", id)
					default:
						_, err = c.Exec(ctx, "UPDATE t SET n = n + 1 WHERE id = $1", id)
					}
					if err != nil && writeCtx.Err() == nil {
						t.Error(err)
						return
					}
					writes.Add(1)
				}
			}()
		}
		src, err := New(opts, testLogger(t), nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := src.Open(ctx, nil); err != nil {
			t.Fatal(err)
		}
		cp := src.start
		r := newReader(t, src, true)
		r.until(ctx, "the end of the load", func() bool { return r.lastPos != nil })
		for from := writes.Load(); writes.Load() < from+20; {
			r.step(ctx, "writes after the load")
		}
		stopWrites()
		wg.Wait()
		r.reachLSN(ctx, currentLSN(t, ctx, pg))
	scan:
		for _, b := range r.batches {
			for _, rec := range b.Records {
				if rec.Op.IsData() && !rec.Snapshot && rec.Version[1] == uint64(cp) {
					atPoint++
					break scan
				}
			}
		}
		equalRows(t, "public.t", r.sink.Table("public.t"), selectRows(t, ctx, pg, "SELECT id, n FROM t"))
		if err := src.Close(ctx); err != nil {
			t.Fatal(err)
		}
		dropSlotWhenIdle(t, ctx, pg, "shop", opts.Slot)
	}
	t.Logf("%d slot creations under 6 committing clients; in %d a streamed transaction committed exactly at the consistent point",
		trials, atPoint)
}
