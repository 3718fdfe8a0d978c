package integration

import (
	"context"
	"errors"
	"fmt"
	"os"
	osexec "os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"go.uber.org/zap"

	"github.com/sluice-cdc/sluice/bench"
	"github.com/sluice-cdc/sluice/integration/harness"
	"github.com/sluice-cdc/sluice/offsets"
	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/schema"
	"github.com/sluice-cdc/sluice/schema/schematest"
	kafkasink "github.com/sluice-cdc/sluice/sinks/kafka"
	"github.com/sluice-cdc/sluice/sources/postgres"
)

// BenchmarkPostgresToKafka measures sluice end to end, Postgres → Kafka
// (Avro, Debezium envelope, acks=all, zstd, a real broker on loopback),
// against pg_recvlogical draining the same changes in the same run:
//
//	go test -run '^$' -bench PostgresToKafka -benchtime 1x -timeout 30m ./integration/
//
// SLUICE_BENCH_ROWS overrides the number of inserted rows (default
// 1,000,000 in transactions of 10,000, a 6-column table);
// SLUICE_BENCH_LATENCY overrides the length of the latency phase (default
// 20s); SLUICE_BENCH_LINGER sets the runtime's batch linger of the latency
// phase (default: the config default, 100ms). PostgreSQL and the broker are required (missing: skipped, failed
// in CI); the schema registry is the harness's real one when it starts,
// else the in-process schematest double (the log says which).
//
// Every throughput consumer has its own pgoutput slot, all created before
// the writes. The order is:
//
//  1. warm-up: pg_recvlogical drains a throwaway slot (not reported);
//  2. reference: pg_recvlogical --endpos <wal lsn after the writes> -f /dev/null;
//  3. kafka: pipeline.Runtime with the postgres source (snapshot "never",
//     resuming at its slot's consistent point), the Kafka sink
//     (kafka.Defaults: Debezium envelope, acks=all, idempotent, zstd) and a
//     directory offset store, until the runtime reports every row written,
//     i.e. acknowledged by the broker; the topic's end offset is checked;
//  4. reference again on a second slot; the ratio uses the mean of 2 and 4;
//  5. latency: a new slot and pipeline (same sink settings, its own topic)
//     while a writer commits 50 rows every 10ms (5,000 rows/s, on a
//     schedule that catches up rather than drops ticks); the commit-to-ack
//     latency of each transaction is the time the sink's Write returned for
//     the batch holding it minus the server's commit timestamp (the record's
//     EventTime). The first 2s are a warm-up and not counted.
//
// Reported: rows/s, kafka_vs_recvlogical, CPU seconds per million rows of
// this process (getrusage RUSAGE_SELF: source, runtime, sink, producer; not
// the broker nor the server), the broker's and the walsender's CPU over
// the same phase (from /proc), peak RSS (VmHWM, reset through
// /proc/self/clear_refs before the phase, so it is the phase's peak of the
// whole test process), p50/p99 latency and the load average.
func BenchmarkPostgresToKafka(b *testing.B) {
	rows := 1_000_000
	if v := os.Getenv("SLUICE_BENCH_ROWS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			b.Fatalf("SLUICE_BENCH_ROWS=%q: want a positive integer", v)
		}
		rows = n
	}
	latFor := 20 * time.Second
	if v := os.Getenv("SLUICE_BENCH_LATENCY"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 2*time.Second {
			b.Fatalf("SLUICE_BENCH_LATENCY=%q: want a duration above 2s", v)
		}
		latFor = d
	}
	var linger time.Duration
	if v := os.Getenv("SLUICE_BENCH_LINGER"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			b.Fatalf("SLUICE_BENCH_LINGER=%q: want a positive duration", v)
		}
		linger = d
	}
	b.StopTimer()
	load0 := bkLoadAvg()
	e := bkStart(b)
	e.linger = linger
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	e.ctx = ctx
	e.setup()

	slots := []string{"bk_warm", "bk_ref1", "bk_kafka", "bk_ref2"}
	for _, s := range slots {
		e.createSlot(s)
	}
	t0 := time.Now()
	e.writeRows(1, rows, bkTxnRows)
	writeTook := time.Since(t0)
	endLSN := e.lsn("SELECT pg_current_wal_lsn()::text")
	b.Logf("wrote %d rows in %d transactions in %s; %.1f MiB of WAL; registry: %s",
		rows, (rows+bkTxnRows-1)/bkTxnRows, writeTook.Round(time.Millisecond),
		float64(endLSN-e.start["bk_warm"])/(1<<20), e.regKind)

	b.StartTimer()
	warm := e.recvlogical("bk_warm", endLSN)
	ref1 := e.recvlogical("bk_ref1", endLSN)
	kp := e.drainKafka("bk_kafka", rows)
	ref2 := e.recvlogical("bk_ref2", endLSN)
	b.StopTimer()
	lat := e.latency(rows+1, latFor)
	load1 := bkLoadAvg()

	refRate := (ref1.rate(rows) + ref2.rate(rows)) / 2
	var tb strings.Builder
	fmt.Fprintf(&tb, "%d rows, 6 columns, %d rows/txn; Kafka %s (acks=all, zstd, Debezium Avro); registry: %s\n",
		rows, bkTxnRows, harness.KafkaVersion, e.regKind)
	fmt.Fprintf(&tb, "%-28s %8s %10s %7s %13s %13s %15s\n", "consumer", "seconds", "rows/s", "ratio",
		"client CPU-s/M", "broker CPU-s/M", "walsender CPU-s/M")
	for _, x := range []struct {
		name string
		r    bkResult
	}{{"pg_recvlogical (warm-up)", warm}, {"pg_recvlogical", ref1}, {"sluice → kafka", kp}, {"pg_recvlogical (again)", ref2}} {
		fmt.Fprintf(&tb, "%-28s %8.2f %10.0f %6.2fx %13.2f %13.2f %15.2f\n", x.name, x.r.wall.Seconds(), x.r.rate(rows),
			x.r.rate(rows)/refRate, x.r.perM(x.r.cpu, rows), x.r.perM(x.r.brokerCPU, rows), x.r.perM(x.r.walsenderCPU, rows))
	}
	fmt.Fprintf(&tb, "kafka phase: peak RSS %.0f MiB (VmHWM of the test process during the phase), Go heap in use at end %.0f MiB; %s\n",
		kp.peakRSS/(1<<20), kp.heapEnd/(1<<20), kp.note)
	lingerText := "100ms (default)"
	if linger > 0 {
		lingerText = linger.String() + " (SLUICE_BENCH_LINGER)"
	}
	fmt.Fprintf(&tb, "latency phase: runtime batch linger %s, producer linger 5ms\n", lingerText)
	fmt.Fprintf(&tb, "latency at %.0f rows/s offered (%.0f achieved, writer max behind %s) over %s: %d transactions, "+
		"commit-to-ack p50 %.1f ms, p90 %.1f ms, p99 %.1f ms, max %.1f ms; peak RSS %.0f MiB\n",
		float64(bkLatRows)/bkLatEvery.Seconds(), lat.achieved, lat.behind.Round(time.Millisecond), latFor, lat.n,
		lat.p50, lat.p90, lat.p99, lat.max, lat.peakRSS/(1<<20))
	fmt.Fprintf(&tb, "process peak RSS over the run (VmHWM max): %.0f MiB; load average %s at start, %s at end",
		e.maxHWM()/(1<<20), load0, load1)
	b.Log("\n" + tb.String())

	b.ReportMetric(refRate, "recvlogical_rows/s")
	b.ReportMetric(kp.rate(rows), "kafka_rows/s")
	b.ReportMetric(kp.rate(rows)/refRate, "kafka_vs_recvlogical")
	b.ReportMetric(kp.perM(kp.cpu, rows), "cpu_s_per_M")
	b.ReportMetric(kp.perM(kp.brokerCPU, rows), "broker_cpu_s_per_M")
	b.ReportMetric(kp.peakRSS/(1<<20), "peak_rss_MiB")
	b.ReportMetric(lat.p50, "p50_ms")
	b.ReportMetric(lat.p99, "p99_ms")
}

