package snapshot

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/integration/harness"
	"github.com/sluice-cdc/sluice/pipeline"
)

func openEngine(t *testing.T, db *fakeDB, opts Options, from pipeline.Position) (*Engine, *fakeSource) {
	t.Helper()
	src := &fakeSource{db: db}
	opts.Tables = []pipeline.TableID{db.table.ID}
	e := New(src, db, opts)
	if err := e.Open(context.Background(), from); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	return e, src
}

// pump reads batches into sink until done reports true after a batch;
// it returns the last positioned batch's position.
func pump(t *testing.T, e *Engine, sink *fakeSink, done func(b pipeline.Batch) bool) pipeline.Position {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var last pipeline.Position
	for {
		b, err := e.Read(ctx)
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		sink.apply(t, b.Records)
		if b.Pos != nil {
			last = b.Pos
		}
		if done(b) {
			return last
		}
	}
}

// pumpReads reads until at least n snapshot rows arrived and a batch
// carried a position; it returns that position.
func pumpReads(t *testing.T, e *Engine, sink *fakeSink, n int) pipeline.Position {
	t.Helper()
	var emitted int
	return pump(t, e, sink, func(b pipeline.Batch) bool {
		for _, r := range b.Records {
			if r.Op == pipeline.OpRead {
				emitted++
			}
		}
		return emitted >= n && b.Pos != nil
	})
}

// drain commits a sentinel transaction and reads until it arrives: every
// change committed before it is then in the sink.
func drain(t *testing.T, e *Engine, db *fakeDB, sink *fakeSink) pipeline.Position {
	t.Helper()
	db.commit(true, op{kind: pipeline.OpInsert, key: -1, value: "sentinel"})
	return pump(t, e, sink, func(b pipeline.Batch) bool {
		for _, r := range b.Records {
			if r.After != nil && r.After[0] == int64(-1) {
				return true
			}
		}
		return false
	})
}

// pumpOver reads until the snapshot is over and returns how many
// snapshot rows came.
func pumpOver(t *testing.T, e *Engine, sink *fakeSink) int {
	t.Helper()
	reads := 0
	pump(t, e, sink, func(b pipeline.Batch) bool {
		for _, r := range b.Records {
			if r.Op == pipeline.OpRead {
				reads++
			}
		}
		return len(e.Snapshotting()) == 0
	})
	return reads
}

func snapshotOver(e *Engine) func(pipeline.Batch) bool {
	return func(pipeline.Batch) bool { return len(e.Snapshotting()) == 0 }
}

// finish reads until the snapshot is over and everything committed is in
// sink, then compares sink with the table.
func finish(t *testing.T, e *Engine, db *fakeDB, sink *fakeSink) {
	t.Helper()
	pump(t, e, sink, snapshotOver(e))
	drain(t, e, db, sink)
	if d := sink.diff(db); len(d) > 0 {
		t.Fatalf("%d keys differ, first: %v", len(d), d[:min(5, len(d))])
	}
}

func fill(db *fakeDB, n int) {
	for k := range n {
		db.commit(true, op{kind: pipeline.OpInsert, key: int64(k), value: "v0"})
	}
}

