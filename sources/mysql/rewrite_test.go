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

// A captured table dropped and created again (a reload: DROP TABLE, CREATE
// TABLE, INSERT) leaves no ghost of the old table's rows in the sink: the
// DROP empties it there as a TRUNCATE does, and a table dropped for good
// leaves the sink empty.
func TestTableDroppedAndCreatedAgainMariaDB(t *testing.T) {
	m := server(t)
	c := rootConn(t, m, "")
	mustExec(t, c, "CREATE DATABASE dropc", "USE dropc", "CREATE TABLE t (id int PRIMARY KEY, n int)")
	insertRows(t, c, "t", 300, func(i int) string { return fmt.Sprintf("(%d, %d)", i, i) })
	src, eng := incremental(t, m, "dropc", true, nil, nil, "t")
	sink := snaptest.NewMemSink()
	pump(t, eng, sink, func(pipeline.Batch) bool { return len(eng.Snapshotting()) == 0 })
	catchUp(t, c, eng, sink)
	mustExec(t, c, "DROP TABLE t", "CREATE TABLE t (id int PRIMARY KEY, n int, tag varchar(10))",
		"INSERT INTO t VALUES (1, -1, 'again'), (1000, 2, 'again')")
	catchUp(t, c, eng, sink)
	snaptest.EqualRows(t, "after DROP and CREATE", sink.Table("dropc.t"), tableRows(t, src, "dropc", "t"))
	mustExec(t, c, "DROP TABLE IF EXISTS t")
	catchUp(t, c, eng, sink)
	if rows := sink.Table("dropc.t"); len(rows) != 0 {
		t.Fatalf("after DROP: the sink holds %d rows of the dropped table", len(rows))
	}
	// DROP DATABASE drops the captured tables in it.
	mustExec(t, c, "CREATE TABLE t (id int PRIMARY KEY)", "INSERT INTO t VALUES (1), (2)")
	catchUp(t, c, eng, sink)
	if rows := sink.Table("dropc.t"); len(rows) != 2 {
		t.Fatalf("the sink holds %d rows of the table created again, want 2", len(rows))
	}
	mustExec(t, c, "DROP DATABASE dropc")
	catchUp(t, c, eng, sink)
	if rows := sink.Table("dropc.t"); len(rows) != 0 {
		t.Fatalf("after DROP DATABASE: the sink holds %d rows of its table", len(rows))
	}
}

// A captured table dropped while the engine reads it: the chunks read
// before the DROP leave the sink with it, the reads after it end the
// table's snapshot, and a table created again under the name is mirrored
// as it is.
func TestTableDroppedWhileSnapshottedMariaDB(t *testing.T) {
	m := server(t)
	c := rootConn(t, m, "")
	mustExec(t, c, "CREATE DATABASE dropd", "USE dropd", "CREATE TABLE t (id int PRIMARY KEY, n int)")
	insertRows(t, c, "t", 5000, func(i int) string { return fmt.Sprintf("(%d, %d)", i, i) })
	src, eng := incremental(t, m, "dropd", true, nil, nil, "t")
	sink := snaptest.NewMemSink()
	pump(t, eng, sink, func(pipeline.Batch) bool { return len(sink.Table("dropd.t")) > 0 })
	mustExec(t, c, "DROP TABLE t")
	// The engine ends the snapshot on a batch of the stream: an idle
	// stream is given changes of a table the pipeline does not capture.
	mustExec(t, c, "CREATE TABLE tick (id int AUTO_INCREMENT PRIMARY KEY)")
	catchUp(t, c, eng, sink)
	for i := 0; len(eng.Snapshotting()) > 0; i++ {
		if i == 1000 {
			t.Fatalf("still snapshotting %v", eng.Snapshotting())
		}
		mustExec(t, c, "INSERT INTO tick VALUES ()")
		catchUp(t, c, eng, sink)
	}
	if rows := sink.Table("dropd.t"); len(rows) != 0 {
		t.Fatalf("after DROP: the sink holds %d rows of the dropped table", len(rows))
	}
	mustExec(t, c, "CREATE TABLE t (id int PRIMARY KEY, n int)", "INSERT INTO t VALUES (5, 5)")
	catchUp(t, c, eng, sink)
	snaptest.EqualRows(t, "after", sink.Table("dropd.t"), tableRows(t, src, "dropd", "t"))
}
