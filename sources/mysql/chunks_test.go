package mysql

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"go.uber.org/zap/zaptest"

	"github.com/sluice-cdc/sluice/integration/harness"
	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/snapshot"
	"github.com/sluice-cdc/sluice/snapshot/snaptest"
)

// incremental returns a source of db's tables (no initial load) wrapped
// in the snapshot engine, opened; fresh snapshots every table at once.
// wrap, when set, wraps the source's reader; tweak, when set, changes the
// source's options.
func incremental(t *testing.T, m *harness.MariaDB, db string, fresh bool, wrap func(snapshot.Reader) snapshot.Reader,
	tweak func(*Options), tables ...string) (*Source, *snapshot.Engine) {
	t.Helper()
	o := Options{Pipeline: "p_" + db, DSN: fmt.Sprintf("mysql://root@%s:%d", m.Host, m.Port),
		HeartbeatInterval: time.Second, ReconnectInitial: 50 * time.Millisecond, ReconnectMax: time.Second,
		WatermarkTable: DefaultWatermarkTable}
	o.Snapshot.Mode = SnapshotNever
	ids := make([]pipeline.TableID, len(tables))
	for i, tb := range tables {
		o.Tables = append(o.Tables, db+"."+tb)
		ids[i] = pipeline.TableID{Database: db, Schema: db, Table: tb}
	}
	if tweak != nil {
		tweak(&o)
	}
	src, err := New(o, zaptest.NewLogger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	var rd snapshot.Reader = src.ChunkReader(8)
	if wrap != nil {
		rd = wrap(rd)
	}
	eng := snapshot.New(src, rd, snapshot.Options{Tables: ids, Fresh: fresh, Parallel: 4,
		ChunkRows: 64, MaxChunkRows: 256, ChunkTime: 20 * time.Millisecond, Log: zaptest.NewLogger(t)})
	if err := eng.Open(ctx, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eng.Close(context.Background()) })
	return src, eng
}

// pump reads batches into sink until done holds after a batch.
func pump(t *testing.T, eng *snapshot.Engine, sink *snaptest.MemSink, done func(b pipeline.Batch) bool) {
	t.Helper()
	rctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	for {
		b, err := eng.Read(rctx)
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		if len(b.Dead) > 0 {
			t.Fatalf("dead letters: %+v", b.Dead)
		}
		sink.Apply(b.Records)
		if b.Pos != nil {
			if err := eng.Ack(ctx, b.Pos); err != nil {
				t.Fatal(err)
			}
		}
		if done(b) {
			return
		}
	}
}

// loadEngine opens, from a checkpoint (nil: fresh), the snapshot engine
// over a source whose initial load reads db's tables with two readers,
// splitting them loadChunk rows at a time; the engine closes with the
// test.
func loadEngine(t *testing.T, m *harness.MariaDB, db string, loadChunk int, from pipeline.Position, tables ...string) (*Source, *snapshot.Engine) {
	t.Helper()
	o := Options{Pipeline: "p_" + db, DSN: fmt.Sprintf("mysql://root@%s:%d", m.Host, m.Port),
		HeartbeatInterval: time.Second, ReconnectInitial: 50 * time.Millisecond, ReconnectMax: time.Second, WatermarkTable: DefaultWatermarkTable,
		Snapshot: SnapshotOptions{Mode: SnapshotInitial, Parallel: 2, ChunkRows: loadChunk}}
	ids := make([]pipeline.TableID, len(tables))
	for i, tb := range tables {
		o.Tables = append(o.Tables, db+"."+tb)
		ids[i] = pipeline.TableID{Database: db, Schema: db, Table: tb}
	}
	src, err := New(o, zaptest.NewLogger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	eng := snapshot.New(src, src.ChunkReader(4), snapshot.Options{Tables: ids, Parallel: 2, ChunkRows: 64,
		MaxChunkRows: 256, ChunkTime: 20 * time.Millisecond, Log: zaptest.NewLogger(t)})
	if err := eng.Open(ctx, from); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eng.Close(context.Background()) })
	return src, eng
}

