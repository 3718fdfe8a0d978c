package mysql

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/pipeline"
)

func TestAddedColumns(t *testing.T) {
	lit := func(s string) defaultLit { return defaultLit{text: s, constant: true} }
	str := func(s string) defaultLit { return defaultLit{text: s, quoted: true, constant: true} }
	null := defaultLit{null: true, constant: true}
	expr := defaultLit{}
	for _, c := range []struct {
		sql  string
		want map[string]defaultLit
	}{
		{"ALTER TABLE t ADD COLUMN n INT DEFAULT 7", map[string]defaultLit{"n": lit("7")}},
		{"alter table db.t add n decimal(6,2) not null default -1.50 after id", map[string]defaultLit{"n": lit("-1.50")}},
		{"ALTER TABLE t ADD COLUMN IF NOT EXISTS `s` varchar(10) DEFAULT 'a''b\\n' COMMENT 'x'", map[string]defaultLit{"s": str("a'b\n")}},
		{"ALTER TABLE t ADD s text DEFAULT _utf8mb4'ü' , ADD COLUMN c char(3)", map[string]defaultLit{"s": {text: "ü", quoted: true, constant: true, introducer: "utf8mb4"}, "c": null}},
		{"ALTER TABLE t ADD (a int DEFAULT 1, b date DEFAULT '2024-02-29', c timestamp DEFAULT CURRENT_TIMESTAMP)",
			map[string]defaultLit{"a": lit("1"), "b": str("2024-02-29"), "c": expr}},
		{"ALTER TABLE t ADD v int DEFAULT 1 + 1, ADD w int DEFAULT (2), ADD x int DEFAULT NULL, ADD y bool DEFAULT TRUE",
			map[string]defaultLit{"v": expr, "w": expr, "x": null, "y": lit("1")}},
		{"ALTER TABLE t ADD INDEX i (a), ADD CONSTRAINT c CHECK (a > 0), DROP COLUMN z, MODIFY q int DEFAULT 3", nil},
		{"SET STATEMENT max_statement_time=60 FOR ALTER TABLE t ADD e enum('x','y') DEFAULT 'y'", map[string]defaultLit{"e": str("y")}},
		{"ALTER TABLE t ADD s varchar(5) DEFAULT 'a' 'b'", map[string]defaultLit{"s": str("ab")}},
		{"CREATE TABLE t (a int DEFAULT 1)", nil},
	} {
		if got := addedColumns(c.sql); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s:\n got %+v\nwant %+v", c.sql, got, c.want)
		}
	}
}

// A column added with a DEFAULT gives the rows that existed before the
// ALTER that value with no row event; the new shape carries it as the
// column's missing value, read from the statement. The oracle is the
// server itself: an update of such an old row logs its full image, whose
// values of the added columns must equal their missing values.
func TestAddedColumnDefaultsAreMissingValues(t *testing.T) {
	m := server(t)
	c := rootConn(t, m, "")
	mustExec(t, c, "CREATE DATABASE addcol", "CREATE TABLE addcol.t (id int PRIMARY KEY, touch int)")
	start := gtidNow(t, c)
	added := map[string]string{
		"a": "int DEFAULT -5", "b": "bigint unsigned DEFAULT 18446744073709551615", "c": "decimal(8,3) DEFAULT 1.5",
		"d": "double DEFAULT 2.5e-3", "f": "float DEFAULT 0.1", "e": "date DEFAULT '2024-02-29'",
		"g": "datetime(3) DEFAULT '2024-02-29 12:34:56.789'", "h": "time DEFAULT '-838:59:59'",
		"i": `varchar(10) DEFAULT 'a''b\\'`, "j": "char(4) DEFAULT 'xy'", "k": "enum('p','q') DEFAULT 'q'",
		"l": "set('r','s','u') DEFAULT 'u,r'", "m": "year DEFAULT 2024", "n": "varbinary(4) DEFAULT 'ab'",
		"o": "binary(3) DEFAULT 'z'", "p": "text DEFAULT 'long'", "q": "tinyint DEFAULT TRUE", "r": "int",
		"s": "varchar(3) CHARACTER SET latin1 DEFAULT _latin1'é'", "u": "json DEFAULT '{\"x\": 1}'",
	}
	var specs []string
	for name, def := range added {
		specs = append(specs, "ADD COLUMN "+name+" "+def)
	}
	mustExec(t, c, "INSERT INTO addcol.t VALUES (1, 0)",
		"ALTER TABLE addcol.t "+strings.Join(specs, ", "),
		"UPDATE addcol.t SET touch = 1 WHERE id = 1")
	s := streamFrom(t, m, "addcol.t", start, nil, nil)
	recs, _ := readRecords(t, s, 2)
	up := recs[1]
	if up.Op != pipeline.OpUpdate {
		t.Fatalf("second record is %s", up.Op)
	}
	for i, col := range up.Table.Columns {
		if _, ok := added[col.Name]; !ok {
			if col.Missing != nil {
				t.Errorf("column %s (not added) has missing value %v", col.Name, col.Missing)
			}
			continue
		}
		if got, want := fmt.Sprintf("%#v", col.Missing), fmt.Sprintf("%#v", up.After[i]); got != want {
			t.Errorf("column %s (%s): missing value %s, the server's %s", col.Name, added[col.Name], got, want)
		}
	}
}

