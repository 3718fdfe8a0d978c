package mysql

import (
	"fmt"
	"testing"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/snapshot/snaptest"
)

// An ALTER that changes the values existing rows hold with no row event —
// a column's type narrowed (MODIFY … decimal(8,0) rounds every price), a
// column added with an expression DEFAULT (UUID(): a value per row) —
// queues the table to be read again, and the sink ends equal to the table
// after each. An ALTER that changes no value queues nothing.
func TestAlterThatChangesRowsIsReadAgainMariaDB(t *testing.T) {
	m := server(t)
	c := rootConn(t, m, "")
	mustExec(t, c, "CREATE DATABASE incrw", "USE incrw", "CREATE TABLE t (id int PRIMARY KEY, price decimal(8,2))")
	insertRows(t, c, "t", 500, func(i int) string { return fmt.Sprintf("(%d, %d.45)", i, i) })
	src, eng := incremental(t, m, "incrw", true, nil, nil, "t")
	sink := snaptest.NewMemSink()
	pump(t, eng, sink, func(pipeline.Batch) bool { return len(eng.Snapshotting()) == 0 })
	catchUp(t, c, eng, sink)
	for i, ddl := range []string{"ALTER TABLE t MODIFY price decimal(8,0)", "ALTER TABLE t ADD COLUMN u varchar(36) DEFAULT (UUID())"} {
		mustExec(t, c, ddl)
		catchUp(t, c, eng, sink)
		if len(eng.Snapshotting()) > 0 {
			pump(t, eng, sink, func(pipeline.Batch) bool { return len(eng.Snapshotting()) == 0 })
		}
		// A row after the re-read, for the stream to show where it is.
		mustExec(t, c, fmt.Sprintf("INSERT INTO t (id, price) VALUES (%d, 1)", 1000+i))
		catchUp(t, c, eng, sink)
		snaptest.EqualRows(t, "after "+ddl, sink.Table("incrw.t"), tableRows(t, src, "incrw", "t"))
		if n := eng.Stats().Rewrites; n != int64(i+1) {
			t.Fatalf("after %s: %d rewrites, want %d", ddl, n, i+1)
		}
	}
	// A constant DEFAULT: the rows' new value is the column's missing
	// value (added.go), and nothing is read again.
	mustExec(t, c, "ALTER TABLE t ADD COLUMN n int DEFAULT 3")
	catchUp(t, c, eng, sink)
	if n := eng.Stats().Rewrites; n != 2 || len(eng.Snapshotting()) > 0 {
		t.Fatalf("after a constant DEFAULT: %d rewrites, snapshotting %v", n, eng.Snapshotting())
	}
}
