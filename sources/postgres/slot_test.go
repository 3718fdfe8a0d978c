package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-cdc/sluice/pipeline"
)

// TestAckAdvancesSlot: nothing is confirmed before the first Ack (the flush
// position stays at the consistent point even though data was received and
// status updates were sent), and an Ack moves confirmed_flush_lsn to the
// acknowledged transaction end.
func TestAckAdvancesSlot(t *testing.T) {
	pg, ctx := testDB(t)
	exec(t, ctx, pg, "shop", "CREATE TABLE t (id int PRIMARY KEY, v text)")
	opts := testOptions(pg, "public.t")
	src := openSource(t, ctx, opts, nil)
	cp := src.start
	if got := confirmedLSN(t, ctx, pg, opts.Slot); got != cp {
		t.Fatalf("fresh slot confirmed %s, consistent point %s", got, cp)
	}
	exec(t, ctx, pg, "shop", "INSERT INTO t VALUES (1, 'a')", "INSERT INTO t VALUES (2, 'b')")
	r := newReader(t, src, false)
	r.until(ctx, "two inserts", func() bool { return len(r.sink.Table("public.t")) == 2 })
	first := r.lastPos

	// Let the receiver report status a few times: the server's reply_time
	// moves with each standby status update.
	replyTime := func() time.Time {
		var rt time.Time
		c, err := pgx.Connect(ctx, pg.DSN("shop"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(ctx)
		_ = c.QueryRow(ctx, "SELECT coalesce(max(reply_time), 'epoch') FROM pg_stat_replication WHERE application_name = 'sluice:test'").Scan(&rt)
		return rt
	}
	t0 := replyTime()
	waitFor(t, ctx, "status updates", func() bool { return replyTime().Sub(t0) > 250*time.Millisecond })
	if got := confirmedLSN(t, ctx, pg, opts.Slot); got != cp {
		t.Fatalf("confirmed %s before any Ack, want the consistent point %s", got, cp)
	}

	if err := src.Ack(ctx, first); err != nil {
		t.Fatal(err)
	}
	want := posLSN(t, first)
	waitFor(t, ctx, "confirmed_flush_lsn = "+want.String(), func() bool { return confirmedLSN(t, ctx, pg, opts.Slot) == want })

	// An older position does not move it back.
	if err := src.Ack(ctx, src.position(cp)); err != nil {
		t.Fatal(err)
	}
	if got := confirmedLSN(t, ctx, pg, opts.Slot); got != want {
		t.Fatalf("confirmed %s after a stale Ack, want %s", got, want)
	}
}

// TestRestartFromCheckpoint: reopening at a checkpoint re-delivers exactly
// the transactions after it, and Close acknowledges nothing.
func TestRestartFromCheckpoint(t *testing.T) {
	pg, ctx := testDB(t)
	exec(t, ctx, pg, "shop", "CREATE TABLE t (id int PRIMARY KEY, v text)")
	opts := testOptions(pg, "public.t")
	src := openSource(t, ctx, opts, nil)
	r := newReader(t, src, false)
	var positions []pipeline.Position
	for i := 1; i <= 3; i++ {
		exec(t, ctx, pg, "shop", fmt.Sprintf("INSERT INTO t VALUES (%d, 'v%d')", i, i))
		r.until(ctx, fmt.Sprintf("row %d", i), func() bool { return len(r.sink.Table("public.t")) == i })
		positions = append(positions, r.lastPos)
	}
	second := positions[1]
	if err := src.Ack(ctx, second); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "ack", func() bool { return confirmedLSN(t, ctx, pg, opts.Slot) == posLSN(t, second) })
	if err := src.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if got := confirmedLSN(t, ctx, pg, opts.Slot); got != posLSN(t, second) {
		t.Fatalf("Close moved confirmed_flush_lsn to %s", got)
	}

	exec(t, ctx, pg, "shop", "INSERT INTO t VALUES (4, 'v4')")
	src2 := openSource(t, ctx, opts, second)
	r2 := newReader(t, src2, true)
	r2.until(ctx, "rows 3 and 4", func() bool { return len(r2.sink.Table("public.t")) == 2 })
	if got := strings.Join(r2.sink.Table("public.t"), " "); got != "[3 v3] [4 v4]" {
		t.Fatalf("after restart got %s, want only rows 3 and 4", got)
	}
	for _, rec := range r2.sink.Records {
		if rec.Op.IsData() && rec.Version[1] <= uint64(posLSN(t, second)) {
			t.Fatalf("record at %v is not after the checkpoint %s", rec.Version, posLSN(t, second))
		}
	}
}

// TestMissingSlotWithCheckpoint: a checkpoint whose slot is gone (dropped,
// or lost) is a fatal error that says to re-snapshot.
func TestMissingSlotWithCheckpoint(t *testing.T) {
	pg, ctx := testDB(t)
	exec(t, ctx, pg, "shop", "CREATE TABLE t (id int PRIMARY KEY)")
	opts := testOptions(pg, "public.t")
	src := openSource(t, ctx, opts, nil)
	exec(t, ctx, pg, "shop", "INSERT INTO t VALUES (1)")
	r := newReader(t, src, true)
	r.until(ctx, "a position", func() bool { return len(r.sink.Table("public.t")) == 1 })
	if err := src.Close(ctx); err != nil {
		t.Fatal(err)
	}
	dropSlotWhenIdle(t, ctx, pg, "shop", opts.Slot)

	s2, err := New(opts, testLogger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	err = s2.Open(ctx, r.lastPos)
	if err == nil {
		_ = s2.Close(ctx)
		t.Fatal("Open succeeded without the slot")
	}
	if !pipeline.IsFatal(err) {
		t.Errorf("not fatal: %v", err)
	}
	for _, want := range []string{"slot " + opts.Slot + " is gone", "the changes since " + posLSN(t, r.lastPos).String() + " are lost to sluice",
		"re-snapshot with `sluice run --reset-offsets`"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

// TestSlotLostWhileStreaming: the slot disappears under a running source
// (its walsender is terminated and the slot dropped, as when the server
// invalidates it); the reconnect fails fatally with the re-snapshot advice.
func TestSlotLostWhileStreaming(t *testing.T) {
	pg, ctx := testDB(t)
	exec(t, ctx, pg, "shop", "CREATE TABLE t (id int PRIMARY KEY)")
	opts := testOptions(pg, "public.t")
	opts.ReconnectInitial, opts.ReconnectMax = 300*time.Millisecond, 300*time.Millisecond
	src := openSource(t, ctx, opts, nil)
	c, err := pgx.Connect(ctx, pg.DSN("shop"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	waitFor(t, ctx, "slot dropped", func() bool {
		_, _ = c.Exec(ctx, "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1 AND active", opts.Slot)
		_, err := c.Exec(ctx, "SELECT pg_drop_replication_slot($1)", opts.Slot)
		return err == nil
	})
	var readErr error
	for readErr == nil {
		_, readErr = src.Read(ctx)
	}
	if !pipeline.IsFatal(readErr) || !strings.Contains(readErr.Error(), "--reset-offsets") || !strings.Contains(readErr.Error(), "is gone") {
		t.Fatalf("read error %v: want a fatal slot-gone error", readErr)
	}
}

// TestOverConfirmedSlot: a slot that confirmed beyond the checkpoint is
// refused, since starting there would skip changes silently — unless the
// checkpoint is the previous one by the operator's choice.
func TestOverConfirmedSlot(t *testing.T) {
	pg, ctx := testDB(t)
	exec(t, ctx, pg, "shop", "CREATE TABLE t (id int PRIMARY KEY)")
	opts := testOptions(pg, "public.t")
	src := openSource(t, ctx, opts, nil)
	r := newReader(t, src, false)
	exec(t, ctx, pg, "shop", "INSERT INTO t VALUES (1)")
	r.until(ctx, "row 1", func() bool { return len(r.sink.Table("public.t")) == 1 })
	first := r.lastPos
	exec(t, ctx, pg, "shop", "INSERT INTO t VALUES (2)")
	r.until(ctx, "row 2", func() bool { return len(r.sink.Table("public.t")) == 2 })
	if err := src.Ack(ctx, r.lastPos); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "ack", func() bool { return confirmedLSN(t, ctx, pg, opts.Slot) == posLSN(t, r.lastPos) })
	if err := src.Close(ctx); err != nil {
		t.Fatal(err)
	}
	s2, err := New(opts, testLogger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	err = s2.Open(ctx, first)
	if err == nil || !pipeline.IsFatal(err) || !strings.Contains(err.Error(), "beyond the checkpoint") {
		t.Fatalf("Open from an older checkpoint: %v", err)
	}

	// `--from-previous-checkpoint` (the newest checkpoint was acknowledged,
	// then became unreadable): the same slot is expected to be ahead, and
	// streaming resumes at its confirmed_flush_lsn with nothing lost.
	opts.FromPreviousCheckpoint = true
	s3 := openSource(t, ctx, opts, first)
	if s3.start != posLSN(t, r.lastPos) {
		t.Fatalf("resumed at %s, want the slot's confirmed %s", s3.start, posLSN(t, r.lastPos))
	}
	exec(t, ctx, pg, "shop", "INSERT INTO t VALUES (3)")
	r3 := newReader(t, s3, true)
	r3.until(ctx, "row 3", func() bool { return len(r3.sink.Table("public.t")) == 1 })
	if got := r3.sink.Table("public.t"); got[0] != "[3]" {
		t.Fatalf("after the resume: %v", got)
	}
}

// TestSlotCreationBlocked: slot creation waits for running transactions;
// past SlotCreateTimeout the error names the blocking session.
func TestSlotCreationBlocked(t *testing.T) {
	pg, ctx := testDB(t)
	exec(t, ctx, pg, "shop", "CREATE TABLE t (id int PRIMARY KEY)")
	c, err := pgx.Connect(ctx, pg.DSN("shop"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	tx, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, "INSERT INTO t VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	opts := testOptions(pg, "public.t")
	opts.SlotCreateTimeout = time.Second
	s, err := New(opts, testLogger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	err = s.Open(ctx, nil)
	if err == nil {
		_ = s.Close(ctx)
		t.Fatal("slot creation did not wait for the open transaction")
	}
	want := fmt.Sprintf("PID %d", c.PgConn().PID())
	if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "pg_terminate_backend") {
		t.Fatalf("error %q does not name the blocker (%s)", err, want)
	}
	var pe *PreflightError
	if errors.As(err, &pe) {
		t.Fatal("reported as a preflight problem")
	}
}

// TestDropSlotOnExit: Close drops the slot only when asked to.
func TestDropSlotOnExit(t *testing.T) {
	pg, ctx := testDB(t)
	exec(t, ctx, pg, "shop", "CREATE TABLE t (id int PRIMARY KEY)")
	slots := func() []string { return selectRows(t, ctx, pg, "SELECT slot_name::text FROM pg_replication_slots") }
	opts := testOptions(pg, "public.t")
	src := openSource(t, ctx, opts, nil)
	if err := src.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(slots()); got != "[[sluice_test]]" {
		t.Fatalf("slots after Close: %s", got)
	}
	opts.DropSlotOnExit = true
	src = openSource(t, ctx, opts, nil)
	if err := src.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if got := slots(); len(got) != 0 {
		t.Fatalf("slots after Close with DropSlotOnExit: %v", got)
	}
}

// Snapshot mode never, a slot left by a run that delivered changes but
// never checkpointed, and no checkpoint: the slot is kept and its changes
// are delivered again (dropping and recreating it, as an initial load
// does, would skip them while some sinks may lack them).
func TestNeverModeKeepsLeftoverSlot(t *testing.T) {
	pg, ctx := testDB(t)
	exec(t, ctx, pg, "shop", "CREATE TABLE t (id int PRIMARY KEY, v text)")
	opts := testOptions(pg, "public.t")
	first, err := New(opts, testLogger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Open(ctx, nil); err != nil {
		t.Fatal(err)
	}
	exec(t, ctx, pg, "shop", "INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 10) g")
	r := newReader(t, first, false) // delivered, never acknowledged
	r.until(ctx, "ten inserts", func() bool { return len(r.sink.Table("public.t")) == 10 })
	if err := first.Close(ctx); err != nil {
		t.Fatal(err)
	}

	second := openSource(t, ctx, opts, nil)
	exec(t, ctx, pg, "shop", "INSERT INTO t VALUES (11, 'v11')")
	again := newReader(t, second, false)
	again.until(ctx, "every insert", func() bool { return len(again.sink.Table("public.t")) == 11 })
	equalRows(t, "public.t", again.sink.Table("public.t"), selectRows(t, ctx, pg, "SELECT id, v FROM t"))
}
