package snapshot

import (
	"context"
	"encoding/json"
	"sync"
	"testing"

	"github.com/sluice-cdc/sluice/pipeline"
)

// A table rewritten in place (OpRewrite: no change event for its rows)
// is read again: the rewrite is consumed, never handed on, and a new run
// is queued even while an earlier one is under way, whose chunks read so
// far predate the rewrite. The request is in the progress of the batch
// that carries the rewrite's position, so a restart from it still reads
// the table. With snapshot mode never (IgnoreAdded) the table is left
// as it is; a rewrite of a table this pipeline does not capture is
// ignored.
func TestRewrittenTableIsReadAgain(t *testing.T) {
	db := newFakeDB(t)
	fill(db, 1000)
	sink := newFakeSink()
	e, _ := openEngine(t, db, Options{Parallel: 2, ChunkRows: 64}, nil)
	drain(t, e, db, sink)
	if _, err := e.Request(db.table.ID, ""); err != nil {
		t.Fatal(err)
	}
	pumpReads(t, e, sink, 100) // the first run is under way
	at := db.rewrite("rewritten")
	var pos pipeline.Position
	pump(t, e, sink, func(b pipeline.Batch) bool {
		for _, r := range b.Records {
			if r.Op == pipeline.OpRewrite {
				t.Fatal("the rewrite was handed on")
			}
		}
		if b.Pos != nil && string(StreamPosition(b.Pos)) == string(at) {
			pos = b.Pos
			return true
		}
		return false
	})
	var p position
	if err := json.Unmarshal(pos, &p); err != nil {
		t.Fatal(err)
	}
	if n := len(p.Snapshot.Tables); n != 2 {
		t.Fatalf("the rewrite's position lists %d runs of the table, want 2 (the earlier run and the new one)", n)
	}
	// A restart from the rewrite's position reads the table again.
	if err := e.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	e2, _ := openEngine(t, db, Options{Parallel: 2, ChunkRows: 64}, pos)
	finish(t, e2, db, sink)

	// Snapshot mode never, and a table not captured: nothing is queued.
	for _, c := range []struct {
		name   string
		ignore bool
		id     pipeline.TableID
	}{{"never", true, db.table.ID}, {"not captured", false, pipeline.TableID{Database: "db", Schema: "s", Table: "other"}}} {
		e3, _ := openEngine(t, db, Options{Parallel: 2, ChunkRows: 64, IgnoreAdded: c.ignore}, pos)
		pump(t, e3, sink, snapshotOver(e3))
		e3.mu.Lock()
		e3.rewritten(&pipeline.Record{Op: pipeline.OpRewrite, Table: &pipeline.Table{ID: c.id}})
		queued := len(e3.prog.Tables)
		e3.mu.Unlock()
		if queued != 0 {
			t.Errorf("%s: %d runs queued after a rewrite, want none", c.name, queued)
		}
	}
}

// A rewrite of a table whose run has not begun (no window saw its low
// watermark, nothing emitted) reuses that run: every chunk of it is read
// after the rewrite. This is how a table new to the pipeline, which the
// Postgres source puts in the publication at start with a rewrite
// message, is read once, not twice.
func TestRewriteReusesARunNotBegun(t *testing.T) {
	db := newFakeDB(t)
	fill(db, 100)
	sink := newFakeSink()
	e, _ := openEngine(t, db, Options{Parallel: 2, ChunkRows: 64}, nil)
	drain(t, e, db, sink)
	e.mu.Lock()
	run, err := e.queue(db.table.ID, "", false)
	if err != nil {
		e.mu.Unlock()
		t.Fatal(err)
	}
	e.rewritten(&pipeline.Record{Op: pipeline.OpRewrite, Table: &pipeline.Table{ID: db.table.ID}})
	var runs []string
	for _, tp := range e.prog.Tables {
		runs = append(runs, tp.Run)
	}
	e.mu.Unlock()
	if len(runs) != 1 || runs[0] != run {
		t.Fatalf("runs %v after a rewrite of a table whose run %s had not begun, want that run alone", runs, run)
	}
	finish(t, e, db, sink)
}

// A rewrite that comes after a run's plan read the max key does not reuse
// the run, even before any window of it began: a row inserted above that
// max key before the rewrite, and changed by it, is read by a new run
// (found by the Postgres chaos test: an enum label renamed while a
// re-read of the table was planned left such rows with the old label).
func TestRewriteAfterThePlanQueuesANewRun(t *testing.T) {
	db := newFakeDB(t)
	fill(db, 100)
	sink := newFakeSink()
	e, _ := openEngine(t, db, Options{Parallel: 1, ChunkRows: 64}, nil)
	drain(t, e, db, sink)
	var once sync.Once
	db.onPlan = func() {
		once.Do(func() {
			db.commit(true, op{kind: pipeline.OpInsert, key: 5000, value: "above the max key"})
			db.rewrite("rewritten")
		})
	}
	if _, err := e.Request(db.table.ID, ""); err != nil {
		t.Fatal(err)
	}
	finish(t, e, db, sink)
	if n := e.Stats().Rewrites; n != 1 {
		t.Fatalf("%d rewrites, want 1", n)
	}
}
