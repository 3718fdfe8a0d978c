package snapshot

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/sluice-cdc/sluice/integration/harness"
	"github.com/sluice-cdc/sluice/pipeline"
)

// A re-snapshot of a table the sinks hold sweeps, after its last chunk,
// the rows it did not find (Invariant 14): rows deleted behind the
// stream's back stay in the sink until then. Random changes commit while
// the chunks are read; every other trial crashes part way and resumes from
// the last position, whose progress carries the sweep's version.
func TestReSnapshotSweepsRowsTheReadDidNotFind(t *testing.T) {
	trials := harness.Trials(8)
	for trial := range trials {
		t.Run(fmt.Sprint(trial), func(t *testing.T) {
			db := newFakeDB(t)
			fill(db, 2000)
			sink := newFakeSink()
			opts := Options{Fresh: true, Parallel: 4, ChunkRows: 64, MaxChunkRows: 128}
			e, _ := openEngine(t, db, opts, nil)
			finish(t, e, db, sink)
			// Deleted with no change event: the sink keeps them.
			db.mu.Lock()
			gone := 0
			for k := range db.rows {
				if k%7 == 0 {
					delete(db.rows, k)
					gone++
				}
			}
			db.mu.Unlock()
			if _, err := e.Request(db.table.ID, ""); err != nil {
				t.Fatal(err)
			}
			if trial%2 == 1 {
				pos := pumpReads(t, e, sink, 700)
				if err := e.Close(context.Background()); err != nil {
					t.Fatal(err)
				}
				var p position
				if err := json.Unmarshal(pos, &p); err != nil || len(p.Snapshot.Tables) != 1 || p.Snapshot.Tables[0].SweepAt == nil {
					t.Fatalf("the position after 700 rows re-read carries no sweep version: %s (%v)", pos, err)
				}
				for len(db.log) > 0 {
					<-db.log
				}
				e, _ = openEngine(t, db, opts, pos)
			}
			rng := rand.New(rand.NewPCG(uint64(trial), 14))
			n := 0
			pump(t, e, sink, func(pipeline.Batch) bool {
				commitRandomly(db, rng, &n, 2500, false)
				return len(e.Snapshotting()) == 0
			})
			drain(t, e, db, sink)
			if d := sink.diff(db); len(d) > 0 {
				t.Fatalf("%d of %d rows deleted behind the stream: %d keys differ, first: %v", gone, 2000, len(d), d[:min(5, len(d))])
			}
			if s := e.Stats().Sweeps; s != 1 {
				t.Fatalf("%d sweeps, want 1", s)
			}
		})
	}
}

// A crash after the sweep reached the sink but before a checkpoint covered
// it: the restart reads the last chunks again and sweeps again at the
// same version, which the sink's barrier already holds. Nothing the run
// read is lost, and no row deleted behind the stream comes back.
func TestSweepReplayedAfterACrash(t *testing.T) {
	db := newFakeDB(t)
	fill(db, 1000)
	sink := newFakeSink()
	opts := Options{Fresh: true, Parallel: 2, ChunkRows: 64, MaxChunkRows: 64}
	e, _ := openEngine(t, db, opts, nil)
	finish(t, e, db, sink)
	db.mu.Lock()
	for k := int64(0); k < 1000; k += 9 {
		delete(db.rows, k)
	}
	db.mu.Unlock()
	if _, err := e.Request(db.table.ID, ""); err != nil {
		t.Fatal(err)
	}
	var before pipeline.Position // the last position before the sweep's batch
	var sweep *pipeline.Record
	pump(t, e, sink, func(b pipeline.Batch) bool {
		for i := range b.Records {
			if r := &b.Records[i]; r.Op == pipeline.OpTruncate && r.Replaces {
				sweep = r
			}
		}
		if sweep == nil && b.Pos != nil {
			before = b.Pos
		}
		return sweep != nil
	})
	if err := e.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	for len(db.log) > 0 {
		<-db.log
	}
	e2, _ := openEngine(t, db, opts, before)
	finish(t, e2, db, sink)
	if n := e2.Stats().Sweeps; n != 1 {
		t.Fatalf("the restart swept %d times, want 1", n)
	}
	var p position
	if err := json.Unmarshal(before, &p); err != nil || len(p.Snapshot.Tables) != 1 || p.Snapshot.Tables[0].SweepAt == nil ||
		*p.Snapshot.Tables[0].SweepAt != sweep.Version {
		t.Fatalf("the position before the sweep carries %s, want the sweep's version %v (%v)", before, sweep.Version, err)
	}
}