// A column added to a table that then sees no row change still reaches the
// pipeline (Invariant 11): the stream reads the pending table's shape from
// the catalog between two GTID positions and emits it, with the added
// column's DEFAULT as its missing value, once it has read up to the second.
// A concurrent workload on another table keeps the server busy (and its
// GTID position moving) throughout. A row changed afterwards keeps that
// shape.
func TestShapeChangeWithoutRowsReachesThePipeline(t *testing.T) {
	m := server(t)
	c := rootConn(t, m, "")
	mustExec(t, c, "CREATE DATABASE idle", "CREATE TABLE idle.t (id int PRIMARY KEY, v varchar(5))",
		"CREATE TABLE idle.busy (id int PRIMARY KEY AUTO_INCREMENT, n int)", "INSERT INTO idle.t VALUES (1, 'a')")
	start := gtidNow(t, c)
	s := streamFrom(t, m, "idle.t", start, nil, func(o *Options) { o.HeartbeatInterval = 200 * time.Millisecond })
	busy := rootConn(t, m, "")
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		for {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			if _, err := busy.Execute("INSERT INTO idle.busy (n) VALUES (1)"); err != nil {
				done <- err
				return
			}
		}
	}()
	defer func() {
		close(stop)
		if err := <-done; err != nil {
			t.Errorf("workload: %v", err)
		}
	}()
	mustExec(t, c, "INSERT INTO idle.t VALUES (2, 'b')")
	readRecords(t, s, 1)
	mustExec(t, c, "ALTER TABLE idle.t ADD COLUMN n int DEFAULT 7")
	var shape *pipeline.Record
	deadline := time.Now().Add(time.Minute)
	for shape == nil {
		if time.Now().After(deadline) {
			t.Fatal("no shape record within a minute")
		}
		rctx, cancel := context.WithTimeout(ctx, time.Until(deadline))
		b, err := s.Read(rctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		for i := range b.Records {
			if r := &b.Records[i]; r.Op == pipeline.OpShape && r.Table.ID.Table == "t" && len(r.Table.Columns) == 3 {
				shape = r
			}
		}
	}
	col := shape.Table.Columns[2]
	if col.Name != "n" || col.Missing != int64(7) || shape.Pos == nil {
		t.Fatalf("shape column %+v, position %s", col, shape.Pos)
	}
	mustExec(t, c, "UPDATE idle.t SET v = 'c' WHERE id = 1")
	recs, _ := readRecords(t, s, 1)
	up := recs[len(recs)-1]
	if up.Op != pipeline.OpUpdate || up.Table != shape.Table {
		t.Fatalf("the update after has shape generation %d (want the shape record's %d)", up.Table.Generation, shape.Table.Generation)
	}
}

