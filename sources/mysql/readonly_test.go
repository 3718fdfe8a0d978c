package mysql

import (
	"context"
	"testing"

	"github.com/sluice-cdc/sluice/pipeline"
)

// A read-only watermark is versioned at the last commit's file and
// offset. After a failover, until the new server's first commit, those
// are the old server's: in the new epoch they could sort above the new
// server's next changes (its binlog files may be numbered lower), so no
// watermark goes out there; it goes out at the new server's first commit.
func TestReadOnlyWatermarkWaitsForTheNewServersFirstCommit(t *testing.T) {
	d := &decoder{flavor: FlavorMariaDB, epoch: 1, pend: &positionMarks{}, foreign: true, shapes: newShapes(nil, nil, true),
		reached: Position{Flavor: FlavorMariaDB, GTID: "0-1-40", File: "mysql-bin.000006", Pos: 9000, Epoch: 1}}
	d.pend.add("w:L", nil)
	var got []txItem
	emit := func(it txItem) error { got = append(got, it); return nil }
	if err := d.dueMarks(emit); err != nil || len(got) != 0 {
		t.Fatalf("a watermark went out at the old server's offset: %v %v", got, err)
	}
	// The new server's first commit (file 000001, offset 400).
	d.reached, d.foreign = Position{Flavor: FlavorMariaDB, GTID: "0-1-41", File: "mysql-bin.000001", Pos: 400, Epoch: 1}, false
	if err := d.dueMarks(emit); err != nil || len(got) != 1 {
		t.Fatalf("after the new server's commit: %v %v", got, err)
	}
	want := pipeline.Version{1, 1, 400, snapshotRow}
	if v := got[0].records[0].Version; v != want {
		t.Fatalf("version %v, want %v", v, want)
	}
}

// A mark added after the stream looked for due marks but before it took
// its next wait context ends that wait at once: add could only call the
// wake of the wait before, already over, and the stream would otherwise
// hand the mark over at the next event (a heartbeat on an idle server).
func TestMarkAddedBetweenWaitsEndsTheNextWait(t *testing.T) {
	var m positionMarks
	parent := context.Background()
	first := m.waitContext(parent)
	m.add("a", nil)
	if first.Err() == nil {
		t.Fatal("add did not end the wait under way")
	}
	if got := m.due(nil); len(got) != 1 {
		t.Fatalf("%d marks due, want 1", len(got))
	}
	m.add("b", nil) // the stream is between its look at the marks and its next wait
	if next := m.waitContext(parent); next.Err() == nil {
		t.Fatal("the wait after a mark was added between waits does not end at once")
	}
	if got := m.due(nil); len(got) != 1 {
		t.Fatalf("%d marks due, want 1", len(got))
	}
	if quiet := m.waitContext(parent); quiet.Err() != nil {
		t.Fatal("a wait with no mark added since the last one ended at once")
	}
}
