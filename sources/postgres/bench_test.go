package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	osexec "os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/sluice-cdc/sluice/integration/harness"
	"github.com/sluice-cdc/sluice/offsets"
	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/sinks/duckdb"
)

// BenchmarkDrain1M measures how fast sluice drains row changes from a
// logical replication slot, against pg_recvlogical draining the same slot
// data to /dev/null in the same run:
//
//	make bench-postgres
//	go test -run '^$' -bench Drain1M -benchtime 1x -timeout 30m ./sources/postgres/
//
// SLUICE_BENCH_ROWS overrides the number of inserted rows (default
// 1,000,000, written as transactions of 10,000 rows). Every consumer gets
// its own pgoutput slot (protocol v2, one publication), all created before
// the writes, so each drains exactly the same changes. The order is:
//
//  1. warm-up: pg_recvlogical drains a throwaway slot (server caches, WAL in
//     the page cache), not reported;
//  2. reference: pg_recvlogical --endpos <wal lsn after the writes> -f /dev/null;
//  3. decoder: a replication connection set up like the source's, every
//     XLogData fed to the real Decoder (the receive loop of streamer.session
//     without the hand-over channel);
//  4. source: Source.Open (snapshot "never", resuming at the slot's
//     consistent point) and Source.Read until every row is out, acking the
//     newest position once a second, like the runtime's checkpoint loop;
//  5. pipeline: pipeline.Runtime with the source, the DuckDB sink and a
//     directory offset store, until the runtime reports every row written
//     (durable) in the sink;
//  6. reference again: pg_recvlogical on a second slot, so a drift of the
//     machine's speed during the run shows; the ratios use the mean of 2 and 6.
//
// Reported: rows/s of each consumer, decoder/source/pipeline rows/s over
// pg_recvlogical rows/s, CPU seconds per million rows of this process
// (getrusage RUSAGE_SELF, so the server is not in it) for each sluice phase,
// of the pg_recvlogical process, and (sampled from /proc, approximate) of
// the walsender serving each consumer. CPU profiles carry the pprof label
// phase=decoder|source|pipeline (go tool pprof -tagfocus phase=decoder).
func BenchmarkDrain1M(b *testing.B) {
	rows := 1_000_000
	if v := os.Getenv("SLUICE_BENCH_ROWS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			b.Fatalf("SLUICE_BENCH_ROWS=%q: want a positive integer", v)
		}
		rows = n
	}
	b.StopTimer()
	pg := harness.PostgresT(b)
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	env := newBenchEnv(b, ctx, pg)
	slots := []string{"bench_warm", "bench_ref1", "bench_dec", "bench_src", "bench_pipe", "bench_ref2"}
	env.createSlots(slots)
	t0 := time.Now()
	env.writeRows(rows)
	writeTook := time.Since(t0)
	endLSN := env.lsn("SELECT pg_current_wal_lsn()::text")
	walBytes := uint64(endLSN - env.start["bench_warm"])
	b.Logf("wrote %d rows in %d transactions in %s; %.1f MiB of WAL; end LSN %s",
		rows, (rows+benchTxnRows-1)/benchTxnRows, writeTook.Round(time.Millisecond), float64(walBytes)/(1<<20), endLSN)

	b.StartTimer()
	warm := env.recvlogical("bench_warm", endLSN)
	ref1 := env.recvlogical("bench_ref1", endLSN)
	dec := env.drainDecoder("bench_dec", rows)
	src := env.drainSource("bench_src", rows)
	pipe := env.drainPipeline("bench_pipe", rows)
	ref2 := env.recvlogical("bench_ref2", endLSN)
	b.StopTimer()

	refRate := (ref1.rate(rows) + ref2.rate(rows)) / 2
	res := []struct {
		name string
		r    benchResult
	}{{"pg_recvlogical (warm-up)", warm}, {"pg_recvlogical", ref1}, {"sluice decoder", dec},
		{"sluice source", src}, {"sluice pipeline → duckdb", pipe}, {"pg_recvlogical (again)", ref2}}
	var tb strings.Builder
	fmt.Fprintf(&tb, "%d rows, 6 columns, pgoutput v2; ratios against the mean pg_recvlogical rate (%.0f rows/s)\n", rows, refRate)
	fmt.Fprintf(&tb, "%-26s %9s %11s %8s %14s %18s\n", "consumer", "seconds", "rows/s", "ratio", "client CPU-s/M", "walsender CPU-s/M")
	for _, x := range res {
		fmt.Fprintf(&tb, "%-26s %9.2f %11.0f %7.2fx %14.2f %18.2f\n", x.name, x.r.wall.Seconds(), x.r.rate(rows),
			x.r.rate(rows)/refRate, x.r.cpuPerM(rows), x.r.walsenderCPU/float64(rows)*1e6)
	}
	b.Log("\n" + tb.String())

	b.ReportMetric(refRate, "recvlogical_rows/s")
	b.ReportMetric(dec.rate(rows), "decoder_rows/s")
	b.ReportMetric(src.rate(rows), "source_rows/s")
	b.ReportMetric(pipe.rate(rows), "pipeline_rows/s")
	b.ReportMetric(dec.rate(rows)/refRate, "decoder_vs_recvlogical")
	b.ReportMetric(src.rate(rows)/refRate, "source_vs_recvlogical")
	b.ReportMetric(pipe.rate(rows)/refRate, "pipeline_vs_recvlogical")
	b.ReportMetric(dec.cpuPerM(rows), "cpu_s_per_M")
	b.ReportMetric(src.cpuPerM(rows), "source_cpu_s_per_M")
	b.ReportMetric(pipe.cpuPerM(rows), "pipeline_cpu_s_per_M")
	b.ReportMetric((ref1.cpuPerM(rows)+ref2.cpuPerM(rows))/2, "recvlogical_cpu_s_per_M")
}

