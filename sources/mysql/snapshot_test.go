package mysql

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/go-mysql-org/go-mysql/client"
	gomysql "github.com/go-mysql-org/go-mysql/mysql"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/snapshot/snaptest"
)

// replica folds records the way an idempotent sink does (Invariant 4):
// per key, only a newer version changes anything; deletes leave
// tombstones; a truncate removes every row with a lower version.
type replica struct {
	rows map[string]row
}

type row struct {
	v       pipeline.Version
	val     string
	deleted bool
}

func (r *replica) apply(recs []pipeline.Record) {
	if r.rows == nil {
		r.rows = map[string]row{}
	}
	for i := range recs {
		rec := &recs[i]
		switch rec.Op {
		case pipeline.OpTruncate:
			for k, x := range r.rows {
				if x.v.Less(rec.Version) {
					delete(r.rows, k)
				}
			}
			continue
		case pipeline.OpHeartbeat:
			continue
		}
		k := fmt.Sprint(rec.Key()...)
		if old, ok := r.rows[k]; ok && !old.v.Less(rec.Version) {
			continue
		}
		if rec.Op == pipeline.OpDelete {
			r.rows[k] = row{v: rec.Version, deleted: true}
			continue
		}
		r.rows[k] = row{v: rec.Version, val: fmt.Sprint(rec.After[1:]...)}
	}
}

func (r *replica) live() map[string]string {
	out := map[string]string{}
	for k, x := range r.rows {
		if !x.deleted {
			out[k] = x.val
		}
	}
	return out
}

// selectAll reads the table as the record model has it: key → other
// columns, through the snapshot's own converter.
func selectAll(t *testing.T, s *Source, c *client.Conn, db, table string) map[string]string {
	t.Helper()
	descs, err := catalogDescs(c, db, table)
	if err != nil {
		t.Fatal(err)
	}
	r, err := c.Execute("SELECT * FROM " + quoteIdent(db) + "." + quoteIdent(table))
	if err != nil {
		t.Fatal(err)
	}
	conv := converter{zeroNull: true, charsets: s.cs}
	out := map[string]string{}
	for i := range r.Values {
		vals := make([]any, len(descs))
		for j := range descs {
			// The text protocol: integers arrive as text, so parse them
			// through the binary path's types.
			v := fieldValue(r.Values[i][j])
			if b, ok := v.([]byte); ok && signable(descs[j].kind) && descs[j].kind != gomysql.MYSQL_TYPE_NEWDECIMAL && descs[j].kind != gomysql.MYSQL_TYPE_FLOAT && descs[j].kind != gomysql.MYSQL_TYPE_DOUBLE {
				var u uint64
				var n int64
				if descs[j].unsigned {
					fmt.Sscan(string(b), &u)
					v = u
				} else {
					fmt.Sscan(string(b), &n)
					v = n
				}
			}
			x, err := conv.value(&descs[j], v, false)
			if err != nil {
				t.Fatal(err)
			}
			vals[j] = x
		}
		out[fmt.Sprint(vals[0])] = fmt.Sprint(vals[1:]...)
	}
	return out
}

func sameRows(t *testing.T, got, want map[string]string) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%d rows, want %d", len(got), len(want))
	}
	n := 0
	for k, w := range want {
		if g, ok := got[k]; !ok || g != w {
			if n++; n <= 5 {
				t.Errorf("key %s: got %q (present %v), want %q", k, g, ok, w)
			}
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			if n++; n <= 5 {
				t.Errorf("key %s should not be there", k)
			}
		}
	}
}

// BIGINT UNSIGNED keys above 2^63 split into ranges (their boundaries go
// back to the server as unsigned parameters) and streamed: snapshot and
// stream agree with a SELECT.
func TestSnapshotUnsignedKeysAboveInt64(t *testing.T) {
	m := server(t)
	c := rootConn(t, m, "")
	mustExec(t, c, "CREATE DATABASE u", "CREATE TABLE u.t (id BIGINT UNSIGNED PRIMARY KEY, v int)")
	for i := 0; i < 50; i++ {
		mustExec(t, c, fmt.Sprintf("INSERT INTO u.t VALUES (%d, %d), (%d, %d)", uint64(1)<<63-25+uint64(i), i, ^uint64(0)-uint64(i), -i))
	}
	s := testSource(t, m, nil, func(o *Options) { o.Tables = []string{"u.t"}; o.Snapshot.ChunkRows = 7; o.Snapshot.Parallel = 3 })
	var rep replica
	recs, _ := readRecords(t, s, 100)
	rep.apply(recs)
	if n := countData(recs); n != 100 {
		t.Fatalf("snapshot read %d rows, want 100 (a range boundary lost or repeated rows)", n)
	}
	mustExec(t, c, fmt.Sprintf("UPDATE u.t SET v = 1000 WHERE id = %d", ^uint64(0)), fmt.Sprintf("DELETE FROM u.t WHERE id = %d", uint64(1)<<63),
		fmt.Sprintf("INSERT INTO u.t VALUES (%d, 7)", uint64(1)<<63+1000),
		fmt.Sprintf("UPDATE u.t SET id = 5 WHERE id = %d", ^uint64(0)-1))
	recs, _ = readRecords(t, s, 5)
	rep.apply(recs)
	// A key change is the old key's delete and the new key's insert.
	if ops := fmt.Sprint(recs[len(recs)-2].Op, recs[len(recs)-1].Op); ops != "d c" {
		t.Fatalf("key change arrived as %s", ops)
	}
	sameRows(t, rep.live(), selectAll(t, s, c, "u", "t"))
}