// pumpSnapshot reads until the engine snapshots no table, and returns
// the snapshot rows it read.
func pumpSnapshot(t *testing.T, eng *snapshot.Engine, sink *snaptest.MemSink) int {
	t.Helper()
	reads := 0
	pump(t, eng, sink, func(b pipeline.Batch) bool {
		for _, r := range b.Records {
			if r.Op == pipeline.OpRead {
				reads++
			}
		}
		return len(eng.Snapshotting()) == 0
	})
	return reads
}

// seqOf is the sequence number of a single-domain MariaDB GTID position.
func seqOf(t testing.TB, gtid string) uint64 {
	t.Helper()
	i := strings.LastIndexByte(gtid, '-')
	n, err := strconv.ParseUint(gtid[i+1:], 10, 64)
	if err != nil {
		t.Fatalf("gtid %q: %v", gtid, err)
	}
	return n
}

// catchUp reads until the stream passed everything committed so far.
func catchUp(t *testing.T, c *client.Conn, eng *snapshot.Engine, sink *snaptest.MemSink) {
	t.Helper()
	end := seqOf(t, gtidNow(t, c))
	pump(t, eng, sink, func(b pipeline.Batch) bool {
		if b.Pos == nil {
			return false
		}
		p, err := ParsePosition(snapshot.StreamPosition(b.Pos))
		if err != nil {
			t.Fatal(err)
		}
		return seqOf(t, p.GTID) >= end
	})
}

// tableRows reads a table whole through the reader, decoded as the stream
// decodes it, formatted like MemSink.Table.
func tableRows(t *testing.T, src *Source, db, table string) []string {
	t.Helper()
	ch, err := src.ChunkReader(1).Chunk(ctx, snapshot.Target{Table: pipeline.TableID{Database: db, Schema: db, Table: table}}, nil, nil, 1<<30, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(ch.Rows))
	for i, r := range ch.Rows {
		out[i] = fmt.Sprint(r)
	}
	sort.Strings(out)
	return out
}

// createItemsAndPairs creates database db with the tables writeRandomly
// writes: items, an int key, 6,000 rows; pairs, a composite key whose
// first column has two values and whose text column is case-insensitive
// and PAD SPACE, 3,000 rows. c is left using db.
func createItemsAndPairs(t *testing.T, c *client.Conn, db string) {
	t.Helper()
	mustExec(t, c, "CREATE DATABASE "+db, "USE "+db,
		"CREATE TABLE items (id bigint PRIMARY KEY, v varchar(20))",
		"CREATE TABLE pairs (a int, b varchar(20) COLLATE utf8mb4_general_ci, n bigint, PRIMARY KEY (a, b))")
	var items, pairs []string
	for g := range 6000 {
		items = append(items, fmt.Sprintf("(%d, 'v%d')", g, g))
		if g < 3000 {
			pairs = append(pairs, fmt.Sprintf("(%d, 'k%04d', %d)", 1+g%2, g, g))
		}
	}
	mustExec(t, c, "INSERT INTO items VALUES "+strings.Join(items, ","), "INSERT INTO pairs VALUES "+strings.Join(pairs, ","),
		"ANALYZE TABLE items, pairs")
}