const (
	bkDB       = "bench"
	bkTable    = "public.bench_rows"
	bkPub      = "sluice_bench"
	bkTxnRows  = 10_000
	bkLatRows  = 50
	bkLatEvery = 10 * time.Millisecond
	bkWarmUp   = 2 * time.Second
)

type bkEnv struct {
	b       *testing.B
	ctx     context.Context
	pg      *harness.Postgres
	k       *harness.Kafka
	reg     schema.Registry
	regKind string
	pool    *pgxpool.Pool
	start   map[string]pglogrepl.LSN
	hwm     []float64     // VmHWM readings (bytes), before each reset
	linger  time.Duration // runtime batch linger of the latency phase; 0: the default (100ms)
}

// bkResult is one consumer's drain.
type bkResult struct {
	wall         time.Duration
	cpu          float64 // CPU seconds of the consumer process
	brokerCPU    float64 // CPU seconds of the broker over the same time
	walsenderCPU float64 // CPU seconds of the walsender (sampled, approximate)
	peakRSS      float64 // bytes
	heapEnd      float64 // bytes
	note         string
}

func (r bkResult) rate(rows int) float64              { return float64(rows) / r.wall.Seconds() }
func (r bkResult) perM(cpu float64, rows int) float64 { return cpu / float64(rows) * 1e6 }