// BenchmarkDecoderReplay replays the pgoutput messages of 100,000 inserted
// rows (SLUICE_BENCH_REPLAY_ROWS overrides) through a fresh Decoder per
// iteration, without the server or the network, and reports ns and
// allocations per row: the decoder's own cost, steadier than a drain on a
// busy machine.
func BenchmarkDecoderReplay(b *testing.B) {
	rows := 100_000
	if v := os.Getenv("SLUICE_BENCH_REPLAY_ROWS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			b.Fatalf("SLUICE_BENCH_REPLAY_ROWS=%q: want a positive integer", v)
		}
		rows = n
	}
	b.StopTimer()
	pg := harness.PostgresT(b)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	env := newBenchEnv(b, ctx, pg)
	env.createSlots([]string{"bench_replay"})
	env.writeRows(rows)
	var msgs []benchMsg
	env.capture = &msgs
	env.drainDecoder("bench_replay", rows)
	env.capture = nil
	b.ReportAllocs()
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	b.StartTimer()
	for range b.N {
		dec, err := NewDecoder(DecoderOptions{
			Database: benchDB,
			Resolver: NewTypeResolver(env.pool, zap.NewNop()),
			Catalog: func(ctx context.Context, _ uint32, schema, name string) (*TableShape, error) {
				return LoadTableShape(ctx, env.pool, benchDB, TableRef{Schema: schema, Name: name})
			},
		})
		if err != nil {
			b.Fatal(err)
		}
		got := 0
		emit := func(c Chunk) error { got += len(c.Records); return nil }
		for _, m := range msgs {
			if err := dec.Decode(ctx, m.data, m.start, emit); err != nil {
				b.Fatal(err)
			}
		}
		if got != rows {
			b.Fatalf("decoded %d records, want %d", got, rows)
		}
		_ = dec.Close()
	}
	b.StopTimer()
	runtime.ReadMemStats(&ms1)
	perRow := float64(b.N) * float64(rows)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/perRow, "ns/row")
	b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/perRow, "allocs/row")
	b.ReportMetric(float64(ms1.TotalAlloc-ms0.TotalAlloc)/perRow, "B/row")
}