// writeRandomly runs random transactions on items and pairs until stop:
// inserts, updates, deletes and primary-key updates, 1 to 3 statements
// each; pairs' text key is case-insensitive and PAD SPACE, and its key
// updates change only the case or the trailing spaces too.
func writeRandomly(m *harness.MariaDB, db string, seed uint64, stop *atomic.Bool, n *atomic.Int64) error {
	c, err := client.Connect(fmt.Sprintf("%s:%d", m.Host, m.Port), "root", "", db)
	if err != nil {
		return err
	}
	defer c.Close()
	rng := rand.New(rand.NewPCG(seed, 2))
	key := func() string { return fmt.Sprintf("k%04d", rng.IntN(3000)) }
	stmts := []func() string{
		func() string {
			return fmt.Sprintf("INSERT INTO items VALUES (%d, 'i%d') ON DUPLICATE KEY UPDATE v = VALUES(v)", rng.IntN(8000), rng.IntN(1e6))
		},
		func() string {
			return fmt.Sprintf("UPDATE items SET v = 'u%d' WHERE id = %d", rng.IntN(1e6), rng.IntN(8000))
		},
		func() string { return fmt.Sprintf("DELETE FROM items WHERE id = %d", rng.IntN(8000)) },
		func() string {
			return fmt.Sprintf("UPDATE items SET id = %d WHERE id = %d", 8000+rng.IntN(4000), rng.IntN(8000))
		},
		func() string {
			return fmt.Sprintf("INSERT INTO pairs VALUES (%d, '%s', %d) ON DUPLICATE KEY UPDATE n = VALUES(n)", 1+rng.IntN(2), key(), rng.IntN(1e6))
		},
		func() string { return fmt.Sprintf("DELETE FROM pairs WHERE a = %d AND b = '%s'", 1+rng.IntN(2), key()) },
		func() string {
			return fmt.Sprintf("UPDATE pairs SET a = 3 - a, b = 'm%04d' WHERE a = %d AND b = '%s'", rng.IntN(3000), 1+rng.IntN(2), key())
		},
		func() string {
			// The same key under the collation, spelled differently.
			k := key()
			return fmt.Sprintf("UPDATE pairs SET b = '%s' WHERE a = %d AND b = '%s'", strings.ToUpper(k)+strings.Repeat(" ", rng.IntN(2)), 1+rng.IntN(2), k)
		},
	}
	for !stop.Load() {
		if _, err := c.Execute("BEGIN"); err != nil {
			return err
		}
		ok := true
		for range 1 + rng.IntN(3) {
			if _, err := c.Execute(stmts[rng.IntN(len(stmts))]()); err != nil {
				ok = false // a key taken by another row, or a deadlock: try another
				break
			}
		}
		end := "ROLLBACK"
		if ok {
			end = "COMMIT"
		}
		if _, err := c.Execute(end); err != nil {
			return err
		}
		if ok {
			n.Add(1)
		}
	}
	return nil
}

// Against a real MariaDB, under two writers running random transactions
// (inserts, updates, deletes, key updates, case and trailing-space
// changes of a case-insensitive PAD SPACE key), the engine snapshots an
// int key table and a composite key whose first column has two values,
// with 4 windows over 4 ranges each and chunks of 64 to 256 rows; the
// version-guarded sink then equals both tables. Trials alternate between
// watermarks written to the watermark table and read-only watermarks
// (GTID positions) taken by a user who may write nothing.
func TestIncrementalSnapshotMariaDBUnderConcurrentWrites(t *testing.T) {
	m := server(t)
	for trial := range harness.Trials(2) {
		readOnly := trial%2 == 1
		t.Run(fmt.Sprintf("%d/read_only=%v", trial, readOnly), func(t *testing.T) {
			db := fmt.Sprintf("incw%d", trial)
			c := rootConn(t, m, "")
			createItemsAndPairs(t, c, db)
			var tweak func(*Options)
			if readOnly {
				user := "ro" + db
				mustExec(t, c, "CREATE USER "+user+"@'%' IDENTIFIED BY 'pw'",
					"GRANT SELECT, REPLICATION SLAVE, BINLOG MONITOR ON *.* TO "+user+"@'%'")
				tweak = func(o *Options) {
					o.DSN = fmt.Sprintf("mysql://%s:pw@%s:%d", user, m.Host, m.Port)
					o.ReadOnlySnapshot = true
				}
			}
			var stop atomic.Bool
			var txns atomic.Int64
			var wg sync.WaitGroup
			errs := make(chan error, 2)
			for w := range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs <- writeRandomly(m, db, uint64(trial*10+w), &stop, &txns)
				}()
			}
			t.Cleanup(func() { stop.Store(true) }) // a failed trial leaves no writer behind
			var wrap func(snapshot.Reader) snapshot.Reader
			if !readOnly {
				// Chunks cut at 2,000 bytes (about 30 of these rows),
				// before their row limit.
				wrap = func(rd snapshot.Reader) snapshot.Reader { return snaptest.ByteBound{Reader: rd, N: 2000} }
			}
			src, eng := incremental(t, m, db, true, wrap, tweak, "items", "pairs")
			sink := snaptest.NewMemSink()
			pump(t, eng, sink, func(pipeline.Batch) bool { return len(eng.Snapshotting()) == 0 })
			stop.Store(true)
			wg.Wait()
			for range 2 {
				if err := <-errs; err != nil {
					t.Fatal(err)
				}
			}
			catchUp(t, c, eng, sink)
			snaptest.EqualRows(t, "items", sink.Table(db+".items"), tableRows(t, src, db, "items"))
			snaptest.EqualRows(t, "pairs", sink.Table(db+".pairs"), tableRows(t, src, db, "pairs"))
			st := eng.Stats()
			t.Logf("%d writer transactions during the snapshot; %d chunks (%d cut at their bytes), %d read again",
				txns.Load(), st.Chunks, st.Cut, st.Redone)
			if !readOnly && st.Cut < 20 {
				t.Fatalf("%d chunks cut at 2,000 bytes, want at least 20", st.Cut)
			}
			if readOnly {
				// Nothing was written for this pipeline's watermarks.
				r, err := c.Execute("SELECT COUNT(*) FROM information_schema.TABLES t JOIN sluice.watermarks w " +
					"WHERE t.TABLE_SCHEMA = 'sluice' AND w.pipeline = 'p_" + db + "'")
				if err == nil {
					if n, _ := r.GetInt(0, 0); n != 0 {
						t.Fatalf("a read-only snapshot wrote %d watermark rows", n)
					}
				} else if !strings.Contains(err.Error(), "doesn't exist") {
					t.Fatal(err)
				}
			}
			if txns.Load() < 50 || st.Chunks < 20 {
				t.Fatalf("too little overlap to mean anything: %d transactions, %d chunks", txns.Load(), st.Chunks)
			}
		})
	}
}