// The engine's core claim, against a model database: under random
// inserts, updates, deletes, key updates and truncates committed while
// chunks are read (Parallel windows over several ranges, small chunks,
// every other trial with chunks cut at a byte bound before their row
// limit), a version-guarded sink ends equal to the table.
func TestChunksReconcileWithConcurrentChanges(t *testing.T) {
	// SLUICE_TRIALS for a longer hunt.
	trials := harness.Trials(20)
	cut := 0 // trials with a chunk cut at its byte bound
	for trial := range trials {
		t.Run(fmt.Sprint(trial), func(t *testing.T) {
			db := newFakeDB(t)
			fill(db, 3000)
			sink := newFakeSink()
			opts := Options{Fresh: true, Parallel: 4, ChunkRows: 64, MaxChunkRows: 256}
			if trial%2 == 1 {
				opts.MaxChunkBytes = 2000 // about 30 of these rows
			}
			e, _ := openEngine(t, db, opts, nil)
			rng := rand.New(rand.NewPCG(uint64(trial), 7))
			n := 0
			// The changes commit between reads of the stream (a few per
			// batch read), while the workers read chunks concurrently.
			pump(t, e, sink, func(pipeline.Batch) bool {
				commitRandomly(db, rng, &n, 4000, true)
				return len(e.Snapshotting()) == 0
			})
			drain(t, e, db, sink)
			if d := sink.diff(db); len(d) > 0 {
				t.Fatalf("%d keys differ, first: %v", len(d), d[:min(5, len(d))])
			}
			if db.mu.Lock(); db.cuts > 0 {
				cut++
			}
			db.mu.Unlock()
		})
	}
	// Chunks are cut mostly at the first read of each range, before the
	// row limit adapts to the bound; a trial whose table a truncate
	// emptied early may have none, so the cuts are counted over the
	// trials.
	if trials > 1 && cut == 0 {
		t.Errorf("no chunk was cut at its byte bound in %d trials", trials/2)
	}
}

// commitRandomly commits up to three random changes of keys below keys,
// each in its own transaction, between reads of the stream: inserts,
// updates, deletes, key updates (to the key plus keys) and, with
// truncates, now and then a truncate. It commits none while the log
// holds over 20 batches, so the stream catches up with the watermarks.
func commitRandomly(db *fakeDB, rng *rand.Rand, n *int, keys int, truncates bool) {
	for range 3 {
		if len(db.log) > 20 {
			return
		}
		*n++
		k := int64(rng.IntN(keys))
		switch x := rng.IntN(100); {
		case x < 30:
			db.commit(true, op{kind: pipeline.OpInsert, key: k, value: fmt.Sprint("i", *n)})
		case x < 70:
			db.commit(true, op{kind: pipeline.OpUpdate, key: k, old: k, value: fmt.Sprint("u", *n)})
		case x < 85:
			db.commit(true, op{kind: pipeline.OpDelete, key: k})
		case x < 99 || !truncates:
			db.commit(true, op{kind: pipeline.OpUpdate, key: k + int64(keys), old: k, value: fmt.Sprint("k", *n)})
		case *n%7 == 0:
			db.commit(true, op{kind: pipeline.OpTruncate})
		}
	}
}

// A chunk stops at MaxChunkBytes whatever its row limit: the first chunk
// (ChunkRows, sized before any row was seen) over rows a hundred times
// wider than the table's first ones keeps no row past the bound, and the
// ranges, cut short many times, still deliver every row once
// (Invariant 6).
func TestChunksStopAtTheirByteBound(t *testing.T) {
	db := newFakeDB(t)
	for k := range 2000 {
		v := "narrow"
		if k >= 100 {
			v = strings.Repeat("w", 2000+k)
		}
		db.commit(true, op{kind: pipeline.OpInsert, key: int64(k), value: v})
	}
	sink := newFakeSink()
	const bound = 64 << 10
	e, _ := openEngine(t, db, Options{Fresh: true, Parallel: 2, ChunkRows: 4096, MaxChunkBytes: bound}, nil)
	finish(t, e, db, sink)
	db.mu.Lock()
	defer db.mu.Unlock()
	if db.widest >= bound {
		t.Errorf("a chunk kept %d bytes before its last row, bound %d", db.widest, bound)
	}
	// About 4 MB of rows at 64 KiB a chunk: dozens of cuts.
	if db.cuts < 30 {
		t.Errorf("%d chunks cut at the bound, want at least 30", db.cuts)
	}
}

// The model's key updates write the new key only when the old one
// exists; that is what the fake's apply does, so the test above holds.