// benchMsg is one captured XLogData payload.
type benchMsg struct {
	data  []byte
	start pglogrepl.LSN
}

const (
	benchDB      = "bench"
	benchTable   = "public.bench_rows"
	benchPub     = "sluice_bench"
	benchTxnRows = 10_000
)

type benchEnv struct {
	b       testing.TB
	capture *[]benchMsg // when set, drainDecoder keeps a copy of every XLogData
	ctx     context.Context
	pg      *harness.Postgres
	pool    *pgxpool.Pool
	start   map[string]pglogrepl.LSN // consistent point per slot
}

// benchResult is one consumer's drain.
type benchResult struct {
	wall         time.Duration
	cpu          float64 // CPU seconds of the consumer process during the drain
	walsenderCPU float64 // CPU seconds of its walsender (sampled, approximate)
}

func (r benchResult) rate(rows int) float64 { return float64(rows) / r.wall.Seconds() }
func (r benchResult) cpuPerM(rows int) float64 {
	return r.cpu / float64(rows) * 1e6
}

func newBenchEnv(b testing.TB, ctx context.Context, pg *harness.Postgres) *benchEnv {
	b.Helper()
	if err := pg.CreateDatabase(ctx, benchDB); err != nil {
		b.Fatal(err)
	}
	if err := pg.Exec(ctx, benchDB,
		`CREATE TABLE `+benchTable+` (id bigint PRIMARY KEY, qty integer NOT NULL, label text NOT NULL,
			amount numeric(12,2) NOT NULL, created_at timestamptz NOT NULL, active boolean NOT NULL)`,
		`CREATE PUBLICATION `+benchPub+` FOR TABLE `+benchTable); err != nil {
		b.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, pg.DSN(benchDB))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	return &benchEnv{b: b, ctx: ctx, pg: pg, pool: pool, start: map[string]pglogrepl.LSN{}}
}