// Keys the server orders differently from their bytes or their Go
// values: a case-insensitive PAD SPACE text key ('a', 'B', 'c ' and
// 'C' cannot all be keys, and sort a, B, c), an ENUM (by label index,
// not text), a DECIMAL beyond a double's 15 digits, a TIMESTAMP and an
// unsigned BIGINT, chunked 64 rows at a time with no write running: every
// row is read exactly once. Then a key changes only its case or its
// trailing spaces inside a chunk's window, and the sink follows.
func TestIncrementalSnapshotMariaDBKeyOrders(t *testing.T) {
	m := server(t)
	c := rootConn(t, m, "")
	mustExec(t, c, "CREATE DATABASE kord", "USE kord",
		"CREATE TABLE ci (k varchar(20) COLLATE utf8mb4_general_ci PRIMARY KEY, n int)",
		`CREATE TABLE mix (e ENUM('zulu', 'alpha', 'mike') NOT NULL, d DECIMAL(30,10) NOT NULL, ts TIMESTAMP(6) NOT NULL,
			u BIGINT UNSIGNED NOT NULL, PRIMARY KEY (e, d, ts, u))`)
	var ci, mix []string
	for i := range 500 {
		k := fmt.Sprintf("%c%03d", 'a'+i%26, i)
		if i%3 == 0 {
			k = strings.ToUpper(k)
		}
		if i%5 == 0 {
			k += " "
		}
		ci = append(ci, fmt.Sprintf("('%s', %d)", k, i))
		mix = append(mix, fmt.Sprintf("(%d, '12345678901234567890.%010d', '2026-03-29 00:%02d:%02d.%06d', %d)",
			1+i%3, i%4, i%60, i%7, i, ^uint64(0)-uint64(i%2)))
	}
	mustExec(t, c, "INSERT INTO ci VALUES "+strings.Join(ci, ","), "INSERT INTO mix VALUES "+strings.Join(mix, ","))
	var hooked atomic.Bool
	src, eng := incremental(t, m, "kord", false, func(rd snapshot.Reader) snapshot.Reader {
		return &afterChunk{Reader: rd, hook: func(tb snapshot.Target) {
			if tb.Table.Table != "ci" || hooked.Swap(true) {
				return
			}
			// Inside the first ci window: the same keys, spelled again.
			w := rootConn(t, m, "kord")
			if _, err := w.Execute("UPDATE ci SET k = 'a000' WHERE k = 'A000 '"); err != nil {
				t.Error(err)
			}
			if _, err := w.Execute("UPDATE ci SET k = 'B001 ' WHERE k = 'b001'"); err != nil {
				t.Error(err)
			}
		}}
	}, nil, "ci", "mix")
	sink := snaptest.NewMemSink()
	for _, tb := range []string{"ci", "mix"} {
		if _, err := eng.Request(pipeline.TableID{Schema: "kord", Table: tb}, ""); err != nil {
			t.Fatal(err)
		}
	}
	reads := map[string]int{}
	pump(t, eng, sink, func(b pipeline.Batch) bool {
		for _, r := range b.Records {
			if r.Op == pipeline.OpRead {
				reads[r.Table.ID.Table+fmt.Sprint(r.Key())]++
			}
		}
		return len(eng.Snapshotting()) == 0
	})
	catchUp(t, c, eng, sink)
	for k, n := range reads {
		if n > 1 {
			t.Fatalf("row %s read %d times", k, n)
		}
	}
	if !hooked.Load() {
		t.Fatal("the key updates never ran")
	}
	snaptest.EqualRows(t, "ci", sink.Table("kord.ci"), tableRows(t, src, "kord", "ci"))
	snaptest.EqualRows(t, "mix", sink.Table("kord.mix"), tableRows(t, src, "kord", "mix"))
	if len(sink.Table("kord.mix")) != 500 || len(sink.Table("kord.ci")) != 500 {
		t.Fatalf("sink holds %d mix and %d ci rows, want 500 each", len(sink.Table("kord.mix")), len(sink.Table("kord.ci")))
	}
}