// A row changed after the chunk read but before H: its key was touched in
// the window, so the chunk's (older) row is not emitted; the emitted rows
// sort just below H.
func TestTouchedKeysAreNotEmitted(t *testing.T) {
	db := newFakeDB(t)
	fill(db, 5)
	var once sync.Once
	db.onChunk = func() {
		once.Do(func() { db.commit(true, op{kind: pipeline.OpUpdate, key: 2, old: 2, value: "after the read"}) })
	}
	sink := newFakeSink()
	e, _ := openEngine(t, db, Options{Fresh: true, Parallel: 1, ChunkRows: 64}, nil)
	var reads []pipeline.Record
	var high pipeline.Version
	pump(t, e, sink, func(b pipeline.Batch) bool {
		for _, r := range b.Records {
			if r.Op == pipeline.OpRead {
				reads = append(reads, r)
			}
		}
		return len(e.Snapshotting()) == 0
	})
	for _, r := range reads {
		if r.After[0] == int64(2) {
			t.Fatalf("key 2 was emitted from the chunk though the stream changed it in the window: %v", r.After)
		}
		if !r.Snapshot || r.Version[3] != snapshotRow {
			t.Fatalf("snapshot row %v: version %v, snapshot %v", r.After, r.Version, r.Snapshot)
		}
		high = r.Version
	}
	if len(reads) != 4 {
		t.Fatalf("emitted %d rows, want 4", len(reads))
	}
	db.mu.Lock()
	if high[1] != db.lsn {
		t.Errorf("rows at LSN %d, want the high watermark's %d", high[1], db.lsn)
	}
	db.mu.Unlock()
	drain(t, e, db, sink)
	if d := sink.diff(db); len(d) > 0 {
		t.Fatal(d)
	}
}

// A transaction whose commit the log shows before L but which the read
// could not see yet (Postgres: visibility lags the commit record) makes
// the chunk be read again; without the guard the chunk's older row would
// land above the change.
func TestChunkMissingAnEarlierCommitIsReadAgain(t *testing.T) {
	db := newFakeDB(t)
	fill(db, 10)
	xid := db.commit(false, op{kind: pipeline.OpUpdate, key: 5, old: 5, value: "committed, not yet visible"})
	var n atomic.Int32
	db.onChunk = func() {
		if n.Add(1) == 1 {
			db.reveal(xid)
		}
	}
	sink := newFakeSink()
	e, _ := openEngine(t, db, Options{Fresh: true, Parallel: 1, ChunkRows: 64}, nil)
	pump(t, e, sink, snapshotOver(e))
	if n.Load() < 2 {
		t.Fatalf("the chunk was read %d times, want a second read", n.Load())
	}
	drain(t, e, db, sink)
	if d := sink.diff(db); len(d) > 0 {
		t.Fatal(d)
	}
}

// snapshotShapes snapshots db's table in one window and returns the
// shape of every row it emitted.
func snapshotShapes(t *testing.T, db *fakeDB) []*pipeline.Table {
	t.Helper()
	sink := newFakeSink()
	e, _ := openEngine(t, db, Options{Fresh: true, Parallel: 1, ChunkRows: 64}, nil)
	var shapes []*pipeline.Table
	pump(t, e, sink, func(b pipeline.Batch) bool {
		for _, r := range b.Records {
			if r.Op == pipeline.OpRead {
				shapes = append(shapes, r.Table)
			}
		}
		return len(e.Snapshotting()) == 0
	})
	return shapes
}

