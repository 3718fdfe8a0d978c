package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/integration/harness"
	"github.com/sluice-cdc/sluice/offsets"
	"github.com/sluice-cdc/sluice/pipeline"
	pgsink "github.com/sluice-cdc/sluice/sinks/postgres"
	redissink "github.com/sluice-cdc/sluice/sinks/redis"
	"github.com/sluice-cdc/sluice/sinks/search"
	"github.com/sluice-cdc/sluice/sinks/sinktest"
	"github.com/sluice-cdc/sluice/sources/generate"
)

// rowReader reads a sink's live rows for verification.
type rowReader interface {
	Open(context.Context) error
	Close(context.Context) error
	Rows(context.Context, *pipeline.Table) ([][]any, error)
}

// outageCase is one sink under test: its YAML (given the address the
// daemon must use, a proxy in front of the server) and a reader of the
// real server.
type outageCase struct {
	name   string
	server func(t *testing.T) (addr string, sinkYAML func(proxy string) string, reader rowReader)
}

var outageCases = []outageCase{
	{"postgres", func(t *testing.T) (string, func(string) string, rowReader) {
		pg := harness.PostgresT(t)
		if err := pg.CreateDatabase(context.Background(), "outage"); err != nil {
			t.Fatal(err)
		}
		yaml := func(proxy string) string {
			return fmt.Sprintf(`postgres: {dsn: "postgres://postgres@%s/outage?sslmode=disable"}`, proxy)
		}
		return fmt.Sprintf("%s:%d", pg.Host, pg.Port), yaml, pgsink.New(pgsink.Options{Name: "check", DSN: pg.DSN("outage")}, nil)
	}},
	{"opensearch", func(t *testing.T) (string, func(string) string, rowReader) {
		n := sharedSearch(t, harness.OpenSearch)
		yaml := func(proxy string) string { return fmt.Sprintf(`opensearch: {urls: ["http://%s"]}`, proxy) }
		return fmt.Sprintf("%s:%d", n.Host, n.Port), yaml,
			search.New(search.Options{Name: "check", Kind: "opensearch", URLs: []string{n.URL}}, nil)
	}},
	{"elasticsearch", func(t *testing.T) (string, func(string) string, rowReader) {
		n := sharedSearch(t, harness.Elasticsearch)
		yaml := func(proxy string) string { return fmt.Sprintf(`elasticsearch: {urls: ["http://%s"]}`, proxy) }
		return fmt.Sprintf("%s:%d", n.Host, n.Port), yaml,
			search.New(search.Options{Name: "check", Kind: "elasticsearch", URLs: []string{n.URL}}, nil)
	}},
	{"redis", func(t *testing.T) (string, func(string) string, rowReader) {
		rd := harness.RedisT(t)
		yaml := func(proxy string) string { return fmt.Sprintf(`redis: {addr: "%s"}`, proxy) }
		return rd.Addr(), yaml, redissink.New(redissink.Options{Name: "check", Addr: rd.Addr()}, nil)
	}},
}

// Each sink made unreachable for 20 s in the middle of a stream: the
// pipeline retries without losing anything, the checkpoint does not move
// while the sink cannot have written, and once the sink is back — over a
// slow link (every reply delayed, requests paced at 200 KiB/s, so a full
// 10,000-record write cannot finish within write_timeout) — the lane
// splits its writes until they pass and the run completes with the sink
// equal to the feed.
func TestSinkUnreachableFor20Seconds(t *testing.T) {
	for _, c := range outageCases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			testOutage(t, c)
		})
	}
}