// bkStart starts PostgreSQL, the broker and the registry in parallel. The
// registry falls back to the schematest double when it does not start.
func bkStart(b *testing.B) *bkEnv {
	b.Helper()
	ctx := context.Background()
	var (
		wg          sync.WaitGroup
		pg          *harness.Postgres
		k           *harness.Kafka
		reg         *harness.Registry
		pgErr, kErr error
		regErr      error
	)
	wg.Add(3)
	go func() { defer wg.Done(); pg, pgErr = harness.StartPostgres(ctx, harness.PostgresOptions{}) }()
	go func() { defer wg.Done(); k, kErr = harness.StartKafka(ctx, harness.KafkaOptions{}) }()
	go func() { defer wg.Done(); reg, regErr = harness.StartRegistry(ctx, harness.RegistryOptions{}) }()
	wg.Wait()
	if pg != nil {
		b.Cleanup(func() { _ = pg.Stop() })
	}
	if k != nil {
		b.Cleanup(func() { _ = k.Stop() })
	}
	if reg != nil {
		b.Cleanup(func() { _ = reg.Stop() })
	}
	if err := errors.Join(pgErr, kErr); err != nil {
		harness.SkipOrFail(b, err)
	}
	e := &bkEnv{b: b, pg: pg, k: k, start: map[string]pglogrepl.LSN{}}
	if reg != nil {
		e.reg = schema.NewSRClient(reg.URL(), schema.SRClientOptions{})
		e.regKind = "Apicurio " + harness.RegistryVersion + " (harness, separate JVM)"
	} else {
		d := schematest.New(b)
		e.reg = schema.NewSRClient(d.URL, schema.SRClientOptions{})
		e.regKind = fmt.Sprintf("schematest double, in-process (harness registry did not start: %v)", regErr)
	}
	return e
}

func (e *bkEnv) setup() {
	e.b.Helper()
	if err := e.pg.CreateDatabase(e.ctx, bkDB); err != nil {
		e.b.Fatal(err)
	}
	if err := e.pg.Exec(e.ctx, bkDB,
		`CREATE TABLE `+bkTable+` (id bigint PRIMARY KEY, qty integer NOT NULL, label text NOT NULL,
			amount numeric(12,2) NOT NULL, created_at timestamptz NOT NULL, active boolean NOT NULL)`,
		`CREATE PUBLICATION `+bkPub+` FOR TABLE `+bkTable); err != nil {
		e.b.Fatal(err)
	}
	pool, err := pgxpool.New(e.ctx, e.pg.DSN(bkDB))
	if err != nil {
		e.b.Fatal(err)
	}
	e.b.Cleanup(pool.Close)
	e.pool = pool
}

func (e *bkEnv) lsn(q string, args ...any) pglogrepl.LSN {
	e.b.Helper()
	var s string
	if err := e.pool.QueryRow(e.ctx, q, args...).Scan(&s); err != nil {
		e.b.Fatalf("%s: %v", q, err)
	}
	l, err := pglogrepl.ParseLSN(s)
	if err != nil {
		e.b.Fatal(err)
	}
	return l
}

func (e *bkEnv) createSlot(name string) {
	e.start[name] = e.lsn("SELECT lsn::text FROM pg_create_logical_replication_slot($1, 'pgoutput')", name)
}

const bkInsert = `INSERT INTO ` + bkTable + `
	SELECT g, (g % 100000)::int, 'customer-' || g, ((g % 10000000) / 100.0)::numeric(12,2),
		timestamptz '2024-01-01 00:00:00+00' + g * interval '1 second', g % 2 = 0
	FROM generate_series($1::bigint, $2::bigint) g`