func (e *benchEnv) lsn(q string, args ...any) pglogrepl.LSN {
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

// createSlots creates one pgoutput slot per consumer before any row is
// written, so each drains the same changes.
func (e *benchEnv) createSlots(names []string) {
	for _, n := range names {
		e.start[n] = e.lsn("SELECT lsn::text FROM pg_create_logical_replication_slot($1, 'pgoutput')", n)
	}
}

// writeRows inserts rows rows in transactions of benchTxnRows.
func (e *benchEnv) writeRows(rows int) {
	e.b.Helper()
	for lo := 1; lo <= rows; lo += benchTxnRows {
		hi := min(lo+benchTxnRows-1, rows)
		_, err := e.pool.Exec(e.ctx, `INSERT INTO `+benchTable+`
			SELECT g, (g % 100000)::int, 'customer-' || g, ((g % 10000000) / 100.0)::numeric(12,2),
				timestamptz '2024-01-01 00:00:00+00' + g * interval '1 second', g % 2 = 0
			FROM generate_series($1::bigint, $2::bigint) g`, lo, hi)
		if err != nil {
			e.b.Fatal(err)
		}
	}
}

// recvlogical runs pg_recvlogical on slot up to endLSN with the output to
// /dev/null. It gets the same session settings as sluice's connections.
func (e *benchEnv) recvlogical(slot string, endLSN pglogrepl.LSN) benchResult {
	e.b.Helper()
	cmd := osexec.CommandContext(e.ctx, filepath.Join(e.pg.BinDir, "pg_recvlogical"),
		"-d", e.pg.DSN(benchDB), "--slot", slot, "--start", "--no-loop",
		"-o", "proto_version=2", "-o", "publication_names="+benchPub,
		"--endpos", endLSN.String(), "-f", "/dev/null")
	var opts []string
	for k, v := range SessionSettings {
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
	return benchResult{wall: wall, cpu: (st.UserTime() + st.SystemTime()).Seconds(), walsenderCPU: wcpu}
}

// drainDecoder streams slot through the Decoder on a replication connection
// opened like the source's, until rows data records and their transaction's
// end arrived. It reports the flush position every 10s, as the source does.
func (e *benchEnv) drainDecoder(slot string, rows int) (res benchResult) {
	e.b.Helper()
	pprof.Do(e.ctx, pprof.Labels("phase", "decoder"), func(ctx context.Context) {
		ws := e.sampleWalsender(slot)
		cpu0 := processCPU()
		t0 := time.Now()
		cfg, err := pgconn.ParseConfig(e.pg.DSN(benchDB))
		if err != nil {
			e.b.Fatal(err)
		}
		applySessionSettings(cfg.RuntimeParams, "bench")
		cfg.RuntimeParams["replication"] = "database"
		conn, err := pgconn.ConnectConfig(ctx, cfg)
		if err != nil {
			e.b.Fatal(err)
		}
		defer conn.Close(context.Background())
		dec, err := NewDecoder(DecoderOptions{
			Database: benchDB,
			Resolver: NewTypeResolver(e.pool, zap.NewNop()),
			Catalog: func(ctx context.Context, _ uint32, schema, name string) (*TableShape, error) {
				return LoadTableShape(ctx, e.pool, benchDB, TableRef{Schema: schema, Name: name})
			},
		})
		if err != nil {
			e.b.Fatal(err)
		}
		defer dec.Close()
		err = pglogrepl.StartReplication(ctx, conn, slot, e.start[slot], pglogrepl.StartReplicationOptions{
			PluginArgs: []string{"proto_version '2'", "publication_names '" + benchPub + "'", "messages 'true'"}})
		if err != nil {
			e.b.Fatal(err)
		}
		const statusEvery = 10 * time.Second
		var (
			got      int
			done     bool
			received pglogrepl.LSN
			flushed  = e.start[slot]
			lastSent time.Time
		)
		status := func() error {
			lastSent = time.Now()
			return pglogrepl.SendStandbyStatusUpdate(context.Background(), conn, pglogrepl.StandbyStatusUpdate{
				WALWritePosition: max(received, flushed), WALFlushPosition: flushed, WALApplyPosition: flushed, ClientTime: lastSent})
		}
		emit := func(c Chunk) error {
			for i := range c.Records {
				if c.Records[i].Op.IsData() {
					got++
				}
			}
			if c.Final {
				flushed = c.EndLSN
				done = got >= rows
			}
			return nil
		}
		for !done {
			if time.Since(lastSent) >= statusEvery {
				if err := status(); err != nil {
					e.b.Fatal(err)
				}
				if err := conn.Conn().SetReadDeadline(lastSent.Add(statusEvery)); err != nil {
					e.b.Fatal(err)
				}
			}
			msg, err := conn.ReceiveMessage(context.Background())
			if err != nil {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					continue
				}
				e.b.Fatalf("receive: %v (after %d rows)", err, got)
			}
			cd, ok := msg.(*pgproto3.CopyData)
			if !ok {
				if er, ok := msg.(*pgproto3.ErrorResponse); ok {
					e.b.Fatal(pgconn.ErrorResponseToPgError(er))
				}
				continue
			}
			if len(cd.Data) == 0 {
				continue
			}
			switch cd.Data[0] {
			case pglogrepl.PrimaryKeepaliveMessageByteID:
				pkm, err := pglogrepl.ParsePrimaryKeepaliveMessage(cd.Data[1:])
				if err != nil {
					e.b.Fatal(err)
				}
				if pkm.ReplyRequested {
					if err := status(); err != nil {
						e.b.Fatal(err)
					}
				}
			case pglogrepl.XLogDataByteID:
				xld, err := pglogrepl.ParseXLogData(cd.Data[1:])
				if err != nil {
					e.b.Fatal(err)
				}
				received = max(received, xld.WALStart)
				if e.capture != nil {
					*e.capture = append(*e.capture, benchMsg{append([]byte(nil), xld.WALData...), xld.WALStart})
				}
				if err := dec.Decode(ctx, xld.WALData, xld.WALStart, emit); err != nil {
					e.b.Fatal(err)
				}
			}
		}
		res.wall = time.Since(t0)
		res.cpu = processCPU() - cpu0
		res.walsenderCPU = ws()
		_ = status()
	})
	return res
}

// drainSource reads slot through the Source until every row is out.
func (e *benchEnv) drainSource(slot string, rows int) (res benchResult) {
	e.b.Helper()
	pprof.Do(e.ctx, pprof.Labels("phase", "source"), func(ctx context.Context) {
		ws := e.sampleWalsender(slot)
		cpu0 := processCPU()
		t0 := time.Now()
		s, err := New(e.sourceOptions(slot), zap.NewNop(), nil)
		if err != nil {
			e.b.Fatal(err)
		}
		from := Position{Phase: PhaseStream, Slot: slot, LSN: e.start[slot]}.Encode()
		if err := s.Open(ctx, from); err != nil {
			e.b.Fatal(err)
		}
		defer s.Close(context.Background())
		got := 0
		var pending pipeline.Position
		lastAck := time.Now()
		for got < rows {
			bt, err := s.Read(ctx)
			if err != nil {
				e.b.Fatalf("read: %v (after %d rows)", err, got)
			}
			for i := range bt.Records {
				if bt.Records[i].Op.IsData() {
					got++
				}
			}
			if bt.Pos != nil {
				pending = bt.Pos
			}
			if pending != nil && time.Since(lastAck) >= time.Second {
				if err := s.Ack(ctx, pending); err != nil {
					e.b.Fatal(err)
				}
				pending, lastAck = nil, time.Now()
			}
		}
		res.wall = time.Since(t0)
		res.cpu = processCPU() - cpu0
		res.walsenderCPU = ws()
		if pending != nil {
			_ = s.Ack(ctx, pending)
		}
	})
	return res
}

// drainPipeline runs the runtime from slot into a DuckDB file until the
// sink has every row, then stops it gracefully and checks the row count.
func (e *benchEnv) drainPipeline(slot string, rows int) (res benchResult) {
	e.b.Helper()
	pprof.Do(e.ctx, pprof.Labels("phase", "pipeline"), func(ctx context.Context) {
		dir := e.b.TempDir()
		const name = "bench"
		store, err := offsets.OpenDir(filepath.Join(dir, "offsets"), name)
		if err != nil {
			e.b.Fatal(err)
		}
		defer store.Close()
		// The checkpoint of a pipeline that stands at the slot's consistent
		// point: the source resumes there without creating the slot.
		from := Position{Phase: PhaseStream, Slot: slot, LSN: e.start[slot]}.Encode()
		if err := store.Commit(ctx, pipeline.Checkpoint{Pipeline: name, Position: []byte(from), Seq: 1,
			CommittedAt: time.Now().UTC()}); err != nil {
			e.b.Fatal(err)
		}
		dbPath := filepath.Join(dir, "bench.duckdb")
		sink := duckdb.New(duckdb.Options{Name: "duckdb", Path: dbPath}, nil)
		ws := e.sampleWalsender(slot)
		cpu0 := processCPU()
		t0 := time.Now()
		src, err := New(e.sourceOptions(slot), zap.NewNop(), nil)
		if err != nil {
			e.b.Fatal(err)
		}
		obs := &benchSinkTimes{}
		rt, err := pipeline.New(pipeline.Config{Pipeline: name}, src,
			[]pipeline.NamedSink{{Name: "duckdb", Sink: sink}}, store, pipeline.Options{Observer: obs})
		if err != nil {
			e.b.Fatal(err)
		}
		runCtx, stop := context.WithCancel(ctx)
		defer stop()
		runErr := make(chan error, 1)
		go func() { runErr <- rt.Run(runCtx) }()
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for rt.Stats().Written["duckdb"] < int64(rows) {
			select {
			case err := <-runErr:
				e.b.Fatalf("pipeline stopped after %d rows: %v", rt.Stats().Written["duckdb"], err)
			case <-tick.C:
			}
		}
		res.wall = time.Since(t0)
		res.cpu = processCPU() - cpu0
		res.walsenderCPU = ws()
		stop()
		if err := <-runErr; err != nil {
			e.b.Fatal(err)
		}
		e.b.Logf("pipeline: %s", obs.summary(res.wall))
		db, err := sql.Open("duckdb", dbPath)
		if err != nil {
			e.b.Fatal(err)
		}
		defer db.Close()
		var n int
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM main.public_bench_rows WHERE NOT _sluice_deleted`).Scan(&n); err != nil {
			e.b.Fatal(err)
		}
		if n != rows {
			e.b.Fatalf("duckdb holds %d rows, want %d", n, rows)
		}
	})
	return res
}

// benchSinkTimes records the duration of every sink write.
type benchSinkTimes struct {
	pipeline.NopObserver
	mu     sync.Mutex
	writes []time.Duration
}

func (o *benchSinkTimes) BatchDuration(stage string, d time.Duration) {
	if stage == "sink:duckdb" {
		o.mu.Lock()
		o.writes = append(o.writes, d)
		o.mu.Unlock()
	}
}

// summary reports the sink's share of the wall time and how the write time
// of the first and the last tenth of the writes compare (a target table
// that grows can make later writes slower).
func (o *benchSinkTimes) summary(wall time.Duration) string {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := len(o.writes)
	if n == 0 {
		return "no sink writes"
	}
	var total time.Duration
	for _, d := range o.writes {
		total += d
	}
	tenth := max(n/10, 1)
	mean := func(ds []time.Duration) time.Duration {
		var t time.Duration
		for _, d := range ds {
			t += d
		}
		return t / time.Duration(len(ds))
	}
	return fmt.Sprintf("%d sink writes took %s (%.0f%% of the wall time); mean write %s, first tenth %s, last tenth %s",
		n, total.Round(time.Millisecond), 100*total.Seconds()/wall.Seconds(), (total / time.Duration(n)).Round(time.Millisecond),
		mean(o.writes[:tenth]).Round(time.Millisecond), mean(o.writes[n-tenth:]).Round(time.Millisecond))
}

func (e *benchEnv) sourceOptions(slot string) Options {
	return Options{
		Pipeline: "bench", DSN: e.pg.DSN(benchDB), Tables: []string{benchTable}, Publication: benchPub, Slot: slot,
		// No heartbeat during the drain: every record counted is a row.
		HeartbeatInterval: time.Hour,
		Snapshot:          SnapshotOptions{Mode: SnapshotNever},
	}
}

// sampleWalsender samples the CPU time of the walsender that serves slot
// (found through pg_replication_slots.active_pid) every 50ms until the
// returned function is called, which returns the last sample in seconds.
// The walsender's CPU after the last sample is missed.
func (e *benchEnv) sampleWalsender(slot string) func() float64 {
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
				if v, ok := procCPU(int(pid)); ok {
					last = v
				}
			}
			select {
			case <-stop:
				if pid != 0 {
					if v, ok := procCPU(int(pid)); ok {
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

// procCPU reads utime+stime of a process from /proc (clock ticks of 10ms).
func procCPU(pid int) (float64, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	// Fields after the command name, which is in parentheses.
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

// processCPU is this process's user+system CPU time in seconds.
func processCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}