func testOutage(t *testing.T, c outageCase) {
	const outage = 20 * time.Second
	addr, sinkYAML, reader := c.server(t)
	proxy := harness.ProxyT(t, addr)
	dir := t.TempDir()
	opts := generate.Options{Seed: 11, Tables: 3, InitialRows: 300, Changes: 40000, Rate: 1500, Batch: 100,
		Mix: generate.Mix{Insert: 30, Update: 55, Delete: 15}}
	cfg := writeConfig(t, dir, fmt.Sprintf(`pipeline: outage
source:
  generate: {seed: %d, initial_rows: %d, changes: %d, rate: %g, batch: %d, mix: {insert: 30, update: 55, delete: 15}}
sinks:
  - %s
offsets: {dir: ./offsets}
runtime: {checkpoint_interval: 50ms, write_timeout: 3s, shutdown_timeout: 5m, retry: {initial: 50ms, max: 1s}}
`, opts.Seed, opts.InitialRows, opts.Changes, opts.Rate, opts.Batch, sinkYAML(proxy.Addr())))
	d := startDaemon(t, cfg)
	base := "http://" + d.waitAddr(t, time.Minute)

	// A few checkpoints into the stream, cut the sink off.
	waitUntil(t, d, time.Minute, "first checkpoints", func() bool { return statusOf(t, base).CheckpointSeq >= 3 })
	proxy.Cut()
	cutAt := time.Now()
	// Once the runtime has seen two failed writes, whatever was durable
	// before the cut is committed; from then on nothing may be.
	waitUntil(t, d, outage/2, "failed writes", func() bool { return sinkRetries(t, base) >= 2 })
	frozen := statusOf(t, base).CheckpointSeq
	for time.Since(cutAt) < outage {
		if seq := statusOf(t, base).CheckpointSeq; seq != frozen {
			t.Fatalf("checkpoint moved from %d to %d while the sink was unreachable", frozen, seq)
		}
		time.Sleep(200 * time.Millisecond) // sampling the checkpoint through the outage
	}
	proxy.SetLatency(20 * time.Millisecond)
	proxy.SetBandwidth(200 << 10)
	proxy.Restore()
	if code := d.wait(t, 5*time.Minute); code != 0 {
		t.Fatalf("exit %d after the outage:\n%s", code, d.logs())
	}
	if !strings.Contains(d.logs(), "sink write split") {
		t.Fatalf("no write was split over the slow link:\n%s", d.logs())
	}
	if final := readCheckpointFile(t, filepath.Join(dir, "offsets")).Seq; final <= frozen {
		t.Fatalf("no checkpoint after the outage (still %d)", final)
	}

	expectFeed(t, reader, opts, "after the outage")
}

// expectFeed opens reader and asserts it holds exactly the rows the
// bounded generate feed opts ends with, table by table.
func expectFeed(t *testing.T, reader rowReader, opts generate.Options, when string) {
	t.Helper()
	ctx := context.Background()
	if err := reader.Open(ctx); err != nil {
		t.Fatal(err)
	}
	defer reader.Close(ctx)
	expected := generate.Expected(opts, math.MaxInt64)
	for _, table := range generate.Tables(opts) {
		want := map[string][]any{}
		for _, row := range expected[table.ID] {
			want[sinktest.RowKey(table, row)] = row
		}
		rows, err := reader.Rows(ctx, table)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string][]any{}
		for _, row := range rows {
			got[sinktest.RowKey(table, row)] = row
		}
		if diff := sinktest.Diff(table, want, got); diff != "" {
			t.Fatalf("%T: %s differs from the feed %s:\n%s", reader, table.ID, when, diff)
		}
		t.Logf("%T: %s: %d rows equal to the feed %s", reader, table.ID, len(got), when)
	}
}

// waitUntil polls cond until it holds, the daemon exits or timeout passes.
func waitUntil(t *testing.T, d *daemonProc, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		select {
		case <-d.done:
			t.Fatalf("daemon exited (%d) waiting for %s:\n%s", d.exitCode(), what, d.logs())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s after %s:\n%s", what, timeout, d.logs())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type statusDoc struct {
	CheckpointSeq uint64 `json:"checkpoint_seq"`
}

func statusOf(t *testing.T, base string) statusDoc {
	t.Helper()
	resp, err := http.Get(base + "/status")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var s statusDoc
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

// sinkRetries sums sluice_sink_retries_total.
func sinkRetries(t *testing.T, base string) float64 {
	return metricSum(t, base, "sluice_sink_retries_total")
}

// metricSum sums every series of a metric the daemon at base exports.
func metricSum(t *testing.T, base, name string) float64 {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var n float64
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, name+"{") || strings.HasPrefix(line, name+" ") {
			f := strings.Fields(line)
			v, _ := strconv.ParseFloat(f[len(f)-1], 64)
			n += v
		}
	}
	return n
}

// readCheckpointFile loads the checkpoint a stopped daemon committed.
func readCheckpointFile(t *testing.T, dir string) pipeline.Checkpoint {
	t.Helper()
	store, err := offsets.OpenDir(dir, "outage")
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	cp, ok, err := store.Load(context.Background(), "outage")
	if err != nil || !ok {
		t.Fatalf("checkpoint: %v (found %v)", err, ok)
	}
	return cp
}