// writeRows inserts ids first..first+n-1 in transactions of per rows.
func (e *bkEnv) writeRows(first, n, per int) {
	e.b.Helper()
	for lo := first; lo < first+n; lo += per {
		hi := min(lo+per-1, first+n-1)
		if _, err := e.pool.Exec(e.ctx, bkInsert, lo, hi); err != nil {
			e.b.Fatal(err)
		}
	}
}

// recvlogical runs pg_recvlogical on slot up to endLSN into /dev/null,
// with the session settings of sluice's connections.
func (e *bkEnv) recvlogical(slot string, endLSN pglogrepl.LSN) bkResult {
	e.b.Helper()
	cmd := osexec.CommandContext(e.ctx, filepath.Join(e.pg.BinDir, "pg_recvlogical"),
		"-d", e.pg.DSN(bkDB), "--slot", slot, "--start", "--no-loop",
		"-o", "proto_version=2", "-o", "publication_names="+bkPub,
		"--endpos", endLSN.String(), "-f", "/dev/null")
	var opts []string
	for k, v := range postgres.SessionSettings {
		opts = append(opts, "-c "+k+"="+v)
	}
	cmd.Env = append(os.Environ(), "PGOPTIONS="+strings.Join(opts, " "), "PGAPPNAME=bench_recvlogical")
	ws := e.sampleWalsender(slot)
	t0 := time.Now()
	out, err := cmd.CombinedOutput()
	wall := time.Since(t0)
	wcpu := ws()
	if err != nil {
		e.b.Fatalf("pg_recvlogical: %v\n%s", err, out)
	}
	st := cmd.ProcessState
	return bkResult{wall: wall, cpu: (st.UserTime() + st.SystemTime()).Seconds(), walsenderCPU: wcpu}
}

// sinkOptions are the config defaults of the Kafka sink; prefix names the
// topic ({prefix}.public.bench_rows) and the Avro namespace.
func (e *bkEnv) sinkOptions(prefix string) kafkasink.Options {
	o := kafkasink.Defaults(e.k.Brokers(), prefix)
	o.Version = "bench"
	return o
}

// pipelineFor builds a runtime from slot (resuming at its consistent point)
// to a Kafka sink wrapped in wrap.
func (e *bkEnv) pipelineFor(slot, prefix string, linger time.Duration, wrap func(pipeline.Sink) pipeline.Sink) (*pipeline.Runtime, func()) {
	e.b.Helper()
	dir := e.b.TempDir()
	store, err := offsets.OpenDir(filepath.Join(dir, "offsets"), prefix)
	if err != nil {
		e.b.Fatal(err)
	}
	from := postgres.Position{Phase: postgres.PhaseStream, Slot: slot, LSN: e.start[slot]}.Encode()
	if err := store.Commit(e.ctx, pipeline.Checkpoint{Pipeline: prefix, Position: []byte(from), Seq: 1,
		CommittedAt: time.Now().UTC()}); err != nil {
		e.b.Fatal(err)
	}
	src, err := postgres.New(postgres.Options{
		Pipeline: prefix, DSN: e.pg.DSN(bkDB), Tables: []string{bkTable}, Publication: bkPub, Slot: slot,
		// No heartbeat: every record is a row.
		HeartbeatInterval: time.Hour,
		Snapshot:          postgres.SnapshotOptions{Mode: postgres.SnapshotNever},
	}, zap.NewNop(), nil)
	if err != nil {
		e.b.Fatal(err)
	}
	// Warnings (a failed sink write, …) go to stderr.
	log, err := zap.NewDevelopment(zap.IncreaseLevel(zap.WarnLevel))
	if err != nil {
		e.b.Fatal(err)
	}
	ks, err := kafkasink.New(e.sinkOptions(prefix), e.reg, log)
	if err != nil {
		e.b.Fatal(err)
	}
	var sink pipeline.Sink = ks
	if wrap != nil {
		sink = wrap(ks)
	}
	// The config defaults, except that a sink write failing 5 times in a
	// row fails the run instead of retrying for ever.
	rt, err := pipeline.New(pipeline.Config{Pipeline: prefix, RetryMaxAttempts: 5, BatchLinger: linger}, src,
		[]pipeline.NamedSink{{Name: "kafka", Sink: sink}}, store, pipeline.Options{Log: log})
	if err != nil {
		e.b.Fatal(err)
	}
	return rt, func() { _ = store.Close() }
}