// Writes that run while the initial load reads all arrive: the sink
// state equals the table at the end.
func TestSnapshotWithConcurrentWrites(t *testing.T) {
	rctx := readCtx(t)
	m := server(t)
	c := rootConn(t, m, "")
	mustExec(t, c, "CREATE DATABASE cw", "CREATE TABLE cw.t (id int PRIMARY KEY, v varchar(40))")
	bigInsert(t, c, "cw.t", 0, 20000)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var writes int
	wg.Add(1)
	go func() {
		defer wg.Done()
		w := rootConn(t, m, "cw")
		rng := rand.New(rand.NewPCG(7, 8))
		for {
			select {
			case <-stop:
				return
			default:
			}
			id := rng.IntN(25000)
			var q string
			switch rng.IntN(3) {
			case 0:
				q = fmt.Sprintf("INSERT INTO t VALUES (%d, 'new %d') ON DUPLICATE KEY UPDATE v = 'dup %d'", id, writes, writes)
			case 1:
				q = fmt.Sprintf("UPDATE t SET v = 'upd %d' WHERE id = %d", writes, id)
			default:
				q = fmt.Sprintf("DELETE FROM t WHERE id = %d", id)
			}
			if _, err := w.Execute(q); err != nil {
				t.Error(err)
				return
			}
			writes++
		}
	}()
	s := testSource(t, m, nil, func(o *Options) { o.Tables = []string{"cw.t"}; o.Snapshot.ChunkRows = 1000; o.Snapshot.Parallel = 2 })
	var rep replica
	for s.Status().Phase == "snapshot" {
		b, err := s.Read(rctx)
		if err != nil {
			t.Fatal(err)
		}
		rep.apply(b.Records)
	}
	close(stop)
	wg.Wait()
	if writes == 0 {
		t.Fatal("no write ran during the load")
	}
	end := seqOf(t, gtidNow(t, c))
	// Read until the stream passes the last write (a batch may merge it
	// with later transactions: its position is then past end).
	for {
		b, err := s.Read(rctx)
		if err != nil {
			t.Fatal(err)
		}
		rep.apply(b.Records)
		if b.Pos != nil {
			p, err := ParsePosition(b.Pos)
			if err != nil {
				t.Fatal(err)
			}
			if seqOf(t, p.GTID) >= end {
				break
			}
		}
	}
	t.Logf("%d writes ran during and after the load", writes)
	sameRows(t, rep.live(), selectAll(t, s, c, "cw", "t"))
}

// The load queues each key range as soon as the walk of the key finds its
// upper boundary, the rest of a table one range (its tail) whose lower end
// follows the walk. After every batch, the load state a checkpoint would
// record — the ranges a restart reads — plus the rows handed over so far
// are the whole table, each row exactly once, also while the walk is under
// way (asserted to have been seen); every range ends at a ChunkRows-th row.
func TestInitialLoadStateCoversTheTableWhileWalking(t *testing.T) {
	rctx := readCtx(t)
	m := server(t)
	c := rootConn(t, m, "")
	const rows, chunk = 30000, 50
	numberedRows(t, c, "walk", rows)
	s := testSource(t, m, nil, func(o *Options) { o.Tables = []string{"walk.t"}; o.Snapshot.ChunkRows = chunk; o.Snapshot.Parallel = 2 })
	w := snaptest.NewLoadWatch(rows, chunk, func(cur []byte) int {
		if cur == nil {
			return -1
		}
		k, err := decodeCursor(cur, 1)
		if err != nil {
			t.Fatal(err)
		}
		return int(k[0].(int64))
	})
	for {
		b, err := s.Read(rctx)
		if err != nil {
			t.Fatal(err)
		}
		if b.Pos != nil {
			break // the load is over: the stream starts
		}
		st, ok := s.LoadState()
		w.After(t, b.Records, st, ok)
	}
	w.Done(t)
}

