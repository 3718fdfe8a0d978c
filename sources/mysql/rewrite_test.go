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

// Online schema change tools (gh-ost, pt-online-schema-change) copy a
// captured table into a new one with the new shape, keep it in step, and
// swap the names: RENAME TABLE t TO t_old, t_new TO t. The copy's rows
// were written to a table the pipeline does not capture, so the table
// that now holds the captured name is read again, and the sink ends equal
// to it, its new column's values included.
func TestTableSwappedInByRenameIsReadAgainMariaDB(t *testing.T) {
	m := server(t)
	c := rootConn(t, m, "")
	mustExec(t, c, "CREATE DATABASE swap", "USE swap", "CREATE TABLE t (id int PRIMARY KEY, n int)")
	insertRows(t, c, "t", 300, func(i int) string { return fmt.Sprintf("(%d, %d)", i, i) })
	src, eng := incremental(t, m, "swap", true, nil, nil, "t")
	sink := snaptest.NewMemSink()
	pump(t, eng, sink, func(pipeline.Batch) bool { return len(eng.Snapshotting()) == 0 })
	catchUp(t, c, eng, sink)
	mustExec(t, c, "CREATE TABLE _t_gho (id int PRIMARY KEY, n int, tag varchar(10))",
		"INSERT INTO _t_gho SELECT id, n, CONCAT('tag', id % 7) FROM t",
		"UPDATE t SET n = -1 WHERE id = 5", "UPDATE _t_gho SET n = -1 WHERE id = 5",
		"RENAME TABLE t TO _t_del, _t_gho TO t",
		"INSERT INTO t VALUES (1000, 1, 'after')")
	catchUp(t, c, eng, sink)
	if len(eng.Snapshotting()) > 0 {
		pump(t, eng, sink, func(pipeline.Batch) bool { return len(eng.Snapshotting()) == 0 })
	}
	mustExec(t, c, "INSERT INTO t VALUES (1001, 1, 'last')")
	catchUp(t, c, eng, sink)
	snaptest.EqualRows(t, "after the swap", sink.Table("swap.t"), tableRows(t, src, "swap", "t"))
	if n := eng.Stats().Rewrites; n != 1 {
		t.Fatalf("%d rewrites, want 1", n)
	}
}