// A schema change between the read and H (the shape at H differs) makes
// the chunk be read again, and its rows carry the new shape.
func TestChunkReadAcrossASchemaChangeIsReadAgain(t *testing.T) {
	db := newFakeDB(t)
	fill(db, 10)
	wider := *db.table
	wider.Columns = append(append([]pipeline.Column(nil), db.table.Columns...), pipeline.Column{Name: "w", Type: pipeline.TypeInt32, Nullable: true})
	wider.Generation++
	var n atomic.Int32
	db.onChunk = func() {
		if n.Add(1) == 1 {
			db.mu.Lock()
			db.table = &wider
			db.mu.Unlock()
			db.commit(true, op{kind: pipeline.OpShape}) // the stream shows it
		}
	}
	shapes := snapshotShapes(t, db)
	if n.Load() < 2 || len(shapes) != 10 {
		t.Fatalf("read %d times, %d rows emitted; want a second read and 10 rows", n.Load(), len(shapes))
	}
	for _, s := range shapes {
		if s != &wider {
			t.Fatalf("a row was emitted with a shape the stream did not show: %d columns", len(s.Columns))
		}
	}
}

// addedColumn fills db with 10 rows and returns the table's next shape
// with a column w added, as the catalog shows it, and as the stream shows
// it: the same columns and generation, w with the missing value -42 that
// only the stream knows.
func addedColumn(db *fakeDB) (catalog, stream pipeline.Table) {
	fill(db, 10)
	catalog = *db.table
	catalog.Columns = append(append([]pipeline.Column(nil), db.table.Columns...), pipeline.Column{Name: "w", Type: pipeline.TypeInt32, Nullable: true})
	catalog.Generation++
	stream = catalog
	stream.Columns = append([]pipeline.Column(nil), catalog.Columns...)
	stream.Columns[2].Missing = int64(-42)
	return catalog, stream
}

// A read that sees a shape the stream has not shown yet (the catalog is
// ahead of the stream) is read again until the stream shows it, and the
// rows carry the stream's shape, with the missing value of the added
// column that only the stream knows (Invariant 11). Before, they went out
// with the read's shape, and a sink that took it added the column without
// filling the older rows.
func TestChunkWaitsForTheStreamToShowItsShape(t *testing.T) {
	db := newFakeDB(t)
	catalog, stream := addedColumn(db)
	var n atomic.Int32
	db.onChunk = func() {
		switch n.Add(1) {
		case 1: // an ALTER the stream has not reached
			db.mu.Lock()
			db.table = &catalog
			db.mu.Unlock()
		case 3: // the stream reaches it
			db.mu.Lock()
			db.table = &stream
			db.mu.Unlock()
			db.commit(true, op{kind: pipeline.OpShape})
		}
	}
	shapes := snapshotShapes(t, db)
	if n.Load() < 3 || len(shapes) != 10 {
		t.Fatalf("read %d times, %d rows emitted; want 3 reads and 10 rows", n.Load(), len(shapes))
	}
	for _, s := range shapes {
		if s != &stream {
			t.Fatalf("a row went out with a shape the stream did not show (%d columns, missing value %v)", len(s.Columns), s.Columns[len(s.Columns)-1].Missing)
		}
	}
}

// A chunk read again for long (here: the stream does not show the shape
// the read saw) is not given up, and the table's status says why while it
// waits; the reason clears once the chunk is emitted.
func TestAChunkReadAgainForLongSaysWhy(t *testing.T) {
	defer func(w time.Duration) { maxRedoWait = w }(maxRedoWait)
	maxRedoWait = 4 * minRedoWait // the third wait is the longest
	db := newFakeDB(t)
	catalog, stream := addedColumn(db)
	var eng atomic.Pointer[Engine]
	opened := make(chan struct{}) // eng is set
	var n atomic.Int32
	during := make(chan string, 1)
	db.onChunk = func() {
		switch n.Add(1) {
		case 1:
			<-opened
			db.mu.Lock()
			db.table = &catalog
			db.mu.Unlock()
		case 6:
			if tables := eng.Load().Status().Tables; len(tables) == 1 {
				during <- tables[0].ReadingAgain
			} else {
				during <- fmt.Sprintf("%d tables in the status", len(tables))
			}
			db.mu.Lock()
			db.table = &stream
			db.mu.Unlock()
			db.commit(true, op{kind: pipeline.OpShape})
		}
	}
	e, _ := openEngine(t, db, Options{Fresh: true, Parallel: 1, ChunkRows: 64}, nil)
	eng.Store(e)
	close(opened)
	rows := 0
	pump(t, e, newFakeSink(), func(b pipeline.Batch) bool {
		for _, r := range b.Records {
			if r.Op == pipeline.OpRead {
				rows++
			}
		}
		return len(e.Snapshotting()) == 0
	})
	if why := <-during; !strings.Contains(why, "the stream has not shown the shape yet") {
		t.Fatalf("status while the chunk was read again: %q; want the reason", why)
	}
	if rows != 10 || n.Load() < 6 {
		t.Fatalf("%d rows after %d reads; want 10 after at least 6", rows, n.Load())
	}
	for _, ts := range e.Status().Tables {
		if ts.ReadingAgain != "" {
			t.Fatalf("%s still says %q after its chunk was emitted", ts.Table, ts.ReadingAgain)
		}
	}
}