// No checkpoint passes an ALTER whose added column's DEFAULT no shape has
// carried yet: a change after it (another table's) goes out with no
// position, so a crash there resumes before the ALTER. The restarted
// source — whose catalog seed already has the column — reads the ALTER
// again and the table's next change carries the DEFAULT as the missing
// value; positions flow again from that change on.
func TestCheckpointWaitsForAddedDefaults(t *testing.T) {
	m := server(t)
	c := rootConn(t, m, "")
	mustExec(t, c, "CREATE DATABASE held", "CREATE TABLE held.t (id int PRIMARY KEY, v varchar(5))",
		"CREATE TABLE held.other (id int PRIMARY KEY)", "INSERT INTO held.t VALUES (1, 'a')")
	start := gtidNow(t, c)
	tables := func(o *Options) {
		o.Tables = []string{"held.t", "held.other"}
		o.HeartbeatInterval = time.Hour // no catalog check: only the binlog tells
	}
	s := streamFrom(t, m, "held.t", start, nil, tables)
	mustExec(t, c, "INSERT INTO held.t VALUES (2, 'b')")
	recs, before := readRecords(t, s, 1)
	if before == nil || recs[len(recs)-1].Pos == nil {
		t.Fatalf("the insert before the ALTER has no position")
	}
	mustExec(t, c, "ALTER TABLE held.t ADD COLUMN Fee int DEFAULT 7", "INSERT INTO held.other VALUES (1)", "INSERT INTO held.other VALUES (2)")
	recs, pos := readRecords(t, s, 2)
	for _, r := range recs {
		if r.Pos != nil || pos != nil {
			t.Fatalf("a change after the ALTER has position %s (batch %s): a checkpoint there loses the DEFAULT of fee", r.Pos, pos)
		}
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}

	// The crash: a new source from the last position handed over.
	s = streamFrom(t, m, "held.t", "", before, tables)
	mustExec(t, c, "UPDATE held.t SET v = 'c' WHERE id = 1")
	var up *pipeline.Record
	var after pipeline.Position
	for up == nil {
		recs, after = readRecords(t, s, 1)
		for i := range recs {
			if recs[i].Table.ID.Table == "t" && recs[i].Op == pipeline.OpUpdate {
				up = &recs[i]
			}
		}
	}
	cols := up.Table.Columns
	if len(cols) != 3 || !strings.EqualFold(cols[2].Name, "fee") || cols[2].Missing != int64(7) {
		t.Fatalf("the update after the restart has columns %+v: want fee with missing value 7", cols)
	}
	if up.Pos == nil || after == nil {
		t.Fatal("positions did not flow again once the shape carried the DEFAULT")
	}
}

// A missing value stays with its column in every later shape: a sink
// whose batch holds the changes of two shapes applies the newer one, and
// must still fill the rows older than the first ALTER.
func TestMissingValuesCarryIntoLaterShapes(t *testing.T) {
	m := server(t)
	c := rootConn(t, m, "")
	mustExec(t, c, "CREATE DATABASE carry", "CREATE TABLE carry.t (id int PRIMARY KEY, v varchar(5))", "INSERT INTO carry.t VALUES (1, 'a')")
	s := streamFrom(t, m, "carry.t", gtidNow(t, c), nil, nil)
	mustExec(t, c, "ALTER TABLE carry.t ADD COLUMN a int DEFAULT 1", "UPDATE carry.t SET v = 'b'",
		"ALTER TABLE carry.t ADD COLUMN b varchar(3) DEFAULT 'two'", "UPDATE carry.t SET v = 'c'")
	recs, _ := readRecords(t, s, 2)
	last := recs[len(recs)-1]
	cols := last.Table.Columns
	if len(cols) != 4 || cols[2].Missing != int64(1) || cols[3].Missing != "two" {
		t.Fatalf("the second update's columns %+v: want a with missing value 1 and b with 'two'", cols)
	}
}

func TestRewritesRows(t *testing.T) {
	for sql, want := range map[string]bool{
		"ALTER TABLE t MODIFY price decimal(8,0)":                                    true,
		"alter table db.t change column a b bigint":                                  true,
		"ALTER TABLE t CONVERT TO CHARACTER SET utf8mb4":                             true,
		"ALTER TABLE t ADD COLUMN at timestamp DEFAULT CURRENT_TIMESTAMP":            true,
		"ALTER TABLE t ADD u varchar(36) DEFAULT (UUID()), ADD n int DEFAULT 1":      true,
		"SET STATEMENT max_statement_time=60 FOR ALTER TABLE t MODIFY q int":         true,
		"ALTER TABLE t ADD COLUMN n int DEFAULT 7, ADD m text":                       false,
		"ALTER TABLE t ADD COLUMN seq int NOT NULL AUTO_INCREMENT UNIQUE":            true,
		"ALTER TABLE t ADD COLUMN g int AS (a + 1) STORED":                           true,
		"ALTER TABLE t ADD COLUMN g int GENERATED ALWAYS AS (a * 2) VIRTUAL":         true,
		"ALTER TABLE t ADD INDEX i (a), DROP COLUMN z, ALTER COLUMN q SET DEFAULT 3": false,
		"ALTER TABLE t COMMENT 'modify change convert'":                              false,
		"CREATE TABLE t (a int DEFAULT (UUID()))":                                    false,
		"ALTER TABLE t RENAME COLUMN v TO w":                                         true,
		"ALTER TABLE t ADD INDEX i (a), RENAME INDEX i TO j, RENAME KEY k TO l":      false,
	} {
		if got := rewritesRows(sql, addedColumns(sql)); got != want {
			t.Errorf("%s: %v, want %v", sql, got, want)
		}
	}
}
