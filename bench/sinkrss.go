package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-cdc/sluice/integration/harness"
)

// PGBacklogSinks is the memory bound of every sink kind (Invariant 6): the
// built binary drains one PostgreSQL backlog of the pg-stream workload
// (2,002,000 changes at the default size) into each sink kind in turn —
// DuckDB, PostgreSQL, Redis, Bleve, OpenSearch, Elasticsearch, Kafka —
// with the config's defaults, and its peak RSS (VmHWM of the daemon
// process, sampled until the slot confirms the backlog's end) is the
// figure, target < 256 MiB each. The drain rate is reported as a ratio to
// pg_recvlogical draining the same backlog in the same run.
//
// Every pipeline first runs once on the empty table, which creates its
// slot and publication (the initial load of nothing); the workload is
// then written once and waits in every slot. Each sink's server starts
// just before its drain and stops after it, so the runs do not compete.
//
// SLUICE_BENCH_SINKS (a comma-separated list of kinds) limits the run;
// SLUICE_BENCH_RUNTIME (a YAML flow mapping, "{memory_limit: 80MiB}")
// sets the runtime settings of every drain, and SLUICE_BENCH_DUCKDB
// (YAML fields, "memory_limit: 64MiB") the DuckDB sink's.
// SLUICE_BENCH_MEMCG_MIB=N (root, a memory cgroup controller) drains each
// kind a second time, from a second slot and into a fresh target, inside
// a memory cgroup limited to N MiB, as a container limit would hold it:
// the kernel reclaims file pages (code, mapped index segments, written
// files) under the limit and kills the daemon if what it cannot reclaim
// passes it, so that drain finishing shows the kind works within N MiB;
// its time is reported as a ratio to the unconstrained drain's.
//
// Toast ("pg-backlog-toast") writes workload (b) instead: every insert
// and update carries a 2 KB value stored out of line, about 4 GiB of
// changes, so the figures show the in-flight byte cap holding with large
// values.
type PGBacklogSinks struct {
	Toast bool
}

// Name implements Scenario.
func (s PGBacklogSinks) Name() string {
	if s.Toast {
		return "pg-backlog-toast"
	}
	return "pg-backlog-sinks"
}

// backlogSink is one sink kind: its server (nil: embedded) and its YAML.
type backlogSink struct {
	kind  string
	start func(ctx context.Context, o RunOptions) (yaml string, stop func(), err error)
}

var backlogSinks = []backlogSink{
	{"duckdb", func(context.Context, RunOptions) (string, func(), error) {
		if v := os.Getenv("SLUICE_BENCH_DUCKDB"); v != "" {
			return `duckdb: {path: ./sink.duckdb, ` + v + `}`, func() {}, nil
		}
		return `duckdb: {path: ./sink.duckdb}`, func() {}, nil
	}},
	{"postgres", func(ctx context.Context, o RunOptions) (string, func(), error) {
		pg, err := harness.StartPostgres(ctx, harness.PostgresOptions{})
		if err != nil {
			return "", nil, err
		}
		if err := pg.CreateDatabase(ctx, "target"); err != nil {
			_ = pg.Stop()
			return "", nil, err
		}
		return fmt.Sprintf(`postgres: {dsn: "%s"}`, pg.DSN("target")), func() { _ = pg.Stop() }, nil
	}},
	{"redis", func(ctx context.Context, o RunOptions) (string, func(), error) {
		rd, err := harness.StartRedis(ctx, harness.RedisOptions{})
		if err != nil {
			return "", nil, err
		}
		return fmt.Sprintf(`redis: {addr: "%s"}`, rd.Addr()), func() { _ = rd.Stop() }, nil
	}},
	{"bleve", func(context.Context, RunOptions) (string, func(), error) {
		return `bleve: {path: ./sink.bleve}`, func() {}, nil
	}},
	{"opensearch", searchBacklogSink(harness.OpenSearch)},
	{"elasticsearch", searchBacklogSink(harness.Elasticsearch)},
	{"kafka", func(ctx context.Context, o RunOptions) (string, func(), error) {
		br, err := startBroker(ctx, o)
		if err != nil {
			return "", nil, err
		}
		return fmt.Sprintf(`kafka: {brokers: [%s], registry: {url: "%s"}}`, br.k.Addr(), br.reg.URL()), br.stop, nil
	}},
}

func searchBacklogSink(engine harness.SearchEngine) func(context.Context, RunOptions) (string, func(), error) {
	return func(ctx context.Context, o RunOptions) (string, func(), error) {
		n, err := harness.StartSearch(ctx, engine, harness.SearchOptions{})
		if err != nil {
			return "", nil, err
		}
		return fmt.Sprintf(`%s: {urls: ["%s"]}`, engine, n.URL), func() { _ = n.Stop() }, nil
	}
}