// crashAfterReads runs an engine over db until at least n snapshot rows
// reached sink and a batch carried a position, and returns that position
// as a crash would leave it: the engine stops, and what the log still
// holds is lost.
func crashAfterReads(t *testing.T, db *fakeDB, sink *fakeSink, opts Options, n int) (pipeline.Position, position) {
	t.Helper()
	e, _ := openEngine(t, db, opts, nil)
	pos := pumpReads(t, e, sink, n)
	if err := e.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	var p position
	if err := json.Unmarshal(pos, &p); err != nil || len(p.Snapshot.Tables) != 1 {
		t.Fatalf("position %s: %v", pos, err)
	}
	for len(db.log) > 0 {
		<-db.log
	}
	return pos, p
}

// A restart resumes from the progress inside the last position: the
// chunks emitted before it are not read again, the source gets its own
// position back, and the sink ends equal.
func TestResumeFromTheLastPosition(t *testing.T) {
	db := newFakeDB(t)
	fill(db, 1000)
	sink := newFakeSink()
	pos, p := crashAfterReads(t, db, sink, Options{Fresh: true, Parallel: 2, ChunkRows: 64, MaxChunkRows: 64}, 300)
	done := p.Snapshot.Tables[0].Rows
	if done < 256 {
		t.Fatalf("the position records %d rows done, want at least 256", done)
	}
	db.mu.Lock()
	before := db.chunks
	db.mu.Unlock()
	e2, src := openEngine(t, db, Options{Fresh: true, Parallel: 2, ChunkRows: 64, MaxChunkRows: 64}, pos)
	if string(src.opened) != string(p.Stream) {
		t.Fatalf("the source opened at %s, want its own position %s", src.opened, p.Stream)
	}
	pump(t, e2, sink, snapshotOver(e2))
	db.mu.Lock()
	reread := db.chunks - before
	db.mu.Unlock()
	// 1000 rows in 64-row chunks over 2 ranges: the rest of the rows, plus
	// at most one short chunk per range.
	if max := int(1000-done)/64 + 2*2; reread > max {
		t.Errorf("resumed with %d rows done and read %d chunks, want at most %d", done, reread, max)
	}
	last := drain(t, e2, db, sink)
	if err := e2.Ack(context.Background(), last); err != nil {
		t.Fatal(err)
	}
	if StreamPosition(last) == nil || string(src.acked) != string(StreamPosition(last)) {
		t.Fatalf("acked %s, want the stream part of %s", src.acked, last)
	}
	if d := sink.diff(db); len(d) > 0 {
		t.Fatal(d[:min(5, len(d))])
	}
}