// afterChunk is a snapshot.Reader that calls hook after each chunk read,
// before its high watermark.
type afterChunk struct {
	snapshot.Reader
	hook func(snapshot.Target)
}

func (a *afterChunk) Chunk(ctx context.Context, t snapshot.Target, after, upTo snapshot.Cursor, limit, maxBytes int) (snapshot.Chunk, error) {
	c, err := a.Reader.Chunk(ctx, t, after, upTo, limit, maxBytes)
	a.hook(t)
	return c, err
}

// A column added between a chunk's read and its high watermark: the
// chunk, read with the old columns, is read again with the new ones,
// and the sink ends with every row's value of the new column. A request
// whose filter the server cannot run is refused with the server's reason,
// and the table's other request goes on.
func TestIncrementalSnapshotMariaDBSchemaChangeAndRefusal(t *testing.T) {
	m := server(t)
	c := rootConn(t, m, "")
	mustExec(t, c, "CREATE DATABASE incddl", "USE incddl",
		"CREATE TABLE t (id int PRIMARY KEY, v varchar(20))")
	var rows []string
	for i := range 300 {
		rows = append(rows, fmt.Sprintf("(%d, 'v%d')", i, i))
	}
	mustExec(t, c, "INSERT INTO t VALUES "+strings.Join(rows, ","))
	var once sync.Once
	src, eng := incremental(t, m, "incddl", false, func(rd snapshot.Reader) snapshot.Reader {
		return &afterChunk{Reader: rd, hook: func(tb snapshot.Target) {
			if tb.Table.Table != "t" {
				return
			}
			once.Do(func() {
				w := rootConn(t, m, "incddl")
				if _, err := w.Execute("ALTER TABLE t ADD COLUMN x int NOT NULL DEFAULT 7"); err != nil {
					t.Error(err)
				}
			})
		}}
	}, nil, "t")
	sink := snaptest.NewMemSink()
	for _, where := range []string{"", "no_such_column = 1"} {
		if _, err := eng.Request(pipeline.TableID{Schema: "incddl", Table: "t"}, where); err != nil {
			t.Fatal(err)
		}
	}
	pump(t, eng, sink, func(pipeline.Batch) bool { return len(eng.Snapshotting()) == 0 })
	// The stream passes the ALTER at the table's next row, which tells
	// the DEFAULT's shape (added.go).
	mustExec(t, c, "INSERT INTO t VALUES (1000, 'after', 8)")
	catchUp(t, c, eng, sink)
	want := tableRows(t, src, "incddl", "t")
	if len(want) != 301 || !strings.HasSuffix(want[0], " 7]") {
		t.Fatalf("the table reads %d rows, first %q", len(want), want[0])
	}
	snaptest.EqualRows(t, "t", sink.Table("incddl.t"), want)
	if n := eng.Stats().Redone; n < 1 {
		t.Fatal("no chunk was read again after the schema change")
	}
	if st := eng.Status(); !strings.Contains(st.SnapshotError, "incddl.t") || !strings.Contains(st.SnapshotError, "no_such_column") {
		t.Fatalf("status error %q, want the filtered request's refusal", st.SnapshotError)
	}
}