// Run implements Scenario.
func (s PGBacklogSinks) Run(o RunOptions) ([]Figure, error) {
	rows := o.Rows
	if rows <= 0 {
		rows = 910_000 // 2,002,000 changes
	}
	rows -= rows % 5000
	if rows < 5000 {
		return nil, fmt.Errorf("%s: at least 5000 rows", s.Name())
	}
	var only []string
	if v := os.Getenv("SLUICE_BENCH_SINKS"); v != "" {
		only = strings.Split(v, ",")
	}
	var kinds []backlogSink
	for _, k := range backlogSinks {
		if len(only) == 0 || slices.Contains(only, k.kind) {
			kinds = append(kinds, k)
		}
	}
	// The drains: each kind unconstrained, then in a cgroup if asked.
	type drain struct {
		k     backlogSink
		name  string // pipeline rss_<name>, slot sluice_rss_<name>
		limit int64  // memory cgroup limit in bytes; 0: none
	}
	var drains []drain
	var limitMiB int64
	if v := os.Getenv("SLUICE_BENCH_MEMCG_MIB"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%s: SLUICE_BENCH_MEMCG_MIB=%q: want a positive number of MiB", s.Name(), v)
		}
		limitMiB = n
	}
	for _, k := range kinds {
		drains = append(drains, drain{k: k, name: k.kind})
		if limitMiB > 0 {
			drains = append(drains, drain{k: k, name: k.kind + "_memcg", limit: limitMiB << 20})
		}
	}
	ctx := context.Background()
	pg, err := startPostgres(ctx, o, s.Toast)
	if err != nil {
		return nil, err
	}
	defer pg.stop()
	root, err := os.MkdirTemp("", "sluice-bench-sinks-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(root)

	// One pipeline per kind, each with its slot, created on the empty
	// table; the servers start again for the drain (a sink holds nothing
	// of the workload yet).
	configs := map[string]string{}
	for _, d := range drains {
		k := d.k
		dir := filepath.Join(root, d.name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		yaml, stop, err := k.start(ctx, o)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", k.kind, err)
		}
		cfg := filepath.Join(dir, "sluice.yaml")
		configs[d.name] = cfg
		err = writeBacklogConfig(cfg, d.name, pg.pg.DSN(pgDB), yaml)
		if err == nil {
			err = runUntil(ctx, cfg, filepath.Join(dir, "setup.log"), func() (bool, error) {
				_, err := os.Stat(filepath.Join(dir, "offsets", "checkpoint.json"))
				return err == nil, nil
			})
		}
		stop()
		if err != nil {
			return nil, fmt.Errorf("%s: set up: %w", k.kind, err)
		}
	}
	if _, err := pg.createSlot(ctx, "ref"); err != nil {
		return nil, err
	}
	t0 := time.Now()
	changes, err := pg.writeWorkload(ctx, rows, s.Toast)
	if err != nil {
		return nil, err
	}
	end, err := pg.lsn(ctx, "SELECT pg_current_wal_lsn()::text")
	if err != nil {
		return nil, err
	}
	o.log("%s: %d changes written in %s", s.Name(), changes, time.Since(t0))
	ref, err := pg.recvlogical(ctx, "ref", end)
	if err != nil {
		return nil, err
	}
	figs := []Figure{{Name: "pg_recvlogical drain", Unit: "changes/s", Value: float64(changes) / ref.Seconds()}}

	free := map[string]time.Duration{} // unconstrained drain time per kind
	for _, d := range drains {
		k := d.k
		yaml, stop, err := k.start(ctx, o)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", k.kind, err)
		}
		cfg := configs[d.name]
		if err := writeBacklogConfig(cfg, d.name, pg.pg.DSN(pgDB), yaml); err != nil {
			stop()
			return nil, err
		}
		var cg *memCgroup
		if d.limit > 0 {
			if cg, err = newMemCgroup(fmt.Sprintf("sluice-bench-%d-%s", os.Getpid(), k.kind), d.limit); err != nil {
				stop()
				return nil, err
			}
		}
		slot := "sluice_rss_" + d.name
		var peak memPeak
		t1 := time.Now()
		err = runUntilPeak(ctx, cg, cfg, filepath.Join(filepath.Dir(cfg), "drain.log"), &peak, func() (bool, error) {
			confirmed, err := pg.lsn(ctx, "SELECT coalesce(confirmed_flush_lsn, '0/0')::text FROM pg_replication_slots WHERE slot_name = $1", slot)
			return err == nil && confirmed >= end, err
		})
		took := time.Since(t1)
		stop()
		if cg == nil {
			if err != nil {
				return nil, fmt.Errorf("%s: drain: %w", k.kind, err)
			}
			free[k.kind] = took
			o.log("%s: %s drained %d changes in %s, peak RSS %.0f MiB (anonymous %.0f MiB)", s.Name(), k.kind, changes, took,
				peak.rss/(1<<20), peak.anon/(1<<20))
			figs = append(figs,
				Figure{Name: k.kind + " peak RSS", Unit: "MiB", Value: peak.rss / (1 << 20), Target: "< 256"},
				Figure{Name: k.kind + " peak anonymous RSS", Unit: "MiB", Value: peak.anon / (1 << 20)},
				Figure{Name: k.kind + " drain / pg_recvlogical", Unit: "ratio", Value: ref.Seconds() / took.Seconds()})
			continue
		}
		charged, perr := cg.peak()
		kills, kerr := cg.oomKills()
		if rerr := cg.remove(); rerr != nil {
			o.log("%s: remove %s: %v", s.Name(), cg.dir, rerr)
		}
		if err = errors.Join(err, perr, kerr); err == nil && kills > 0 {
			err = fmt.Errorf("killed %d times for the cgroup's limit", kills)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: drain in a %d MiB memory cgroup: %w", k.kind, limitMiB, err)
		}
		o.log("%s: %s drained %d changes in %s inside a %d MiB memory cgroup, peak RSS %.0f MiB (anonymous %.0f MiB), peak charge %.0f MiB",
			s.Name(), k.kind, changes, took, limitMiB, peak.rss/(1<<20), peak.anon/(1<<20), charged/(1<<20))
		lim := fmt.Sprintf(" in a %d MiB cgroup", limitMiB)
		figs = append(figs,
			Figure{Name: k.kind + " peak RSS" + lim, Unit: "MiB", Value: peak.rss / (1 << 20), Target: fmt.Sprintf("< %d", limitMiB)},
			Figure{Name: k.kind + " peak anonymous RSS" + lim, Unit: "MiB", Value: peak.anon / (1 << 20)},
			Figure{Name: k.kind + " drain" + lim + " / unconstrained", Unit: "ratio", Value: free[k.kind].Seconds() / took.Seconds()})
	}
	return figs, nil
}