// A crash after chunks cut at their byte bound: the position carries the
// last cut chunk's key as the range's cursor, so the restart reads on
// from there (no row skipped, none of the durable ones read again beyond
// the chunks in flight), and the sink ends equal.
func TestResumeAfterChunksCutAtTheirBytes(t *testing.T) {
	db := newFakeDB(t)
	fill(db, 1000)
	sink := newFakeSink()
	opts := Options{Fresh: true, Parallel: 2, ChunkRows: 64, MaxChunkRows: 64, MaxChunkBytes: 1000}
	pos, p := crashAfterReads(t, db, sink, opts, 300)
	done := p.Snapshot.Tables[0].Rows
	db.mu.Lock()
	cutBefore := db.cuts
	db.mu.Unlock()
	if cutBefore == 0 {
		t.Fatal("no chunk was cut before the crash")
	}
	e2, _ := openEngine(t, db, opts, pos)
	reads := pumpOver(t, e2, sink)
	// At most the two ranges' chunks in flight (64 rows each) again.
	if max := int(1000-done) + 2*64; reads > max {
		t.Errorf("resumed with %d rows done and read %d rows, want at most %d", done, reads, max)
	}
	drain(t, e2, db, sink)
	if d := sink.diff(db); len(d) > 0 {
		t.Fatal(d[:min(5, len(d))])
	}
}

// A fresh pipeline's snapshot first clears what the sinks hold of the
// table from an earlier generation, below its first window.
func TestFreshSnapshotClearsOlderRows(t *testing.T) {
	db := newFakeDB(t)
	fill(db, 100)
	sink := newFakeSink()
	sink.rows[5000], sink.vers[5000] = "left by an earlier run", pipeline.Version{0, 0, 0, 9}
	e, _ := openEngine(t, db, Options{Fresh: true, Parallel: 2, ChunkRows: 64}, nil)
	finish(t, e, db, sink)
}

// A row inserted above the max key after the plan read it, before the
// first window, arrives through the stream only: the fresh snapshot's
// barrier must sort below it (found by the Postgres test: a barrier at the
// first low watermark removed such rows for good).
func TestInsertAboveTheMaxKeyAfterThePlanSurvivesTheBarrier(t *testing.T) {
	db := newFakeDB(t)
	fill(db, 100)
	var once sync.Once
	db.onPlan = func() {
		once.Do(func() { db.commit(true, op{kind: pipeline.OpInsert, key: 1000, value: "above the max key"}) })
	}
	sink := newFakeSink()
	e, _ := openEngine(t, db, Options{Fresh: true, Parallel: 1, ChunkRows: 64}, nil)
	finish(t, e, db, sink)
}

// A table that cannot be read in key order (no key) is refused, not
// retried for ever: a fresh pipeline stops with the reason (its rows would
// never arrive); a request is dropped and /status says why.
func TestTableWithoutAKeyIsRefused(t *testing.T) {
	db := newFakeDB(t)
	fill(db, 10)
	db.planErr = pipeline.Fatal(errors.New("table s.t has no primary key: add one"))
	e, _ := openEngine(t, db, Options{Fresh: true, Parallel: 1}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		_, err := e.Read(ctx)
		if err == nil {
			continue
		}
		if !pipeline.IsFatal(err) || !strings.Contains(err.Error(), "no primary key") {
			t.Fatalf("read: %v, want the refusal as a fatal error", err)
		}
		break
	}

	db2 := newFakeDB(t)
	fill(db2, 10)
	db2.planErr = db.planErr
	e2, _ := openEngine(t, db2, Options{Parallel: 1}, nil)
	if _, err := e2.Request(db2.table.ID, ""); err != nil {
		t.Fatal(err)
	}
	sink := newFakeSink()
	for len(e2.Snapshotting()) > 0 {
		drain(t, e2, db2, sink) // the stream moves while the worker plans
	}
	if st := e2.Status(); !strings.Contains(st.SnapshotError, "refused") {
		t.Fatalf("status error %q, want the refusal", st.SnapshotError)
	}
}