// A reader that fails stops the load's walk of the key: the error reaches
// Read while most of the table is still to be walked, not once the walk
// has split the whole table on a load that can no longer finish.
func TestInitialLoadReaderFailureStopsTheWalk(t *testing.T) {
	rctx := readCtx(t)
	m := server(t)
	c := rootConn(t, m, "")
	const rows, chunk = 60000, 4
	numberedRows(t, c, "walkfail", rows)
	s := testSource(t, m, nil, func(o *Options) {
		o.Tables = []string{"walkfail.t"}
		o.Snapshot.ChunkRows = chunk
		o.Snapshot.Parallel = 2
	})
	readUntilRows(t, rctx, s)
	for _, r := range s.load.readers {
		// The first reader's failure may already have ended the others.
		if _, err := c.Execute(fmt.Sprintf("KILL %d", r.c.GetConnectionID())); err != nil && !isNoSuchThread(err) {
			t.Fatal(err)
		}
	}
	var err error
	for err == nil {
		_, err = s.Read(rctx)
	}
	s.load.handedMu.Lock()
	ranges := len(s.load.tables[0].ranges)
	s.load.handedMu.Unlock()
	if ranges > rows/chunk/2 {
		t.Fatalf("the walk split the table into %d of its %d ranges after its readers failed (%v)", ranges, rows/chunk, err)
	}
	t.Logf("the load failed after %d of %d ranges were walked: %v", ranges, rows/chunk, err)
}

// A schema change issued while the initial load walks the key waits for
// the readers' metadata locks, and the walk's next statement waits behind
// it. Neither waits for good: the walk gives up after lockWaitSeconds,
// the load fails naming the lock wait, and its transactions end at once,
// so the ALTER completes while the source is still open.
func TestInitialLoadGivesWayToASchemaChange(t *testing.T) {
	watchOnlyTheLoadsOwnWaits(t)
	rctx := readCtx(t)
	m := server(t)
	c := rootConn(t, m, "")
	const rows = 60000
	numberedRows(t, c, "giveway", rows)
	s := testSource(t, m, nil, func(o *Options) {
		o.Tables = []string{"giveway.t"}
		o.Snapshot.ChunkRows = 4
		o.Snapshot.Parallel = 2
	})
	readUntilRows(t, rctx, s)
	altered := make(chan error, 1)
	w := rootConn(t, m, "")
	go func() {
		_, err := w.Execute("ALTER TABLE giveway.t ADD COLUMN n int")
		altered <- err
	}()
	done := false
	t.Cleanup(func() { // before w closes: the ALTER's connection is its own
		if !done {
			_, _ = c.Execute(fmt.Sprintf("KILL %d", w.GetConnectionID()))
			<-altered
		}
	})
	// Read on as the runtime does, until the load fails.
	var err error
	for err == nil {
		_, err = s.Read(rctx)
	}
	if rctx.Err() != nil {
		t.Fatalf("the load neither finished nor failed while an ALTER waited: %v", err)
	}
	if !strings.Contains(err.Error(), "Lock wait timeout") || !strings.Contains(err.Error(), "resumes the load") || !pipeline.IsRestart(err) {
		t.Fatalf("the load failed with %v, want the lock wait and the way on, marked for a restart", err)
	}
	select {
	case aerr := <-altered:
		done = true
		if aerr != nil {
			t.Fatalf("ALTER: %v", aerr)
		}
	case <-rctx.Done():
		t.Fatal("the ALTER still waits after the load failed: its transactions hold the table until the source closes")
	}
	t.Logf("the load gave way: %v", err)
}

func isNoSuchThread(err error) bool {
	var me *gomysql.MyError
	return errors.As(err, &me) && me.Code == gomysql.ER_NO_SUCH_THREAD
}

// readUntilRows reads until a batch hands over snapshot rows: a reader
// then holds the table's metadata lock.
func readUntilRows(t *testing.T, rctx context.Context, s *Source) {
	t.Helper()
	for read := false; !read; {
		b, err := s.Read(rctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range b.Records {
			read = read || r.Op == pipeline.OpRead
		}
	}
}

// numberedRows creates db.t (id int key, v varchar) afresh with rows rows
// numbered from 1.
func numberedRows(t *testing.T, c *client.Conn, db string, rows int) {
	t.Helper()
	mustExec(t, c, "DROP DATABASE IF EXISTS "+db, "CREATE DATABASE "+db, "CREATE TABLE "+db+".t (id int PRIMARY KEY, v varchar(20))",
		fmt.Sprintf("INSERT INTO %s.t SELECT seq, CONCAT('row ', seq) FROM %s.seq_1_to_%d", db, db, rows))
}