// A crash in the middle of the initial load: the engine positions the
// load's batches at the stream start with the ranges not handed over, so
// a restart from the last batch the sinks hold streams from there and
// reads only the rest, in chunks, under writers running random
// transactions throughout. The sink then equals both tables, and the
// second run read fewer rows than the tables hold.
func TestInitialLoadResumesIncrementallyAfterACrashMariaDB(t *testing.T) {
	m := server(t)
	c := rootConn(t, m, "")
	createItemsAndPairs(t, c, "resume")
	var stop atomic.Bool
	var txns atomic.Int64
	done := make(chan error, 1)
	go func() { done <- writeRandomly(m, "resume", 42, &stop, &txns) }()
	t.Cleanup(func() { stop.Store(true) }) // a failed test leaves no writer behind
	var src *Source
	open := func(from pipeline.Position) *snapshot.Engine {
		var eng *snapshot.Engine
		src, eng = loadEngine(t, m, "resume", 500, from, "items", "pairs")
		return eng
	}
	sink := snaptest.NewMemSink()
	first := open(nil)
	var loaded int
	var checkpoint pipeline.Position
	pump(t, first, sink, func(b pipeline.Batch) bool {
		loaded += len(b.Records)
		if b.Pos != nil {
			checkpoint = b.Pos
		}
		return loaded >= 3000 && b.Pos != nil
	})
	_ = first.Close(context.Background()) // the crash: nothing after the checkpoint is kept
	var pos struct {
		Snapshot struct{ Tables []json.RawMessage } `json:"snapshot"`
	}
	if err := json.Unmarshal(checkpoint, &pos); err != nil {
		t.Fatal(err)
	}
	if len(pos.Snapshot.Tables) == 0 {
		t.Fatalf("the load's checkpoint %s shows no table left to read", checkpoint)
	}

	second := open(checkpoint)
	reads := pumpSnapshot(t, second, sink)
	stop.Store(true)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	catchUp(t, c, second, sink)
	snaptest.EqualRows(t, "items", sink.Table("resume.items"), tableRows(t, src, "resume", "items"))
	snaptest.EqualRows(t, "pairs", sink.Table("resume.pairs"), tableRows(t, src, "resume", "pairs"))
	t.Logf("first run handed over %d records; the restart read %d rows of %d tables in chunks; %d writer transactions",
		loaded, reads, len(pos.Snapshot.Tables), txns.Load())
	if reads == 0 || reads >= 9000 {
		t.Fatalf("the restart read %d rows: want the rest of the load, not none and not all 9000", reads)
	}
}

