package integration

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-cdc/sluice/integration/harness"
)

// runVerify runs `sluice verify` on cfg with args and returns its exit
// code and output.
func runVerify(t *testing.T, cfg string, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(sluiceBinary(t), append([]string{"verify", "-c", cfg}, args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err != nil && cmd.ProcessState == nil {
		t.Fatal(err)
	}
	return cmd.ProcessState.ExitCode(), out.String()
}

// `sluice verify` beside a running pipeline under a concurrent write
// load: equal for the Postgres and Redis sinks (changes in flight are
// rechecked after the checkpoint passes them, not reported); a row changed
// behind sluice's back in either is found, with its key and column; the
// embedded DuckDB sink, held by the daemon, cannot be compared (exit 2)
// until the daemon stops, and then it is equal until a row is changed in
// it too.
func TestVerifyFindsTamperedRowsWhileStreaming(t *testing.T) {
	pg := harness.PostgresT(t)
	rd := harness.RedisT(t)
	ctx := context.Background()
	for _, db := range []string{"vsrc", "vdst"} {
		if err := pg.CreateDatabase(ctx, db); err != nil {
			t.Fatal(err)
		}
	}
	if err := pg.Exec(ctx, "vsrc", `CREATE TABLE t (id int PRIMARY KEY, v text, n numeric(12,2), at timestamptz, f float8)`,
		`INSERT INTO t SELECT g, 'v' || g, g / 4.0, timestamptz '2024-01-01' + g * interval '1 minute', -g * 0.5 FROM generate_series(1, 2000) g`); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg := writeConfig(t, dir, fmt.Sprintf(`pipeline: vt
source:
  postgres:
    dsn: %s
    tables: [public.t]
    heartbeat_interval: 200ms
sinks:
  - postgres: {dsn: "%s"}
  - redis: {addr: "%s"}
  - duckdb: {path: ./sink.duckdb}
offsets: {dir: ./offsets}
runtime: {checkpoint_interval: 50ms}
`, pg.DSN("vsrc"), pg.DSN("vdst"), rd.Addr()))

	// Writers touch ids 1..1000 (and insert above 3000) the whole time;
	// the tampered rows are in 1001..2000.
	wctx, stopWrites := context.WithCancel(ctx)
	var writes atomic.Int64
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := pgx.Connect(ctx, pg.DSN("vsrc"))
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close(ctx)
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for next := 3001 + w*1000000; wctx.Err() == nil; {
				id := 1 + rng.IntN(1000)
				var err error
				switch rng.IntN(5) {
				case 0:
					_, err = c.Exec(ctx, `DELETE FROM t WHERE id = $1`, id)
				case 1:
					_, err = c.Exec(ctx, `INSERT INTO t VALUES ($1, 'new', 1.5, now(), 0) ON CONFLICT (id) DO UPDATE SET v = 'back'`, next)
					next++
				default:
					_, err = c.Exec(ctx, `UPDATE t SET v = v || '+', n = n + 0.25, f = f * -1 WHERE id = $1`, id)
				}
				if err != nil && wctx.Err() == nil {
					t.Error(err)
					return
				}
				writes.Add(1)
				time.Sleep(time.Millisecond) // a steady load, not a saturating one
			}
		}()
	}
	defer func() { stopWrites(); wg.Wait() }()

	d := startDaemon(t, cfg)
	d.waitAddr(t, time.Minute)
	waitFile(t, filepath.Join(dir, "offsets", "checkpoint.json"), d)

	for _, sink := range []string{"postgres", "redis"} {
		if code, out := runVerify(t, cfg, "--sink", sink); code != 0 {
			t.Fatalf("verify %s under load: exit %d\n%s", sink, code, out)
		}
	}
	if code, out := runVerify(t, cfg); code != 2 || !strings.Contains(out, "duckdb") || !strings.Contains(out, "not compared") {
		t.Fatalf("verify with the DuckDB file held by the daemon: exit %d\n%s", code, out)
	}

	// Behind sluice's back: a value in the Postgres sink, a value in Redis.
	if err := pg.Exec(ctx, "vdst", `UPDATE public_t SET v = 'tampered' WHERE id = 1500`); err != nil {
		t.Fatal(err)
	}
	code, out := runVerify(t, cfg, "--sink", "postgres")
	if code != 1 || !strings.Contains(out, `key int64:1500 column v: source string:"v1500", sink string:"tampered"`) {
		t.Fatalf("verify after tampering with the Postgres sink: exit %d\n%s", code, out)
	}
	rc := goredis.NewClient(&goredis.Options{Addr: rd.Addr()})
	defer rc.Close()
	doc, err := rc.Get(ctx, "public.t:1700").Bytes()
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(doc, &m); err != nil {
		t.Fatal(err)
	}
	m["n"] = "999.00"
	doc, _ = json.Marshal(m)
	if err := rc.Set(ctx, "public.t:1700", doc, 0).Err(); err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Outcome string `json:"outcome"`
		Results []struct {
			Sink      string `json:"sink"`
			Differing int    `json:"differing"`
			Diffs     []struct {
				Key     string `json:"key"`
				Columns []struct{ Column, Source, Sink string }
			} `json:"diffs"`
		} `json:"results"`
	}
	code, out = runVerify(t, cfg, "--sink", "redis", "--json")
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("--json: %v\n%s", err, out)
	}
	if code != 1 || rep.Outcome != "different" || len(rep.Results) != 1 || rep.Results[0].Differing != 1 ||
		rep.Results[0].Diffs[0].Key != "int64:1700" || rep.Results[0].Diffs[0].Columns[0].Column != "n" {
		t.Fatalf("verify after tampering with Redis: exit %d\n%s", code, out)
	}

	// Stop the load and the daemon: the DuckDB file can be read.
	stopWrites()
	wg.Wait()
	mark := commitMarkOn(t, ctx, pg.DSN("vsrc"), `UPDATE t SET v = 'mark' WHERE id = 1`)
	waitSlotConfirmed(t, ctx, pg.DSN("vsrc"), "sluice_vt", mark, d)
	d.signal(syscall.SIGTERM)
	if code := d.wait(t, time.Minute); code != 0 {
		t.Fatalf("exit %d:\n%s", code, d.logs())
	}
	if code, out := runVerify(t, cfg, "--sink", "duckdb", "--settle", "5s"); code != 0 {
		t.Fatalf("verify duckdb after the stop: exit %d\n%s", code, out)
	}
	db, err := sql.Open("duckdb", filepath.Join(dir, "sink.duckdb"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`UPDATE main.public_t SET f = 0.25 WHERE id = 1900`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	code, out = runVerify(t, cfg, "--sink", "duckdb", "--settle", "5s")
	if code != 1 || !strings.Contains(out, "key int64:1900 column f: source float64:-950, sink float64:0.25") {
		t.Fatalf("verify after tampering with DuckDB: exit %d\n%s", code, out)
	}
	t.Logf("%d concurrent writes during the run", writes.Load())
}

// expectVerifyEqual runs `sluice verify` on a stopped pipeline's config
// and fails unless every sink it can read equals the source.
func expectVerifyEqual(t *testing.T, cfg string, args ...string) {
	t.Helper()
	if code, out := runVerify(t, cfg, append([]string{"--settle", "10s"}, args...)...); code != 0 {
		t.Fatalf("sluice verify: exit %d\n%s", code, out)
	}
}