func writeBacklogConfig(path, kind, dsn, sinkYAML string) error {
	runtime := ""
	if v := os.Getenv("SLUICE_BENCH_RUNTIME"); v != "" {
		runtime = "runtime: " + v + "\n"
	}
	return os.WriteFile(path, []byte(fmt.Sprintf(`pipeline: rss_%s
source:
  postgres:
    dsn: "%s"
    tables: [%s]
sinks:
  - %s
offsets: {dir: ./offsets}
http: {listen: "127.0.0.1:0", pprof: %t}
%s`, kind, dsn, pgTable, sinkYAML, os.Getenv("SLUICE_BENCH_PPROF") != "", runtime)), 0o644)
}

// runUntil runs the daemon on cfg until done reports true, then stops it.
func runUntil(ctx context.Context, cfg, logPath string, done func() (bool, error)) error {
	var peak memPeak
	return runUntilPeak(ctx, nil, cfg, logPath, &peak, done)
}

// memPeak is a daemon's peak RSS (VmHWM, exact) and the highest
// anonymous RSS seen (sampled, so it may miss a spike shorter than the
// sampling period).
type memPeak struct{ rss, anon float64 }

// runUntilPeak is runUntil that also keeps the daemon's peak memory, read
// every 100 ms and last just before it is stopped (VmHWM only grows),
// inside the memory cgroup cg (nil: none).
func runUntilPeak(ctx context.Context, cg *memCgroup, cfg, logPath string, peak *memPeak, done func() (bool, error)) error {
	d, err := startDaemonIn(cg, cfg, "", logPath)
	if err != nil {
		return err
	}
	pid := fmt.Sprint(d.cmd.Process.Pid)
	deadline := time.Now().Add(30 * time.Minute)
	for {
		peak.rss = max(peak.rss, peakRSSOf(pid))
		peak.anon = max(peak.anon, anonRSSOf(pid))
		ok, err := done()
		if ok {
			d.stop()
			return nil
		}
		select {
		case <-d.exited:
			d.log.Close()
			return fmt.Errorf("daemon exited: %s", tailFile(logPath, 20))
		default:
		}
		if err != nil && !strings.Contains(err.Error(), "no rows") {
			d.stop()
			return err
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			d.stop()
			return errors.Join(errors.New("did not finish within 30 minutes: "+tailFile(logPath, 20)), ctx.Err())
		}
		time.Sleep(100 * time.Millisecond) // the sampling period
	}
}
