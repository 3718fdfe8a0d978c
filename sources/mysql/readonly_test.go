package mysql

import (
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