// A change in the window that sends a column unchanged (Postgres TOAST
// under REPLICA IDENTITY DEFAULT) drops its row from the chunk, but a
// sink new to the table holds no value to keep: the key is read again in
// a window of its own, and the sink ends with the value.
func TestUnchangedValueInTheWindowIsReadAgain(t *testing.T) {
	db := newFakeDB(t)
	fill(db, 10)
	var once sync.Once
	db.onChunk = func() {
		once.Do(func() { db.commit(true, op{kind: pipeline.OpUpdate, key: 3, old: 3, unchanged: true}) })
	}
	sink := newFakeSink()
	e, _ := openEngine(t, db, Options{Fresh: true, Parallel: 1, ChunkRows: 64}, nil)
	finish(t, e, db, sink)
	if n := e.Stats().Refetched; n != 1 {
		t.Fatalf("%d keys read again, want 1", n)
	}
}

// After a restart the stream replays what followed the checkpoint,
// watermarks of the earlier run included: they match no window of the new
// run and are dropped, and the earlier run's chunks are not emitted twice
// from them.
func TestResumeIgnoresAnEarlierRunsWatermarks(t *testing.T) {
	db := newFakeDB(t)
	fill(db, 600)
	sink := newFakeSink()
	e, _ := openEngine(t, db, Options{Fresh: true, Parallel: 2, ChunkRows: 64, MaxChunkRows: 64}, nil)
	pos := pumpReads(t, e, sink, 128)
	if err := e.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Not drained: the rest of the first run's log (its later watermarks)
	// is read by the second run.
	left := len(db.log)
	e2, _ := openEngine(t, db, Options{Fresh: true, Parallel: 2, ChunkRows: 64, MaxChunkRows: 64}, pos)
	reads := pumpOver(t, e2, sink)
	t.Logf("%d batches of the first run replayed", left)
	var p position
	if err := json.Unmarshal(pos, &p); err != nil || len(p.Snapshot.Tables) != 1 {
		t.Fatalf("position %s: %v", pos, err)
	}
	// Only the second run's own chunks: the rows after the checkpoint's
	// cursors, at most one chunk per range more than those.
	if most := 600 - int(p.Snapshot.Tables[0].Rows) + 2*64; reads > most {
		t.Fatalf("the second run emitted %d rows, want at most %d: an earlier run's watermark emitted rows", reads, most)
	}
	drain(t, e2, db, sink)
	if d := sink.diff(db); len(d) > 0 {
		t.Fatal(d[:min(5, len(d))])
	}
}

// A range with no upper bound, written as JSON null in a checkpoint, is
// read back as no bound (nil), not as the cursor "null", which a reader
// cannot compare and would read nothing up to.
func TestCheckpointedRangeWithoutUpperBoundStaysUnbounded(t *testing.T) {
	pos := pipeline.Position(`{"stream":{"lsn":1},"snapshot":{"known":[],"tables":[{"schema":"s","table":"t","run":"r",` +
		`"planned":true,"ranges":[{"after":[1],"up_to":null},{"after":null,"up_to":[1]}]}]}}`)
	p, wrapped, err := parsePosition(pos)
	if err != nil || !wrapped {
		t.Fatalf("parse: %v (wrapped %v)", err, wrapped)
	}
	r := p.Snapshot.Tables[0].Ranges
	if r[0].UpTo != nil || r[1].After != nil || string(r[0].After) != "[1]" || string(r[1].UpTo) != "[1]" {
		t.Fatalf("ranges read back as %s..%s and %s..%s", r[0].After, r[0].UpTo, r[1].After, r[1].UpTo)
	}
	if b := p.Snapshot.marshal(); strings.Contains(string(b), "null") {
		t.Fatalf("progress written back as %s", b)
	}
}

