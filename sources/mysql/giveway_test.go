package mysql

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/integration/harness"
	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/snapshot"
	"github.com/sluice-cdc/sluice/snapshot/snaptest"
)

// An initial load that stands still (nothing reads its batches: a sink
// slow or down) issues no statement that could wait for a schema change,
// yet its readers hold their metadata locks. An ALTER of a table it is
// reading waits no longer than giveWayAfter: the load then fails naming
// the ALTER, marked for a restart, its transactions end and the ALTER
// completes while the source is open; a restart from the last checkpoint
// reads the rest in chunks and the sink equals the table.
func TestStalledInitialLoadGivesWayMariaDB(t *testing.T) {
	defer func(d time.Duration) { giveWayAfter = d }(giveWayAfter)
	giveWayAfter = 2 * time.Second
	m := server(t)
	c := rootConn(t, m, "")
	const rows = 30000
	numberedRows(t, c, "gwstall", rows)
	sink := snaptest.NewMemSink()
	// Ranges of 5,000 rows: the walk is over long before the load
	// stands still, so no statement of the load's own waits.
	_, first := loadEngine(t, m, "gwstall", 5000, nil, "t")
	rctx := readCtx(t)
	var checkpoint pipeline.Position
	read := func() (int, error) {
		b, err := first.Read(rctx)
		if err != nil {
			return 0, err
		}
		sink.Apply(b.Records)
		if b.Pos != nil {
			checkpoint = b.Pos
			return len(b.Records), first.Ack(ctx, b.Pos)
		}
		return len(b.Records), nil
	}
	for got := 0; checkpoint == nil || got < 3000; {
		n, err := read()
		if err != nil {
			t.Fatal(err)
		}
		got += n
	}

	const alter = "ALTER TABLE gwstall.t COMMENT = 'given way'"
	altered := alterBehind(t, m, first, alter)
	select {
	case err := <-altered:
		if err != nil {
			t.Fatal(err)
		}
	case <-rctx.Done():
		t.Fatal("the ALTER still waits: the stalled load did not give way")
	}
	var err error
	for err == nil {
		_, err = read()
	}
	if !pipeline.IsRestart(err) || !strings.Contains(err.Error(), alter) {
		t.Fatalf("the load failed with %v, want it giving way to the ALTER, marked for a restart", err)
	}
	_ = first.Close(context.Background())
	handed := len(sink.Table("gwstall.t"))

	src, second := loadEngine(t, m, "gwstall", 5000, checkpoint, "t")
	reads := pumpSnapshot(t, second, sink)
	catchUp(t, c, second, sink)
	snaptest.EqualRows(t, "t", sink.Table("gwstall.t"), tableRows(t, src, "gwstall", "t"))
	t.Logf("the first run handed over %d of %d rows; the restart read %d in chunks", handed, rows, reads)
	if reads == 0 || reads >= rows {
		t.Fatalf("the restart read %d rows: want the rest of the load, not none and not all %d", reads, rows)
	}
}

// watchOnlyTheLoadsOwnWaits leaves the load's own statements to give way
// by their lock wait (lockWaitSeconds), the watcher, which would give
// way as soon, out of the test.
func watchOnlyTheLoadsOwnWaits(t *testing.T) {
	d := giveWayAfter
	giveWayAfter = time.Hour
	t.Cleanup(func() { giveWayAfter = d })
}

// A load whose readers are done ends their transactions at once, before
// Read takes its last batches: a pipeline standing still then holds no
// metadata lock, and an ALTER goes on without waiting for the load to
// give way (the watcher is out of the test).
func TestReadLoadHoldsNoLockWhileItsLastBatchesWait(t *testing.T) {
	watchOnlyTheLoadsOwnWaits(t)
	m := server(t)
	c := rootConn(t, m, "")
	numberedRows(t, c, "gwdone", 1000)
	_, eng := loadEngine(t, m, "gwdone", 5000, nil, "t")
	rctx := readCtx(t)
	if _, err := eng.Read(rctx); err != nil { // the barriers; the rows wait
		t.Fatal(err)
	}
	altered := alterBehind(t, m, eng, "ALTER TABLE gwdone.t COMMENT = 'not held up'")
	select {
	case err := <-altered:
		if err != nil {
			t.Fatal(err)
		}
	case <-rctx.Done():
		t.Fatal("the ALTER waits for a load whose rows are all read")
	}
}

// alterBehind runs alter on a connection of its own and reports its
// outcome. Should the test fail first, the load's end (eng closed) lets
// the ALTER finish before its connection closes.
func alterBehind(t *testing.T, m *harness.MariaDB, eng *snapshot.Engine, alter string) <-chan error {
	altered, finished := make(chan error, 1), make(chan struct{})
	w := rootConn(t, m, "")
	go func() {
		defer close(finished)
		_, err := w.Execute(alter)
		altered <- err
	}()
	t.Cleanup(func() {
		_ = eng.Close(context.Background())
		<-finished
	})
	return altered
}
