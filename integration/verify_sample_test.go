package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
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

// Continuous verification (verify.sample) in the running daemon, under a
// concurrent write load on a few hot keys: a sink row that a forged high
// version froze (so the sink ignores the real change: the "newer change
// sorts lower" loss this project guards against) is counted as a mismatch
// in that sink, once, and logged with its key and column; the hot keys,
// checked again and again while they change, never are.
func TestContinuousVerificationCountsMismatches(t *testing.T) {
	pg := harness.PostgresT(t)
	rd := harness.RedisT(t)
	ctx := context.Background()
	for _, db := range []string{"csrc", "cdst"} {
		if err := pg.CreateDatabase(ctx, db); err != nil {
			t.Fatal(err)
		}
	}
	if err := pg.Exec(ctx, "csrc", `CREATE TABLE t (id int PRIMARY KEY, v text, n bigint)`,
		`INSERT INTO t SELECT g, 'v' || g, g FROM generate_series(1, 500) g`); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg := writeConfig(t, dir, fmt.Sprintf(`pipeline: cv
source:
  postgres:
    dsn: %s
    tables: [public.t]
    heartbeat_interval: 200ms
sinks:
  - postgres: {dsn: "%s"}
  - redis: {addr: "%s"}
  - duckdb: {path: ./sink.duckdb}
  - bleve: {path: ./sink.bleve}
offsets: {dir: ./offsets}
runtime: {checkpoint_interval: 50ms}
verify:
  sample: {rate: 1, delay: 300ms, interval: 200ms, max_keys_per_second: 5000}
`, pg.DSN("csrc"), pg.DSN("cdst"), rd.Addr()))
	d := startDaemon(t, cfg)
	base := "http://" + d.waitAddr(t, time.Minute)
	waitFile(t, filepath.Join(dir, "offsets", "checkpoint.json"), d)

	// Behind sluice's back, rows frozen at a version above anything the
	// pipeline will write: key 77 in the Postgres sink, key 88 in Redis.
	if err := pg.Exec(ctx, "cdst", `UPDATE public_t SET v = 'frozen', _sluice_version = '\xffffffffffffffffffffffffffffffffffffffff' WHERE id = 77`); err != nil {
		t.Fatal(err)
	}
	rc := goredis.NewClient(&goredis.Options{Addr: rd.Addr()})
	defer rc.Close()
	doc, err := rc.Get(ctx, "public.t:88").Bytes()
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(doc, &m); err != nil {
		t.Fatal(err)
	}
	m["_v"], m["n"] = strings.Repeat("z", 40), "-1"
	if doc, err = json.Marshal(m); err != nil {
		t.Fatal(err)
	}
	if err := rc.Set(ctx, "public.t:88", doc, 0).Err(); err != nil {
		t.Fatal(err)
	}

	// Two writers keep changing keys 1..20 (each is checked, found changed
	// again during its check, and checked at a later change) and touch the
	// rest now and then.
	wctx, stopWrites := context.WithCancel(ctx)
	var writes atomic.Int64
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := pgx.Connect(ctx, pg.DSN("csrc"))
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close(ctx)
			rng := rand.New(rand.NewPCG(uint64(w), 11))
			for wctx.Err() == nil {
				id := 1 + rng.IntN(20)
				if rng.IntN(4) == 0 {
					id = 100 + rng.IntN(300)
				}
				if _, err := c.Exec(ctx, `UPDATE t SET n = n + 1, v = v || '.' WHERE id = $1`, id); err != nil {
					t.Error(err)
					return
				}
				writes.Add(1)
				time.Sleep(time.Millisecond) // a steady load, not a saturating one
			}
		}()
	}
	defer func() { stopWrites(); wg.Wait() }()
	if err := pg.Exec(ctx, "csrc", `UPDATE t SET v = 'real', n = 7700 WHERE id = 77`, `UPDATE t SET n = 8800 WHERE id = 88`); err != nil {
		t.Fatal(err)
	}

	mismatches := func(sink string) float64 {
		return metricWith(t, base, "sluice_verify_mismatches_total", `sink="`+sink+`"`)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for mismatches("postgres") < 1 || mismatches("redis") < 1 || metricWith(t, base, "sluice_verify_checked_total", `sink="redis"`) < 200 {
		if time.Now().After(deadline) {
			t.Fatalf("mismatches postgres %v redis %v, checked %v after 2m\n%s", mismatches("postgres"), mismatches("redis"),
				metricSum(t, base, "sluice_verify_checked_total"), d.logs())
		}
		time.Sleep(100 * time.Millisecond)
	}
	stopWrites()
	wg.Wait()
	// Let every sampled key of the load be checked: a last change,
	// checked once the checkpoint covers it.
	mark := commitMarkOn(t, ctx, pg.DSN("csrc"), `UPDATE t SET v = 'last' WHERE id = 400`)
	waitSlotConfirmed(t, ctx, pg.DSN("csrc"), "sluice_cv", mark, d)
	checked := func() float64 { return metricSum(t, base, "sluice_verify_checked_total") }
	for before := checked(); checked() == before; {
		if time.Now().After(deadline) {
			t.Fatalf("no key checked after the load stopped\n%s", d.logs())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if p, r := mismatches("postgres"), mismatches("redis"); p != 1 || r != 1 {
		t.Fatalf("mismatches: postgres %v, redis %v; want exactly the frozen key in each\n%s", p, r, d.logs())
	}
	// The embedded sinks, read in the daemon's process while it writes
	// them, hold every key.
	for _, sink := range []string{"duckdb", "bleve"} {
		checked := metricWith(t, base, "sluice_verify_checked_total", `sink="`+sink+`"`)
		if m := mismatches(sink); m != 0 || checked < 200 {
			t.Fatalf("%s: %v keys equal, %v mismatches\n%s", sink, checked, m, d.logs())
		}
	}
	logs := d.logs()
	for _, want := range []string{`"sink":"postgres","table":"public.t","key":"int64:77","kind":"values","columns":"v: source string:\"real\", sink string:\"frozen\"; n: source int64:7700, sink int64:77"`,
		`"sink":"redis","table":"public.t","key":"int64:88","kind":"values","columns":"n: source int64:8800, sink int64:-1"`} {
		if !strings.Contains(logs, want) {
			t.Fatalf("the log does not name the mismatch %s:\n%s", want, logs)
		}
	}
	t.Logf("%d concurrent writes; %v key checks equal, %v inconclusive (changed during their check)",
		writes.Load(), metricSum(t, base, "sluice_verify_checked_total"), metricSum(t, base, "sluice_verify_inconclusive_total"))
	d.signal(syscall.SIGTERM)
	if code := d.wait(t, time.Minute); code != 0 {
		t.Fatalf("exit %d:\n%s", code, d.logs())
	}
}
