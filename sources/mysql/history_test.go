package mysql

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/client"

	"github.com/sluice-cdc/sluice/integration/harness"
	"github.com/sluice-cdc/sluice/pipeline"
)

// A RESET MASTER on the server a checkpoint was taken on starts GTIDs and
// binlog files over: resuming by GTID would skip the new history up to the
// checkpoint's numbers, with versions below what the sinks hold. It is
// refused at start and when a streaming session reconnects, with the
// re-snapshot command, never resumed; a checkpoint of the current history
// still resumes.
func TestResetMasterIsRefused(t *testing.T) {
	m := harness.MariaDBT(t)
	c := rootConn(t, m, "")
	mustExec(t, c, "CREATE DATABASE h", "CREATE TABLE h.t (id int PRIMARY KEY, v int)")
	for i := range 20 {
		mustExec(t, c, fmt.Sprintf("INSERT INTO h.t VALUES (%d, 0)", i))
	}
	opts := Options{Pipeline: "hist", DSN: fmt.Sprintf("mysql://root@%s:%d", m.Host, m.Port), Tables: []string{"h.t"},
		HeartbeatInterval: time.Second, ReconnectInitial: 50 * time.Millisecond, ReconnectMax: time.Second}
	opts.Snapshot.Mode = SnapshotNever
	before, err := CurrentPosition(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	before.Server = "server_id=1"
	open := func(from Position) (*Source, error) {
		s, err := New(opts, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		return s, s.Open(ctx, from.Encode())
	}

	// The same history resumes, and a session is streaming when the reset
	// comes: its next session (after the server drops it) stops.
	s, err := open(before)
	if err != nil {
		t.Fatalf("resume on the same history: %v", err)
	}
	defer s.Close(context.Background())
	mustExec(t, c, "UPDATE h.t SET v = 1 WHERE id = 1")
	if recs, _ := readRecords(t, s, 1); recs[len(recs)-1].Op != pipeline.OpUpdate {
		t.Fatalf("streamed %v", recs)
	}
	mustExec(t, c, "RESET MASTER")
	for i := range 40 {
		mustExec(t, c, fmt.Sprintf("UPDATE h.t SET v = v + 1 WHERE id = %d", i%20))
	}
	killBinlogDumps(t, c)
	var readErr error
	for deadline := time.Now().Add(time.Minute); readErr == nil && time.Now().Before(deadline); {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		_, readErr = s.Read(rctx)
		cancel()
		if errors.Is(readErr, context.DeadlineExceeded) {
			readErr = nil
		}
	}
	if !errors.Is(readErr, errHistory) || !pipeline.IsFatal(readErr) || !contains(readErr.Error(), "--reset-offsets", "RESET MASTER") {
		t.Fatalf("a session after RESET MASTER: %v", readErr)
	}

	// At start: the checkpoint's GTID numbers exist again in the new
	// history (40 transactions after the reset), its file does not.
	if gtidNow(t, c) == "" {
		t.Fatal("no GTID after the reset")
	}
	if _, err := open(before); !errors.Is(err, errHistory) || !contains(err.Error(), "--reset-offsets", before.GTID) {
		t.Fatalf("open from a checkpoint of the old history: %v", err)
	}
	// The file exists again but holds another history at that offset.
	mustExec(t, c, "FLUSH BINARY LOGS")
	for range 3 {
		mustExec(t, c, "FLUSH BINARY LOGS")
	}
	if _, err := open(before); !errors.Is(err, errHistory) {
		t.Fatalf("open from a checkpoint whose file name is back with another history: %v", err)
	}
	now, err := CurrentPosition(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	now.Server = "server_id=1"
	s2, err := open(now)
	if err != nil {
		t.Fatalf("resume on the new history: %v", err)
	}
	_ = s2.Close(context.Background())
}

// killBinlogDumps ends every binlog dump session on the server.
func killBinlogDumps(t *testing.T, c *client.Conn) {
	t.Helper()
	r, err := c.Execute("SELECT id FROM information_schema.processlist WHERE command LIKE 'Binlog Dump%'")
	if err != nil {
		t.Fatal(err)
	}
	for i := range r.Values {
		id, _ := r.GetInt(i, 0)
		_, _ = c.Execute(fmt.Sprintf("KILL %d", id))
	}
}
