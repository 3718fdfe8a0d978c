package mysql

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/client"

	"github.com/sluice-cdc/sluice/integration/harness"
	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/pipeline/sourcetest"
)

func gtidNow(t testing.TB, c *client.Conn) string {
	t.Helper()
	r, err := c.Execute("SELECT @@GLOBAL.gtid_binlog_pos")
	if err != nil {
		t.Fatal(err)
	}
	s, _ := getString(r, 0, 0)
	return s
}

// streamFrom returns an opened source streaming db.t from gtid.
func streamFrom(t *testing.T, m *harness.MariaDB, table, gtid string, from pipeline.Position, tweak func(*Options)) *Source {
	return testSource(t, m, from, func(o *Options) {
		o.Tables = []string{table}
		o.Snapshot.Mode = SnapshotNever
		o.StartGTID = gtid
		if tweak != nil {
			tweak(o)
		}
	})
}

func TestConformance(t *testing.T) {
	m := server(t)
	c := rootConn(t, m, "")
	mustExec(t, c, "CREATE DATABASE conf", "CREATE TABLE conf.t (id int PRIMARY KEY, v varchar(20))")
	start := gtidNow(t, c)
	opts := func(o *Options) {
		o.Tables, o.Snapshot.Mode, o.StartGTID = []string{"conf.t"}, SnapshotNever, start
		o.DSN = fmt.Sprintf("mysql://root@%s:%d", m.Host, m.Port)
		o.HeartbeatInterval = time.Second
	}
	newSource := func(t *testing.T) pipeline.Source {
		o := Options{Pipeline: "conformance"}
		opts(&o)
		s, err := New(o, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	sourcetest.Run(t, sourcetest.Config{
		New: newSource,
		Drive: func(t *testing.T) {
			for i := 0; i < 60; i++ {
				mustExec(t, c, "BEGIN",
					fmt.Sprintf("INSERT INTO conf.t VALUES (%d, 'a%d')", i, i),
					fmt.Sprintf("UPDATE conf.t SET v = 'b%d' WHERE id = %d", i, i/2),
					"COMMIT")
				if i%7 == 0 {
					mustExec(t, c, fmt.Sprintf("DELETE FROM conf.t WHERE id = %d", i/3))
				}
			}
		},
		Records:     100,
		ExactResume: true,
		Blocking: func(t *testing.T) pipeline.Source {
			o := Options{Pipeline: "conformance-idle"}
			opts(&o)
			o.StartGTID = gtidNow(t, c)
			s, err := New(o, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
	})
}

// bigInsert inserts rows [from, to) of db.big in one transaction, with a
// value of pad bytes.
func bigInsert(t *testing.T, c *client.Conn, table string, from, to int) {
	bigInsertPad(t, c, table, from, to, 0)
}

func bigInsertPad(t *testing.T, c *client.Conn, table string, from, to, pad int) {
	t.Helper()
	mustExec(t, c, "BEGIN")
	for i := from; i < to; i += 1000 {
		q := "INSERT INTO " + table + " VALUES "
		for j := i; j < min(i+1000, to); j++ {
			if j > i {
				q += ","
			}
			q += fmt.Sprintf("(%d, 'row %d%s')", j, j, strings.Repeat("x", pad))
		}
		mustExec(t, c, q)
	}
	mustExec(t, c, "COMMIT")
}

// A crash between BEGIN and the commit of a large transaction (after some
// of its chunks were handed over) restarts from the checkpoint before it:
// the whole transaction arrives again, each row once, with the same
// versions, and only its last chunk carries a position.
func TestLargeTransactionAfterCrash(t *testing.T) {
	m := server(t)
	c := rootConn(t, m, "")
	mustExec(t, c, "CREATE DATABASE crash", "CREATE TABLE crash.big (id int PRIMARY KEY, v varchar(20))",
		"INSERT INTO crash.big VALUES (-1, 'before')")
	start := gtidNow(t, c)
	mustExec(t, c, "INSERT INTO crash.big VALUES (-2, 'checkpoint')")
	bigInsert(t, c, "crash.big", 0, 10000)

	first := streamFrom(t, m, "crash.big", start, nil, nil)
	recs, ckpt := readRecords(t, first, 1)
	if len(recs) != 1 || ckpt == nil {
		t.Fatalf("first transaction: %d records, position %s", len(recs), ckpt)
	}
	b, err := first.Read(ctx) // a chunk of the big transaction, no position
	if err != nil || b.Pos != nil || len(b.Records) < txChunk {
		t.Fatalf("chunk: %d records, pos %s, err %v", len(b.Records), b.Pos, err)
	}
	_ = first.Close(ctx) // the crash: nothing acknowledged past ckpt

	again := testSource(t, m, ckpt, func(o *Options) { o.Tables = []string{"crash.big"} })
	recs, last := readRecords(t, again, 10000)
	seen := map[pipeline.Version]bool{}
	for _, r := range recs {
		if seen[r.Version] {
			t.Fatalf("version %s twice", r.Version)
		}
		seen[r.Version] = true
	}
	if len(recs) != 10000 || last == nil {
		t.Fatalf("after the restart: %d records, position %s", len(recs), last)
	}
	for i, r := range recs {
		if r.Version[3] != uint64(rowBase+i) || r.After[0] != int64(i) {
			t.Fatalf("record %d: version %s, id %v", i, r.Version, r.After[0])
		}
	}
}

// A connection cut in the middle of a large transaction reconnects from
// the last whole transaction; rows already handed over are not handed over
// again.
func TestConnectionCutMidTransaction(t *testing.T) {
	m := server(t)
	c := rootConn(t, m, "")
	mustExec(t, c, "CREATE DATABASE cut", "CREATE TABLE cut.big (id int PRIMARY KEY, v varchar(200))")
	start := gtidNow(t, c)
	// Far more than the source buffers and the sockets hold, so the cut
	// falls inside the transaction.
	const rows = 150000
	bigInsertPad(t, c, "cut.big", 0, rows, 150)
	proxy := harness.ProxyT(t, net.JoinHostPort(m.Host, strconv.Itoa(m.Port)))
	s := testSource(t, m, nil, func(o *Options) {
		o.DSN = "mysql://root@" + proxy.Addr()
		o.Tables, o.Snapshot.Mode, o.StartGTID = []string{"cut.big"}, SnapshotNever, start
	})
	b, err := s.Read(ctx)
	if err != nil || b.Pos != nil {
		t.Fatalf("first chunk: pos %s, err %v", b.Pos, err)
	}
	got := append([]pipeline.Record(nil), b.Records...)
	proxy.Cut()
	time.AfterFunc(500*time.Millisecond, proxy.Restore)
	rest, last := readRecords(t, s, rows-len(got))
	got = append(got, rest...)
	if len(got) != rows || last == nil {
		t.Fatalf("%d records, position %s", len(got), last)
	}
	for i, r := range got {
		if r.Version[3] != uint64(rowBase+i) {
			t.Fatalf("record %d has row index %d: a row was lost or repeated", i, r.Version[3]-rowBase)
		}
	}
	if reconnects := testutilCounter(s.m.reconnects); reconnects < 1 {
		t.Fatalf("no reconnect counted")
	}
}

// dumpThreads lists the ids of the server's binlog dump threads.
func dumpThreads(t *testing.T, c *client.Conn) map[int64]bool {
	t.Helper()
	r, err := c.Execute("SELECT id FROM information_schema.processlist WHERE command LIKE 'Binlog Dump%'")
	if err != nil {
		t.Fatal(err)
	}
	ids := map[int64]bool{}
	for i := range r.RowNumber() {
		id, err := r.GetInt(i, 0)
		if err != nil {
			t.Fatal(err)
		}
		ids[id] = true
	}
	return ids
}

// A binlog session that ends opens no connection on its way out: go-mysql
// would KILL the session's thread id through a new connection to the same
// address, which behind a proxy or VIP after a failover reaches another
// server, where the id names an unrelated session. Closing the socket is
// what ends the dump thread.
func TestClosedSessionOpensNoConnection(t *testing.T) {
	m := server(t)
	c := rootConn(t, m, "")
	mustExec(t, c, "DROP DATABASE IF EXISTS quiet", "CREATE DATABASE quiet", "CREATE TABLE quiet.t (id int PRIMARY KEY)")
	start := gtidNow(t, c)
	mustExec(t, c, "INSERT INTO quiet.t VALUES (1), (2), (3)")
	others := dumpThreads(t, c)
	proxy := harness.ProxyT(t, net.JoinHostPort(m.Host, strconv.Itoa(m.Port)))
	s := streamFrom(t, m, "quiet.t", start, nil, func(o *Options) { o.DSN = "mysql://root@" + proxy.Addr() })
	readRecords(t, s, 3)
	ours := map[int64]bool{}
	for id := range dumpThreads(t, c) {
		if !others[id] {
			ours[id] = true
		}
	}
	if len(ours) != 1 {
		t.Fatalf("%d new binlog dump threads on the server, want the session's one", len(ours))
	}
	dials := proxy.Accepted()
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// Close waits for the session to end, so a connection opened on the
	// way out has been accepted by now.
	if n := proxy.Accepted() - dials; n != 0 {
		t.Fatalf("closing the source opened %d connection(s) to the server", n)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		left := 0
		for id := range dumpThreads(t, c) {
			if ours[id] {
				left++
			}
		}
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the session's binlog dump thread still runs 30s after the source closed")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Columns added and dropped mid-stream: a replay from a checkpoint older
// than both changes decodes each event with the columns of its own time,
// and each shape is a new generation of the table.
func TestSchemaChangesReplay(t *testing.T) {
	m := server(t)
	c := rootConn(t, m, "")
	mustExec(t, c, "CREATE DATABASE ddl", "CREATE TABLE ddl.t (id int PRIMARY KEY, a varchar(10))")
	start := gtidNow(t, c)
	mustExec(t, c, "INSERT INTO ddl.t VALUES (1, 'one')",
		"ALTER TABLE ddl.t ADD COLUMN b int NOT NULL DEFAULT 7",
		"INSERT INTO ddl.t VALUES (2, 'two', 2)",
		"ALTER TABLE ddl.t DROP COLUMN a",
		"INSERT INTO ddl.t VALUES (3, 3)",
		"TRUNCATE TABLE ddl.t",
		"INSERT INTO ddl.t VALUES (4, 4)")
	check := func(recs []pipeline.Record) {
		t.Helper()
		var names [][]string
		var gens []int
		for _, r := range recs {
			var cols []string
			for _, col := range r.Table.Columns {
				cols = append(cols, col.Name)
			}
			names = append(names, cols)
			gens = append(gens, r.Table.Generation)
		}
		want := fmt.Sprint([][]string{{"id", "a"}, {"id", "a", "b"}, {"id", "b"}, {"id", "b"}, {"id", "b"}})
		if fmt.Sprint(names) != want || recs[3].Op != pipeline.OpTruncate {
			t.Fatalf("shapes %v (want %s), ops %v", names, want, recs[3].Op)
		}
		if !(gens[0] < gens[1] && gens[1] < gens[2] && gens[2] == gens[4]) {
			t.Fatalf("generations %v", gens)
		}
		if recs[1].After[2] != int64(2) || recs[2].After[1] != int64(3) {
			t.Fatalf("values %v %v", recs[1].After, recs[2].After)
		}
	}
	s := streamFrom(t, m, "ddl.t", start, nil, nil)
	recs, _ := readRecords(t, s, 4)
	check(recs)
	if n := testutilCounter(s.m.ddl); n != 3 {
		t.Fatalf("ddl_total = %v, want 3", n)
	}
	_ = s.Close(ctx)
	// Replay from the oldest checkpoint with today's schema in the catalog.
	replay := testSource(t, m, Position{Flavor: FlavorMariaDB, GTID: start, Server: "server_id=1"}.Encode(),
		func(o *Options) { o.Tables = []string{"ddl.t"} })
	recs, _ = readRecords(t, replay, 4)
	check(recs)
}

// A statement the source cannot read that names a captured table stops
// the pipeline with the statement and the position, unless the table is
// listed as ignorable.
func TestUnreadableDDL(t *testing.T) {
	d := &decoder{captured: []tableName{{db: "shop", table: "t"}}, log: nopLogger(), file: "mysql-bin.000007"}
	err := d.statement("FROBNICATE TABLE t WITH zeal", "shop", &replicationHeader{LogPos: 1234})
	var de *DDLError
	if !errors.As(err, &de) || !pipeline.IsFatal(err) || de.Position != "mysql-bin.000007:1234" ||
		de.Statement != "FROBNICATE TABLE t WITH zeal" {
		t.Fatalf("err = %v", err)
	}
	if err := d.statement("FROBNICATE TABLE other", "shop", &replicationHeader{LogPos: 1}); err != nil {
		t.Fatalf("a statement about another table stopped the source: %v", err)
	}
	d.ignoreDDL = func(db, table string) bool { return db == "shop" && table == "t" }
	if err := d.statement("FROBNICATE TABLE t", "shop", &replicationHeader{LogPos: 1}); err != nil {
		t.Fatalf("ignorable table: %v", err)
	}
}

// A checkpoint whose binlog was purged is reported at start with what to
// do, never skipped.
func TestPurgedBinlog(t *testing.T) {
	m := harness.MariaDBT(t)
	c := rootConn(t, m, "")
	mustExec(t, c, "CREATE DATABASE p", "CREATE TABLE p.t (id int PRIMARY KEY)", "INSERT INTO p.t VALUES (1)")
	old := gtidNow(t, c)
	mustExec(t, c, "INSERT INTO p.t VALUES (2)", "FLUSH BINARY LOGS", "INSERT INTO p.t VALUES (3)", "FLUSH BINARY LOGS")
	r, err := c.Execute("SHOW BINARY LOGS")
	if err != nil {
		t.Fatal(err)
	}
	last, _ := getString(r, len(r.Values)-1, 0)
	// The server purges a file only once its binlog checkpoint has moved
	// past it, which happens in the background: purge until it is gone.
	deadline := time.Now().Add(30 * time.Second)
	for {
		mustExec(t, c, "PURGE BINARY LOGS TO '"+last+"'")
		r, err := c.Execute("SHOW BINARY LOGS")
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Values) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d binlog files left after PURGE", len(r.Values))
		}
		time.Sleep(100 * time.Millisecond)
	}
	o := Options{Pipeline: "purged", DSN: fmt.Sprintf("mysql://root@%s:%d", m.Host, m.Port), Tables: []string{"p.t"}}
	s, err := New(o, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = s.Open(ctx, Position{Flavor: FlavorMariaDB, GTID: old, Server: "server_id=1"}.Encode())
	if !errors.Is(err, errPurged) || !contains(err.Error(), "--reset-offsets", old) {
		t.Fatalf("open from a purged checkpoint: %v", err)
	}
	_ = s.Close(context.Background())
}

// Another pipeline's binlog connection with the same server id is a clash;
// the pipeline's own earlier connection (left behind by a crash) is not.
func TestServerIDClash(t *testing.T) {
	m := server(t)
	c := rootConn(t, m, "")
	mustExec(t, c, "CREATE DATABASE clash", "CREATE TABLE clash.t (id int PRIMARY KEY)")
	start := gtidNow(t, c)
	first := streamFrom(t, m, "clash.t", start, nil, func(o *Options) { o.ServerID = 777001 })
	mustExec(t, c, "INSERT INTO clash.t VALUES (1)")
	readRecords(t, first, 1) // the binlog connection is up and registered
	// The same pipeline again while the first connection is still there.
	again := streamFrom(t, m, "clash.t", start, nil, func(o *Options) { o.ServerID = 777001 })
	readRecords(t, again, 1)
	o := Options{Pipeline: "another", DSN: fmt.Sprintf("mysql://root@%s:%d", m.Host, m.Port), Tables: []string{"clash.t"},
		ServerID: 777001, Snapshot: SnapshotOptions{Mode: SnapshotNever}}
	s, err := New(o, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = s.Open(ctx, nil)
	var pe *PreflightError
	if !errors.As(err, &pe) || !contains(err.Error(), "server_id 777001", "already used by a connected replica") {
		t.Fatalf("another pipeline with the same server id: %v", err)
	}
}

// Under zero_dates: dead_letter a change holding a zero date goes to the
// dead-letter queue with its row and the reason (Invariant 7); the
// snapshot's and the stream's other changes arrive.
func TestZeroDateDeadLetters(t *testing.T) {
	m := server(t)
	c := rootConn(t, m, "")
	mustExec(t, c, "CREATE DATABASE zd", "CREATE TABLE zd.t (id int PRIMARY KEY, d DATE)",
		"INSERT INTO zd.t VALUES (1, '0000-00-00'), (2, '2024-05-06')")
	s := testSource(t, m, nil, func(o *Options) { o.Tables = []string{"zd.t"}; o.ZeroDates = ZeroDatesDeadLetter })
	var recs []pipeline.Record
	var dead []pipeline.DeadLetter
	read := func(data, letters int) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for countData(recs) < data || len(dead) < letters {
			if time.Now().After(deadline) {
				t.Fatalf("%d records and %d letters, want %d and %d", countData(recs), len(dead), data, letters)
			}
			b, err := s.Read(ctx)
			if err != nil {
				t.Fatal(err)
			}
			recs, dead = append(recs, b.Records...), append(dead, b.Dead...)
		}
	}
	read(1, 1)
	mustExec(t, c, "INSERT INTO zd.t VALUES (3, '0000-00-00'), (4, '2024-05-07')")
	read(2, 2)
	for i, l := range dead {
		if l.Stage != "source" || l.Table != "zd.t" || !strings.Contains(l.Error, "zero date") || !strings.Contains(string(l.Raw), "0000-00-00") {
			t.Errorf("letter %d: %+v raw %s", i, l, l.Raw)
		}
	}
	if l := dead[1]; l.Position == nil || l.Op != "c" {
		t.Errorf("stream letter without its position or op: %+v", l)
	}
	if got := dataOnly(recs); got[0].After[0] != int64(2) || got[1].After[0] != int64(4) {
		t.Errorf("delivered %v and %v", got[0].After, got[1].After)
	}
}

// MariaDB's compressed binlog (log_bin_compress) writes rows events of
// other types (Write/Update/Delete_rows_compressed_v1); each change
// arrives once, with its values, as from the plain events.
func TestCompressedBinlogEvents(t *testing.T) {
	m := server(t)
	c := rootConn(t, m, "")
	mustExec(t, c, "CREATE DATABASE cz", "CREATE TABLE cz.t (id int PRIMARY KEY, v text, n int)",
		"SET GLOBAL log_bin_compress = ON", "SET GLOBAL log_bin_compress_min_len = 10")
	t.Cleanup(func() { mustExec(t, c, "SET GLOBAL log_bin_compress = OFF") })
	w := rootConn(t, m, "") // the setting applies to sessions opened after it
	s := streamFrom(t, m, "cz.t", gtidNow(t, w), nil, nil)
	const n = 40
	for i := 0; i < n; i++ {
		mustExec(t, w, "BEGIN",
			fmt.Sprintf("INSERT INTO cz.t VALUES (%d, '%s', %d)", i, strings.Repeat("y", 100+i), i),
			fmt.Sprintf("UPDATE cz.t SET n = n + 1000 WHERE id = %d", i/2),
			"COMMIT")
	}
	mustExec(t, w, "DELETE FROM cz.t WHERE id < 10")
	recs, _ := readRecords(t, s, 2*n+10)
	got := map[int64]int64{} // id → n as the changes leave it
	for _, r := range dataOnly(recs) {
		switch r.Op {
		case pipeline.OpInsert:
			id := r.After[0].(int64)
			if v := r.After[1].(string); v != strings.Repeat("y", 100+int(id)) {
				t.Fatalf("insert of %d: v = %q", id, v)
			}
			got[id] = r.After[2].(int64)
		case pipeline.OpUpdate:
			got[r.After[0].(int64)] = r.After[2].(int64)
		case pipeline.OpDelete:
			delete(got, r.Before[0].(int64))
		}
	}
	want := map[int64]int64{}
	for i := 0; i < n; i++ {
		want[int64(i)] = int64(i)
	}
	for i := 0; i < n; i++ {
		want[int64(i/2)] += 1000
	}
	for i := 0; i < 10; i++ {
		delete(want, int64(i))
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("rows after the changes:\n got %v\nwant %v", got, want)
	}
	st, err := w.Execute("SHOW MASTER STATUS")
	if err != nil {
		t.Fatal(err)
	}
	file, _ := st.GetString(0, 0)
	evs, err := w.Execute("SHOW BINLOG EVENTS IN '" + file + "'")
	if err != nil {
		t.Fatal(err)
	}
	compressed := 0
	for i := range evs.Values {
		if kind, _ := evs.GetString(i, 2); strings.HasSuffix(kind, "_compressed_v1") {
			compressed++
		}
	}
	if compressed < 2*n+1 {
		t.Fatalf("the server wrote %d compressed rows events, want %d", compressed, 2*n+1)
	}
}

// A session writing binlog_row_image=MINIMAL or NOBLOB logs partial row
// images: an update stays an update of its key with the columns it did
// not set Unchanged (not a delete and an insert of a key it lacks), an
// insert that left columns out carries them Unchanged, marked Refetch so
// the engine reads the row again, and one that left its key out (set by
// the column's DEFAULT) becomes a read of the whole table (Invariant 13).
func TestPartialRowImages(t *testing.T) {
	m := server(t)
	c := rootConn(t, m, "")
	mustExec(t, c, "CREATE DATABASE cm",
		"CREATE TABLE cm.t (id int PRIMARY KEY, v varchar(10) DEFAULT 'dflt', n int DEFAULT 7, b blob)",
		"CREATE TABLE cm.k (id int DEFAULT 5 PRIMARY KEY, v int)")
	s := testSource(t, m, nil, func(o *Options) {
		o.Tables, o.Snapshot.Mode, o.StartGTID = []string{"cm.t", "cm.k"}, SnapshotNever, gtidNow(t, c)
	})
	mustExec(t, c, "SET SESSION binlog_row_image = 'MINIMAL'",
		"INSERT INTO cm.t (id) VALUES (1)",
		"INSERT INTO cm.t VALUES (2, 'x', 2, 'bb')",
		"UPDATE cm.t SET n = 8 WHERE id = 1",
		"UPDATE cm.t SET id = 3 WHERE id = 2",
		"DELETE FROM cm.t WHERE id = 1",
		"INSERT INTO cm.k (v) VALUES (1)",
		"UPDATE cm.k SET v = 2",
		"SET SESSION binlog_row_image = 'NOBLOB'",
		"UPDATE cm.t SET n = 9 WHERE id = 3")
	u := pipeline.UnchangedValue
	want := []string{
		fmt.Sprint(pipeline.OpInsert, []any(nil), []any{int64(1), u, u, u}, true),
		fmt.Sprint(pipeline.OpInsert, []any(nil), []any{int64(2), "x", int64(2), []byte("bb")}, false),
		fmt.Sprint(pipeline.OpUpdate, []any{int64(1), nil, nil, nil}, []any{int64(1), u, int64(8), u}, false),
		fmt.Sprint(pipeline.OpDelete, []any{int64(2), nil, nil, nil}, []any(nil), false),
		fmt.Sprint(pipeline.OpInsert, []any(nil), []any{int64(3), u, u, u}, true),
		fmt.Sprint(pipeline.OpDelete, []any{int64(1), nil, nil, nil}, []any(nil), false),
		fmt.Sprint(pipeline.OpRewrite, "cm.k"),
		fmt.Sprint(pipeline.OpUpdate, []any{int64(5), nil}, []any{int64(5), int64(2)}, false),
		fmt.Sprint(pipeline.OpUpdate, []any{int64(3), "x", int64(2), nil}, []any{int64(3), "x", int64(9), u}, false),
	}
	recs, _ := readRecords(t, s, len(want)-1)
	var got []string
	for _, r := range recs {
		switch {
		case r.Op == pipeline.OpRewrite:
			got = append(got, fmt.Sprint(r.Op, r.Table.ID.Schema+"."+r.Table.ID.Table))
		case r.Op.IsData():
			got = append(got, fmt.Sprint(r.Op, r.Before, r.After, r.Refetch))
		}
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("changes:\n got %s\nwant %s", strings.Join(got, "\n     "), strings.Join(want, "\n     "))
	}
}

// A session writing binlog_format=STATEMENT logs its row changes as
// statements, whose rows the binlog does not carry: the source stops at
// the first one of a captured table, saying so and what to do, and hands
// over nothing after it (a change it cannot read is never skipped
// silently).
func TestRowChangeWrittenAsAStatement(t *testing.T) {
	m := server(t)
	c := rootConn(t, m, "")
	mustExec(t, c, "CREATE DATABASE cs", "CREATE TABLE cs.t (id int PRIMARY KEY, v int)")
	s := streamFrom(t, m, "cs.t", gtidNow(t, c), nil, nil)
	mustExec(t, c, "INSERT INTO cs.t VALUES (1, 1)",
		"SET SESSION binlog_format = 'STATEMENT'", "UPDATE cs.t SET v = 2 WHERE id = 1",
		"SET SESSION binlog_format = 'ROW'", "INSERT INTO cs.t VALUES (2, 2)")
	var got []pipeline.Record
	for {
		rctx, cancel := context.WithTimeout(ctx, time.Minute)
		b, err := s.Read(rctx)
		cancel()
		if err != nil {
			var de *DDLError
			if !errors.As(err, &de) || !pipeline.IsFatal(err) || !strings.Contains(err.Error(), "written as a statement") ||
				!strings.Contains(err.Error(), "binlog_format=ROW") || de.Statement != "UPDATE cs.t SET v = 2 WHERE id = 1" {
				t.Fatalf("err = %v", err)
			}
			break
		}
		got = append(got, dataOnly(b.Records)...)
	}
	if len(got) != 1 || got[0].Op != pipeline.OpInsert || got[0].After[0] != int64(1) {
		t.Fatalf("handed over before the stop: %v", got)
	}
}

// The binlog carries no row an InnoDB foreign-key cascade changes, but it
// carries those a trigger changes: the workaround preflight names
// (checkCascades) streams every child row the parent's delete removes. A
// cascading key added while the stream runs stops it, unless its table is
// in cascade_tables.
func TestCascadeDoneByATriggerIsStreamed(t *testing.T) {
	m := server(t)
	c := rootConn(t, m, "")
	mustExec(t, c, "CREATE DATABASE trg", "CREATE TABLE trg.p (id int PRIMARY KEY)",
		"CREATE TABLE trg.c (id int PRIMARY KEY, p int, FOREIGN KEY (p) REFERENCES trg.p (id) ON DELETE CASCADE)",
		"CREATE TABLE trg.d (id int PRIMARY KEY, p int, FOREIGN KEY (p) REFERENCES trg.p (id))",
		"CREATE TRIGGER trg.p_del BEFORE DELETE ON trg.p FOR EACH ROW DELETE FROM trg.d WHERE p = OLD.id",
		"INSERT INTO trg.p VALUES (1), (2)", "INSERT INTO trg.c VALUES (10, 1), (11, 1)", "INSERT INTO trg.d VALUES (20, 1), (21, 1), (22, 2)")
	s := testSource(t, m, nil, func(o *Options) {
		o.Tables, o.Snapshot.Mode, o.StartGTID = []string{"trg.p", "trg.c", "trg.d"}, SnapshotNever, gtidNow(t, c)
		o.CascadeTables = []string{"trg.c"}
	})
	mustExec(t, c, "DELETE FROM trg.p WHERE id = 1", "INSERT INTO trg.p VALUES (3)")
	recs, _ := readRecords(t, s, 4)
	var got []string
	for _, r := range dataOnly(recs) {
		got = append(got, fmt.Sprint(r.Table.ID.Table, r.Op, r.Key()))
	}
	// The cascade's deletes of c 10 and 11 are not in the binlog; the
	// trigger's of d 20 and 21 are, before the parent's own.
	want := fmt.Sprint([]string{fmt.Sprint("d", pipeline.OpDelete, []any{int64(20)}), fmt.Sprint("d", pipeline.OpDelete, []any{int64(21)}),
		fmt.Sprint("p", pipeline.OpDelete, []any{int64(1)}), fmt.Sprint("p", pipeline.OpInsert, []any{int64(3)})})
	if fmt.Sprint(got) != want {
		t.Fatalf("changes:\n got %v\nwant %v", got, want)
	}

	// A cascade added while the stream runs: accepted for c (listed in
	// cascade_tables), the stream's stop for d, naming the statement.
	mustExec(t, c, "CREATE TABLE trg.p2 (id int PRIMARY KEY)", "INSERT INTO trg.p2 VALUES (2)",
		"ALTER TABLE trg.c ADD CONSTRAINT c_p2 FOREIGN KEY (p) REFERENCES trg.p2 (id) ON UPDATE SET NULL",
		"ALTER TABLE trg.d ADD CONSTRAINT d_p2 FOREIGN KEY (p) REFERENCES trg.p2 (id) /* no action */ ON DELETE CASCADE")
	for {
		rctx, cancel := context.WithTimeout(ctx, time.Minute)
		_, err := s.Read(rctx)
		cancel()
		if err == nil {
			continue
		}
		var de *DDLError
		if !errors.As(err, &de) || !pipeline.IsFatal(err) || !strings.Contains(de.Statement, "d_p2") ||
			!strings.Contains(err.Error(), "captured table trg.d a foreign key with a cascading action") || !strings.Contains(err.Error(), "cascade_tables") {
			t.Fatalf("err = %v", err)
		}
		break
	}
}