// A chunk reads the table's columns once, under the metadata lock its
// SELECT holds, and builds the next chunk's query from them. A column
// added, dropped or retyped between two chunks shows in the next one at
// once: it reads the new columns and values, with no error.
func TestChunkReaderFollowsColumnsBetweenChunks(t *testing.T) {
	m := server(t)
	c := rootConn(t, m, "")
	mustExec(t, c, "CREATE DATABASE chcols", "USE chcols", "CREATE TABLE t (id int PRIMARY KEY, v varchar(20))")
	insertRows(t, c, "t", 100, func(i int) string { return fmt.Sprintf("(%d, 'v%d')", i, i) })
	src, _ := incremental(t, m, "chcols", false, nil, nil, "t")
	rd := src.ChunkReader(1)
	defer rd.Close()
	tgt := snapshot.Target{Table: pipeline.TableID{Database: "chcols", Schema: "chcols", Table: "t"}}
	var after snapshot.Cursor
	chunk := func(what string) snapshot.Chunk {
		t.Helper()
		ch, err := rd.Chunk(ctx, tgt, after, nil, 20, 0)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if len(ch.Rows) != 20 {
			t.Fatalf("%s: %d rows, want 20", what, len(ch.Rows))
		}
		after = ch.Last
		return ch
	}
	names := func(ch snapshot.Chunk) string {
		var n []string
		for _, col := range ch.Table.Columns {
			n = append(n, col.Name+" "+col.Type.String())
		}
		return strings.Join(n, ", ")
	}
	chunk("first chunk")
	before := rd.catalogReads.Load()
	ch := chunk("second chunk")
	if n := rd.catalogReads.Load() - before; n != 1 {
		t.Fatalf("the second chunk read the columns %d times, want once", n)
	}
	if got := names(ch); got != "id int32, v string" {
		t.Fatalf("second chunk's columns: %s", got)
	}
	mustExec(t, c, "ALTER TABLE t ADD COLUMN x int NOT NULL DEFAULT 7")
	ch = chunk("after ADD COLUMN")
	if got := names(ch); got != "id int32, v string, x int32" {
		t.Fatalf("columns after ADD COLUMN: %s", got)
	}
	if v := ch.Rows[0][2]; v != int64(7) {
		t.Fatalf("the added column reads %T %v, want int64 7", v, v)
	}
	mustExec(t, c, "ALTER TABLE t DROP COLUMN v")
	ch = chunk("after DROP COLUMN")
	if got := names(ch); got != "id int32, x int32" || len(ch.Rows[0]) != 2 {
		t.Fatalf("columns after DROP COLUMN: %s (%d values)", got, len(ch.Rows[0]))
	}
	mustExec(t, c, "ALTER TABLE t MODIFY x bigint NOT NULL")
	ch = chunk("after MODIFY")
	if got := names(ch); got != "id int32, x int64" {
		t.Fatalf("columns after MODIFY: %s", got)
	}
	if v := ch.Rows[0][1]; v != int64(7) {
		t.Fatalf("the retyped column reads %#v, want int64 7", v)
	}
}

// The initial load gives way to a schema change (snapshot_read.go) and
// the restart finishes it: an ALTER issued mid-walk fails the load with
// the lock wait, the ALTER completes, and a restart from the last
// checkpoint reads the rest in chunks; the sink then equals the table.
func TestInitialLoadGivesWayAndResumesMariaDB(t *testing.T) {
	watchOnlyTheLoadsOwnWaits(t)
	m := server(t)
	c := rootConn(t, m, "")
	const rows = 40000
	numberedRows(t, c, "gwres", rows)
	open := func(from pipeline.Position) (*Source, *snapshot.Engine) {
		return loadEngine(t, m, "gwres", 4, from, "t")
	}
	sink := snaptest.NewMemSink()
	_, first := open(nil)
	rctx := readCtx(t)
	var checkpoint pipeline.Position
	rowsRead := false
	read := func() error {
		b, err := first.Read(rctx)
		if err != nil {
			return err
		}
		sink.Apply(b.Records)
		for _, r := range b.Records {
			rowsRead = rowsRead || r.Op == pipeline.OpRead
		}
		if b.Pos != nil {
			checkpoint = b.Pos
			return first.Ack(ctx, b.Pos)
		}
		return nil
	}
	// Until a reader holds the table's metadata lock: an ALTER before it
	// would have nothing to wait for.
	for checkpoint == nil || !rowsRead {
		if err := read(); err != nil {
			t.Fatal(err)
		}
	}
	altered := alterBehind(t, m, first, "ALTER TABLE gwres.t COMMENT = 'given way'")
	var err error
	for err == nil {
		err = read()
	}
	if !strings.Contains(err.Error(), "Lock wait timeout") || !pipeline.IsRestart(err) {
		t.Fatalf("the load failed with %v, want the lock wait, marked for a restart", err)
	}
	select {
	case err := <-altered:
		if err != nil {
			t.Fatal(err)
		}
	case <-rctx.Done():
		t.Fatal("the ALTER still waits after the load failed")
	}
	_ = first.Close(context.Background()) // the run ends; the daemon starts it again from the checkpoint
	handed := len(sink.Table("gwres.t"))

	src, second := open(checkpoint)
	reads := pumpSnapshot(t, second, sink)
	catchUp(t, c, second, sink)
	snaptest.EqualRows(t, "t", sink.Table("gwres.t"), tableRows(t, src, "gwres", "t"))
	t.Logf("the first run handed over %d of %d rows before it gave way; the restart read %d in chunks", handed, rows, reads)
	if reads == 0 || reads >= rows {
		t.Fatalf("the restart read %d rows: want the rest of the load, not none and not all %d", reads, rows)
	}
}