// drainKafka runs the pipeline from slot until the runtime reports every
// row written (acknowledged by the broker), then stops it and checks the
// topic's end offset.
func (e *bkEnv) drainKafka(slot string, rows int) (res bkResult) {
	e.b.Helper()
	const prefix = "bench"
	pprof.Do(e.ctx, pprof.Labels("phase", "kafka"), func(ctx context.Context) {
		rt, closeStore := e.pipelineFor(slot, prefix, 0, nil)
		defer closeStore()
		broker := bkBrokerPID(e.k)
		e.resetHWM()
		ws := e.sampleWalsender(slot)
		bcpu0, _ := bkProcCPU(broker)
		cpu0 := bkSelfCPU()
		t0 := time.Now()
		runCtx, stop := context.WithCancel(ctx)
		defer stop()
		runErr := make(chan error, 1)
		go func() { runErr <- rt.Run(runCtx) }()
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		var first time.Duration
		for {
			n := rt.Stats().Written["kafka"]
			if n > 0 && first == 0 {
				first = time.Since(t0)
			}
			if n >= int64(rows) {
				break
			}
			select {
			case err := <-runErr:
				e.b.Fatalf("pipeline stopped after %d rows: %v", rt.Stats().Written["kafka"], err)
			case <-tick.C:
			}
		}
		res.wall = time.Since(t0)
		res.cpu = bkSelfCPU() - cpu0
		bcpu1, _ := bkProcCPU(broker)
		res.brokerCPU = bcpu1 - bcpu0
		res.walsenderCPU = ws()
		res.peakRSS = bkHWM()
		res.heapEnd = bkHeapInUse()
		stop()
		if err := <-runErr; err != nil {
			e.b.Fatal(err)
		}
		// Every row is one event; more would be replays.
		n := e.topicEnd(ctx, prefix+".public.bench_rows")
		if n != int64(rows) {
			e.b.Fatalf("topic holds %d records, want %d", n, rows)
		}
		res.note = fmt.Sprintf("first batch acked after %s (connect, topic creation, schema registration, first %d rows); topic %s.public.bench_rows holds %d records",
			first.Round(time.Millisecond), min(rows, 10000), prefix, n)
	})
	return res
}

func (e *bkEnv) topicEnd(ctx context.Context, topic string) int64 {
	e.b.Helper()
	cl, err := e.k.Client()
	if err != nil {
		e.b.Fatal(err)
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err != nil {
		e.b.Fatal(err)
	}
	var n int64
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			e.b.Fatal(o.Err)
		}
		n += o.Offset
	})
	return n
}

// bkLatency is the latency phase's outcome.
type bkLatency struct {
	n                  int
	p50, p90, p99, max float64 // ms
	achieved           float64 // rows/s the writer committed
	behind             time.Duration
	peakRSS            float64
}

// latSink records, after each successful Write, now minus the commit time
// of every transaction in the batch (once per transaction).
type latSink struct {
	pipeline.Sink
	mu   sync.Mutex
	lat  map[uint64]time.Duration
	at   map[uint64]time.Time // commit time per transaction
	rows int64
}

func (s *latSink) Write(ctx context.Context, records []pipeline.Record) error {
	if err := s.Sink.Write(ctx, records); err != nil {
		return err
	}
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range records {
		r := &records[i]
		if !r.Op.IsData() {
			continue
		}
		s.rows++
		if i+1 < len(records) && records[i+1].TxID == r.TxID {
			continue
		}
		s.lat[r.TxID] = now.Sub(r.EventTime) // the last Write holding the transaction's end
		s.at[r.TxID] = r.EventTime
	}
	return nil
}

func (s *latSink) written() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rows
}

