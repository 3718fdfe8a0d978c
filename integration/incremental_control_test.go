package integration

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-cdc/sluice/integration/harness"
	"github.com/sluice-cdc/sluice/obs"
)

// waitSnapshotDone polls /status until the incremental snapshot of table
// (with where) shows done.
func waitSnapshotDone(t *testing.T, d *daemonProc, addr, table, where string) {
	t.Helper()
	waitUntil(t, d, 2*time.Minute, "the snapshot of "+table+" "+where, func() bool {
		var r obs.StatusReport
		if getJSON(t, "http://"+addr+"/status", &r) != 200 {
			return false
		}
		for _, ts := range r.Source.Tables {
			if ts.Table == table && ts.Where == where && ts.Incremental && ts.Done {
				return true
			}
		}
		return false
	})
}

// A table added to a running pipeline's config is snapshotted on the next
// start while the other table streams, `sluice snapshot --table
// --where` re-reads the rows a sink lost, and `sluice snapshot --table`
// sweeps the rows only the sink holds, all under concurrent writes to both
// tables; sluice verify then finds the sink equal.
func TestTableAddedAndResnapshotWhileStreaming(t *testing.T) {
	pg := harness.PostgresT(t)
	ctx := context.Background()
	for _, db := range []string{"ctl", "ctl_target"} {
		if err := pg.CreateDatabase(ctx, db); err != nil {
			t.Fatal(err)
		}
	}
	if err := pg.Exec(ctx, "ctl",
		"CREATE TABLE a (id bigint PRIMARY KEY, v text)",
		"INSERT INTO a SELECT g, 'a' || g FROM generate_series(1, 3000) g",
		"CREATE TABLE b (id bigint PRIMARY KEY, v text)",
		"INSERT INTO b SELECT g, 'b' || g FROM generate_series(1, 5000) g"); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	config := func(tables string) string {
		path := filepath.Join(dir, "ctl.yaml")
		if err := os.WriteFile(path, []byte(fmt.Sprintf(`pipeline: ctl
source:
  postgres:
    dsn: %s
    tables: [%s]
    heartbeat_interval: 1s
    snapshot: {chunk_time: 50ms, max_chunk_rows: 500}
sinks:
  - postgres: {dsn: "%s"}
offsets: {dir: ./offsets}
runtime: {checkpoint_interval: 100ms}
http: {listen: "127.0.0.1:0"}
`, pg.DSN("ctl"), tables, pg.DSN("ctl_target"))), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}

	// Writes to both tables from the start to the end.
	wctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stop(); wg.Wait() }()
	wg.Add(1)
	go func() {
		defer wg.Done()
		c, err := pgx.Connect(wctx, pg.DSN("ctl"))
		if err != nil {
			return
		}
		defer c.Close(context.Background())
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-wctx.Done():
				return
			case <-tick.C:
			}
			tb, id := []string{"a", "b"}[i%2], 1+(i*7919)%6000
			_, _ = c.Exec(wctx, fmt.Sprintf(`INSERT INTO %s VALUES (%d, 'w%d') ON CONFLICT (id) DO UPDATE SET v = excluded.v`, tb, id, i))
			if i%5 == 0 {
				_, _ = c.Exec(wctx, fmt.Sprintf(`DELETE FROM %s WHERE id = %d`, tb, 1+(i*104729)%6000))
			}
		}
	}()

	cfg := config("public.a")
	d := startDaemon(t, cfg)
	d.waitAddr(t, time.Minute)
	waitFile(t, filepath.Join(dir, "offsets", "checkpoint.json"), d)
	d.signal(syscall.SIGTERM)
	if code := d.wait(t, time.Minute); code != 0 {
		t.Fatalf("first run exit %d:\n%s", code, d.logs())
	}

	// b joins the pipeline: it is read in chunks while a streams.
	cfg = config("public.a, public.b")
	d = startDaemon(t, cfg)
	addr := d.waitAddr(t, time.Minute)
	waitSnapshotDone(t, d, addr, "public.b", "")

	// The sink loses rows of b behind sluice's back; a filtered
	// re-snapshot reads them again.
	if err := pg.Exec(ctx, "ctl_target", `DELETE FROM public_b WHERE id < 500`); err != nil {
		t.Fatalf("%v\n%s", err, d.logs())
	}
	cmd := exec.Command(sluiceBinary(t), "snapshot", "-c", cfg, "--addr", addr, "--table", "public.b", "--where", "id < 500")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil || !strings.Contains(out.String(), "snapshot of public.b queued") {
		t.Fatalf("sluice snapshot: %v\n%s", err, out.String())
	}
	waitSnapshotDone(t, d, addr, "public.b", "id < 500")

	// Rows only the sink holds (deleted where no change of theirs reached
	// sluice): a full re-snapshot sweeps them after its last chunk
	// (Invariant 14).
	if err := pg.Exec(ctx, "ctl_target",
		`INSERT INTO public_b (id, v, _sluice_version, _sluice_deleted) SELECT g, 'ghost', '\x00'::bytea, false FROM generate_series(90001, 90005) g`); err != nil {
		t.Fatalf("%v\n%s", err, d.logs())
	}
	cmd = exec.Command(sluiceBinary(t), "snapshot", "-c", cfg, "--addr", addr, "--table", "public.b")
	out.Reset()
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil || !strings.Contains(out.String(), "snapshot of public.b queued") {
		t.Fatalf("sluice snapshot: %v\n%s", err, out.String())
	}
	waitUntil(t, d, 2*time.Minute, "the re-snapshot's sweep of the rows only the sink held", func() bool {
		return countRows(ctx, pg.DSN("ctl_target"), "SELECT count(*) FROM public_b WHERE id > 90000 AND NOT _sluice_deleted") == 0
	})

	// The sink's copy of a is damaged behind sluice's back: stale values,
	// lost rows and rows the source never had. `sluice verify --repair`
	// finds them and the daemon reads exactly those keys again, deleting
	// the ghosts.
	if err := pg.Exec(ctx, "ctl_target",
		`UPDATE public_a SET v = 'corrupt' WHERE id % 97 = 0`,
		`DELETE FROM public_a WHERE id BETWEEN 100 AND 120`,
		`INSERT INTO public_a (id, v, _sluice_version, _sluice_deleted) SELECT g, 'ghost', '\x00'::bytea, false FROM generate_series(90001, 90005) g`); err != nil {
		t.Fatalf("%v\n%s", err, d.logs())
	}
	code, vout := runVerify(t, cfg, "--settle", "10s", "--table", "public.a", "--repair", "--addr", addr)
	m := regexp.MustCompile(`repair of (\d+) key\(s\) of public\.a queued`).FindStringSubmatch(vout)
	if code != 1 || m == nil {
		t.Fatalf("sluice verify --repair: exit %d\n%s", code, vout)
	}
	// The writer may have deleted or rewritten some of the damaged rows
	// meanwhile (no longer differing), never the ghosts.
	if n, _ := strconv.Atoi(m[1]); n < 5+15+15 {
		t.Fatalf("repair of %d keys, want the 5 ghosts and most of the 21 lost and ~30 stale rows:\n%s", n, vout)
	}
	waitSnapshotDone(t, d, addr, "public.a", "repair of "+m[1]+" keys")

	// An unknown table is refused with the captured ones named.
	cmd = exec.Command(sluiceBinary(t), "snapshot", "--addr", addr, "--table", "public.nope")
	out.Reset()
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err == nil || !strings.Contains(out.String(), "not captured") {
		t.Fatalf("sluice snapshot of an uncaptured table: %v\n%s", err, out.String())
	}

	stop()
	wg.Wait()
	expectVerifyEqual(t, cfg)
	d.signal(syscall.SIGTERM)
	if code := d.wait(t, time.Minute); code != 0 {
		t.Fatalf("second run exit %d:\n%s", code, d.logs())
	}
}
