package snapshot

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	"github.com/sluice-cdc/sluice/pipeline"
)

// An insert whose row image left a value out (Record.Refetch) has its
// row read again (Invariant 13): the request is in the checkpoint of the
// batch that carried the change, so a restart from it reads the rows too,
// and the sink ends equal to the table, rows changed or deleted after the
// insert included.
func TestChangesThatLeftValuesOutAreReadAgain(t *testing.T) {
	db := newFakeDB(t)
	fill(db, 50)
	sink := newFakeSink()
	e, _ := openEngine(t, db, Options{Parallel: 2, ChunkRows: 64}, nil)
	drain(t, e, db, sink)
	var ops []op
	for k := int64(100); k < 150; k++ {
		ops = append(ops, op{kind: pipeline.OpInsert, key: k, value: fmt.Sprint("p", k), partial: true})
	}
	db.commit(true, ops...)
	// The position of the batch that carries the inserts lists their rows.
	pos := pump(t, e, sink, func(b pipeline.Batch) bool {
		return slices.ContainsFunc(b.Records, func(r pipeline.Record) bool { return r.Refetch })
	})
	var p position
	if err := json.Unmarshal(pos, &p); err != nil {
		t.Fatal(err)
	}
	queued := 0
	for _, tp := range p.Snapshot.Tables {
		if tp.Repair {
			queued += int(tp.Estimate)
		}
	}
	if queued != 50 {
		t.Fatalf("the checkpoint carries repairs of %d rows, want 50: %s", queued, pos)
	}
	db.commit(true, op{kind: pipeline.OpInsert, key: 200, value: "moved", partial: true},
		op{kind: pipeline.OpUpdate, old: 200, key: 201, value: "moved", partial: true})
	db.commit(true, op{kind: pipeline.OpInsert, key: 300, value: "gone", partial: true})
	db.commit(true, op{kind: pipeline.OpDelete, key: 300})
	pos = pump(t, e, sink, func(b pipeline.Batch) bool {
		return slices.ContainsFunc(b.Records, func(r pipeline.Record) bool { return r.Op == pipeline.OpDelete })
	})
	if n := e.Stats().Refetches; n != 53 {
		t.Fatalf("%d rows queued to be read again, want 53", n)
	}
	// A crash: whatever the repairs emitted after pos is lost, and the
	// next run reads every row pos lists.
	if err := e.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	e2, _ := openEngine(t, db, Options{Parallel: 2, ChunkRows: 64}, pos)
	finish(t, e2, db, sink)
}