// latency runs a fresh slot and pipeline while a writer commits bkLatRows
// rows every bkLatEvery for d, starting at id first.
func (e *bkEnv) latency(first int, d time.Duration) (res bkLatency) {
	e.b.Helper()
	const slot, prefix = "bk_latency", "benchlat"
	pprof.Do(e.ctx, pprof.Labels("phase", "latency"), func(ctx context.Context) {
		e.createSlot(slot)
		ls := &latSink{lat: map[uint64]time.Duration{}, at: map[uint64]time.Time{}}
		rt, closeStore := e.pipelineFor(slot, prefix, e.linger, func(s pipeline.Sink) pipeline.Sink { ls.Sink = s; return ls })
		defer closeStore()
		e.resetHWM()
		runCtx, stop := context.WithCancel(ctx)
		defer stop()
		runErr := make(chan error, 1)
		go func() { runErr <- rt.Run(runCtx) }()
		for rt.Ready() != nil {
			select {
			case err := <-runErr:
				e.b.Fatalf("latency pipeline stopped: %v", err)
			case <-time.After(10 * time.Millisecond):
			}
		}
		conn, err := e.pool.Acquire(ctx)
		if err != nil {
			e.b.Fatal(err)
		}
		defer conn.Release()
		t0 := time.Now()
		id, txns := first, 0
		var behind time.Duration
		for next := t0; time.Since(t0) < d; next = next.Add(bkLatEvery) {
			if w := time.Until(next); w > 0 {
				time.Sleep(w)
			} else {
				behind = max(behind, -w)
			}
			if _, err := conn.Exec(ctx, bkInsert, id, id+bkLatRows-1); err != nil {
				e.b.Fatal(err)
			}
			id += bkLatRows
			txns++
		}
		took := time.Since(t0)
		total := int64(txns * bkLatRows)
		for ls.written() < total {
			select {
			case err := <-runErr:
				e.b.Fatalf("latency pipeline stopped after %d rows: %v", ls.written(), err)
			case <-time.After(5 * time.Millisecond):
			}
		}
		res.peakRSS = bkHWM()
		stop()
		if err := <-runErr; err != nil {
			e.b.Fatal(err)
		}
		ls.mu.Lock()
		var ms []float64
		for tx, l := range ls.lat {
			if ls.at[tx].Before(t0.Add(bkWarmUp)) {
				continue
			}
			ms = append(ms, float64(l.Microseconds())/1000)
		}
		ls.mu.Unlock()
		slices.Sort(ms)
		if len(ms) == 0 {
			e.b.Fatal("no transaction measured")
		}
		q := func(p float64) float64 { return ms[min(len(ms)-1, int(p*float64(len(ms))))] }
		res.n, res.p50, res.p90, res.p99, res.max = len(ms), q(0.50), q(0.90), q(0.99), ms[len(ms)-1]
		res.achieved = float64(total) / took.Seconds()
		res.behind = behind
	})
	return res
}

// sampleWalsender samples the CPU time of the walsender serving slot every
// 50ms until the returned function is called, which returns the last
// sample in seconds.
func (e *bkEnv) sampleWalsender(slot string) func() float64 {
	stop := make(chan struct{})
	result := make(chan float64, 1)
	go func() {
		var pid int32
		var last float64
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			if pid == 0 {
				_ = e.pool.QueryRow(e.ctx, `SELECT coalesce(active_pid, 0) FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&pid)
			}
			if pid != 0 {
				if v, ok := bkProcCPU(int(pid)); ok {
					last = v
				}
			}
			select {
			case <-stop:
				if pid != 0 {
					if v, ok := bkProcCPU(int(pid)); ok {
						last = v
					}
				}
				result <- last
				return
			case <-t.C:
			}
		}
	}()
	return func() float64 { close(stop); return <-result }
}

// resetHWM records the process's VmHWM and resets it (clear_refs 5).
func (e *bkEnv) resetHWM() {
	e.hwm = append(e.hwm, bkHWM())
	if !bench.ResetPeakRSS() {
		e.b.Logf("cannot reset VmHWM: the peak covers the whole process")
	}
}

func (e *bkEnv) maxHWM() float64 {
	return max(slices.Max(append(e.hwm, 0)), bkHWM())
}

// bkHWM is this process's VmHWM in bytes.
func bkHWM() float64 { return bench.PeakRSS() }

func bkHeapInUse() float64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return float64(ms.HeapInuse)
}

// bkBrokerPID finds the broker's JVM: the java process whose command line
// names its directory (0 when not found).
func bkBrokerPID(k *harness.Kafka) int {
	ents, _ := os.ReadDir("/proc")
	for _, d := range ents {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		cl, err := os.ReadFile("/proc/" + d.Name() + "/cmdline")
		if err == nil && strings.Contains(string(cl), "kafka.Kafka") && strings.Contains(string(cl), k.Dir) {
			return pid
		}
	}
	return 0
}

// bkProcCPU reads utime+stime of a process from /proc (ticks of 10ms).
func bkProcCPU(pid int) (float64, bool) {
	if pid <= 0 {
		return 0, false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, false
	}
	ut, err1 := strconv.ParseFloat(f[11], 64)
	st, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return (ut + st) / 100, true
}

// bkSelfCPU is this process's user+system CPU time in seconds.
func bkSelfCPU() float64 { return bench.SelfCPU().Seconds() }

func bkLoadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
