package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/integration/harness"
	"github.com/sluice-cdc/sluice/offsets"
	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/sources/generate"
)

// outageCase is one sink under test: the proxy every connection of the
// daemon to the sink's server goes through, and the sink's YAML.
type outageCase struct {
	name   string
	server func(t *testing.T) (proxy *harness.Proxy, sinkYAML string)
}

var outageCases = []outageCase{
	{"postgres", func(t *testing.T) (*harness.Proxy, string) {
		pg := harness.PostgresT(t)
		if err := pg.CreateDatabase(context.Background(), "outage"); err != nil {
			t.Fatal(err)
		}
		p := harness.ProxyT(t, fmt.Sprintf("%s:%d", pg.Host, pg.Port))
		return p, fmt.Sprintf(`postgres: {dsn: "postgres://postgres@%s/outage?sslmode=disable"}`, p.Addr())
	}},
	{"opensearch", func(t *testing.T) (*harness.Proxy, string) {
		n := sharedSearch(t, harness.OpenSearch)
		p := harness.ProxyT(t, fmt.Sprintf("%s:%d", n.Host, n.Port))
		return p, fmt.Sprintf(`opensearch: {urls: ["http://%s"]}`, p.Addr())
	}},
	{"elasticsearch", func(t *testing.T) (*harness.Proxy, string) {
		n := sharedSearch(t, harness.Elasticsearch)
		p := harness.ProxyT(t, fmt.Sprintf("%s:%d", n.Host, n.Port))
		return p, fmt.Sprintf(`elasticsearch: {urls: ["http://%s"]}`, p.Addr())
	}},
	{"redis", func(t *testing.T) (*harness.Proxy, string) {
		rd := harness.RedisT(t)
		p := harness.ProxyT(t, rd.Addr())
		return p, fmt.Sprintf(`redis: {addr: "%s"}`, p.Addr())
	}},
	// Kafka clients connect to the addresses the broker advertises, so the
	// proxy is the broker's own proxied listener; the registry stays
	// direct.
	{"kafka", func(t *testing.T) (*harness.Proxy, string) {
		k, reg := proxiedKafka(t)
		return k.Proxy, fmt.Sprintf(`kafka: {brokers: [%s], registry: {url: "%s"}}`, k.ProxiedBrokers()[0], reg.URL())
	}},
}

// Each sink made unreachable for 20 s in the middle of a stream: the
// pipeline retries without losing anything, the checkpoint does not move
// while the sink cannot have written, and once the sink is back — over a
// slow link (every reply delayed, requests paced at 200 KiB/s, so a full
// 10,000-record write cannot finish within write_timeout) — the lane
// splits its writes until they pass and checkpoints move on; with the
// link back to normal the run completes with the sink equal to the feed.
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
	proxy, sinkYAML := c.server(t)
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
`, opts.Seed, opts.InitialRows, opts.Changes, opts.Rate, opts.Batch, sinkYAML))
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
	// Over the slow link the lane splits its writes and the checkpoint
	// moves on: the pipeline keeps going rather than retrying one batch.
	waitUntil(t, d, 3*time.Minute, "split writes and checkpoints over the slow link", func() bool {
		return metricSum(t, base, "sluice_sink_write_splits_total") > 0 && statusOf(t, base).CheckpointSeq >= frozen+2
	})
	// The rest drains over a link back to normal, and sluice verify
	// compares the sink with the feed's final state.
	proxy.SetLatency(0)
	proxy.SetBandwidth(0)
	if code := d.wait(t, 5*time.Minute); code != 0 {
		t.Fatalf("exit %d after the outage:\n%s", code, d.logs())
	}
	if final := readCheckpointFile(t, filepath.Join(dir, "offsets")).Seq; final <= frozen+1 {
		t.Fatalf("no checkpoint after the outage (still %d)", final)
	}
	expectVerifyEqual(t, cfg)
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
	return metricWith(t, base, name, "")
}

// metricWith sums the series of a metric whose labels contain label (a
// pair such as operator="x"; empty: every series).
func metricWith(t *testing.T, base, name, label string) float64 {
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
		if (strings.HasPrefix(line, name+"{") || strings.HasPrefix(line, name+" ")) && strings.Contains(line, label) {
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