// A repair reads chosen keys again while the stream flows: a row a sink
// holds stale is written again, a row only the sink holds (its key has
// no row in the table) is deleted, and a key a change touches inside the
// repair's window is left to that change, which sorts above: a key
// inserted in the window is not deleted. 1,100 keys spread over three
// windows of at most 512.
func TestRepairRewritesStaleRowsAndDeletesRowsOnlyASinkHolds(t *testing.T) {
	db := newFakeDB(t)
	fill(db, 1000)
	sink := newFakeSink()
	e, _ := openEngine(t, db, Options{Parallel: 2, ChunkRows: 64}, nil)
	drain(t, e, db, sink)
	// Behind the pipeline's back: stale values and rows the table lacks.
	for k := int64(0); k < 1000; k += 10 {
		sink.rows[k] = "stale"
	}
	for k := int64(5000); k < 5100; k++ {
		sink.rows[k] = "ghost"
	}
	var once sync.Once
	db.onKeys = func(keys [][]any) {
		if slices.ContainsFunc(keys, func(k []any) bool { return k[0] == int64(5050) }) {
			once.Do(func() { db.commit(true, op{kind: pipeline.OpInsert, key: 5050, value: "inserted in the window"}) })
		}
	}
	var keys [][]string
	for k := 0; k < 1000; k++ {
		keys = append(keys, []string{strconv.Itoa(k)})
	}
	for k := 5000; k < 5100; k++ {
		keys = append(keys, []string{strconv.Itoa(k)})
	}
	if _, err := e.RequestKeys(db.table.ID, keys); err != nil {
		t.Fatal(err)
	}
	finish(t, e, db, sink)
	if n := e.Stats().Repaired; n != 1100 {
		t.Fatalf("%d keys repaired, want 1100", n)
	}
	if got := e.Status().Tables[0].Where; got != "repair of 1100 keys" {
		t.Fatalf("status shows %q", got)
	}
}

// The phase signal: a fresh pipeline's table is backfilling until its
// snapshot is over; a filtered re-snapshot and a repair of it read rows
// the sinks hold already and are not. Their rows say so
// (Record.Replaces), the first load's do not.
func TestBackfillingListsOnlyTablesWhoseHistoryIsBeingRead(t *testing.T) {
	db := newFakeDB(t)
	fill(db, 300)
	e, _ := openEngine(t, db, Options{Fresh: true, Parallel: 1, ChunkRows: 64}, nil)
	if got := e.Backfilling(); len(got) != 1 || got[0] != db.table.ID {
		t.Fatalf("a fresh pipeline backfills %v, want its table", got)
	}
	if st := e.Status(); len(st.Backfilling) != 1 {
		t.Fatalf("status shows backfilling %v", st.Backfilling)
	}
	sink := newFakeSink()
	finish(t, e, db, sink)
	if got := e.Backfilling(); len(got) != 0 {
		t.Fatalf("after the snapshot: backfilling %v", got)
	}
	if sink.reads[true] != 0 || sink.reads[false] != 300 {
		t.Fatalf("the first load's reads by Replaces: %v, want 300 false", sink.reads)
	}
	if _, err := e.Request(db.table.ID, "id < 10"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.RequestKeys(db.table.ID, [][]string{{"1"}}); err != nil {
		t.Fatal(err)
	}
	if got, busy := e.Backfilling(), e.Snapshotting(); len(got) != 0 || len(busy) != 1 {
		t.Fatalf("a re-read of known rows: backfilling %v, snapshotting %v", got, busy)
	}
	finish(t, e, db, sink)
	if sink.reads[true] == 0 || sink.reads[false] != 300 {
		t.Fatalf("reads by Replaces: %v, want the re-snapshot's and the repair's true", sink.reads)
	}
	// A plain re-snapshot of the whole table replaces rows as well.
	before := sink.reads[true]
	if _, err := e.Request(db.table.ID, ""); err != nil {
		t.Fatal(err)
	}
	finish(t, e, db, sink)
	if sink.reads[true] < before+300 || sink.reads[false] != 300 {
		t.Fatalf("reads by Replaces: %v, want the whole re-snapshot's 300 true too", sink.reads)
	}
}
