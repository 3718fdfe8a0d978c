package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"runtime/trace"
	"strconv"
	"strings"
	"time"

	"github.com/go-mysql-org/go-mysql/client"

	"github.com/sluice-cdc/sluice/integration/harness"
	"github.com/sluice-cdc/sluice/offsets"
	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/sinks/duckdb"
	"github.com/sluice-cdc/sluice/sources/mysql"
)

// MariaDBBinlog measures the binlog source on one of two workloads:
//
//   - "mariadb-binlog" (workload (a) of the benchmark issue): N inserts, N
//     updates and N/5 deletes of a 6-column table (BIGINT key, INT,
//     ~40-byte VARCHAR, TIMESTAMP(6), DECIMAL(12,2), JSON) in 1,000-row
//     transactions;
//   - "mariadb-binlog-bulk" (Bulk, the MySQL source issue's benchmark): N
//     inserts then the same N rows updated, in 10,000-row transactions of
//     a 6-column table (INT key, INT, VARCHAR, DOUBLE, DATETIME(6),
//     DECIMAL(12,2)).
//
// Measured in one run, on one server and one binlog:
//
//  1. write: the workload itself, its rate MariaDB's write rate;
//  2. reference: mariadb-binlog --read-from-remote-server
//     --base64-output=decode-rows --verbose to /dev/null, before and after
//     the decoder (mean);
//  3. decoder: the source alone (snapshot never, from the GTID before the
//     writes) until Read returned every change;
//  4. end to end: pipeline.Runtime with the source and the DuckDB sink
//     until every change is durable, then stopped, which checkpoints
//     DuckDB (so deferring checkpoints does not flatter the figure), with
//     the process's CPU time and peak RSS over that phase.
type MariaDBBinlog struct {
	Bulk bool
}

// Name implements Scenario.
func (s MariaDBBinlog) Name() string {
	if s.Bulk {
		return "mariadb-binlog-bulk"
	}
	return "mariadb-binlog"
}

// Run implements Scenario.
func (s MariaDBBinlog) Run(o RunOptions) (figs []Figure, err error) {
	rows := o.Rows
	if rows <= 0 {
		rows = 1_000_000
	}
	tx := 1000
	if s.Bulk {
		tx = 10000
	}
	rows -= rows % tx
	if rows < 5*tx {
		return nil, fmt.Errorf("%s: at least %d rows", s.Name(), 5*tx)
	}
	tool, err := binlogTool(o)
	if err != nil {
		return nil, err
	}
	ctx := context.Background()
	m, err := harness.StartMariaDB(ctx, harness.MariaDBOptions{})
	if err != nil {
		return nil, err
	}
	defer m.Stop()
	addr := net.JoinHostPort(m.Host, strconv.Itoa(m.Port))
	c, err := client.Connect(addr, "root", "", "")
	if err != nil {
		return nil, err
	}
	defer c.Close()
	run := func(q string) error {
		if _, err := c.Execute(q); err != nil {
			return fmt.Errorf("%.80s: %w", q, err)
		}
		return nil
	}
	table := "CREATE TABLE bench.t (id BIGINT PRIMARY KEY, n INT, label VARCHAR(64), at TIMESTAMP(6) NULL, amount DECIMAL(12,2), doc JSON)"
	if s.Bulk {
		table = "CREATE TABLE bench.t (id INT PRIMARY KEY, a INT, b VARCHAR(32), c DOUBLE, d DATETIME(6), e DECIMAL(12,2))"
	}
	for _, q := range []string{"CREATE DATABASE bench", table} {
		if err := run(q); err != nil {
			return nil, err
		}
	}
	if v, err := one(c, "SELECT VERSION()"); err == nil && o.Versions != nil {
		o.Versions["MariaDB"] = v
	}
	start, err := one(c, "SELECT @@GLOBAL.gtid_binlog_pos")
	if err != nil {
		return nil, err
	}

	// 1. The workload.
	t0 := time.Now()
	changes := rows + rows + rows/5
	if s.Bulk {
		err, changes = writeBulk(run, rows), 2*rows
	} else {
		err = writeWorkload(run, rows)
	}
	if err != nil {
		return nil, err
	}
	write := time.Since(t0)
	o.log("%s: %d changes written in %s", s.Name(), changes, write)

	// 2. The reference.
	first, err := one(c, "SHOW BINARY LOGS")
	if err != nil {
		return nil, err
	}
	reference := func() (time.Duration, error) { return binlogReference(tool, m, first) }
	opts := mysql.Options{Pipeline: "bench", DSN: "mysql://root@" + addr, Tables: []string{"bench.t"}, StartGTID: start,
		Snapshot: mysql.SnapshotOptions{Mode: mysql.SnapshotNever}}

	ref1, err := reference()
	if err != nil {
		return nil, err
	}
	dec, err := profiled(o.Profile, "decoder", func() (time.Duration, error) { return decodeAll(ctx, opts, changes) })
	if err != nil {
		return nil, err
	}
	ref2, err := reference()
	if err != nil {
		return nil, err
	}
	var cpu time.Duration
	var rss float64
	e2e, err := profiled(o.Profile, "e2e", func() (d time.Duration, err error) {
		ResetPeakRSS()
		cpu0 := SelfCPU()
		err = underDaemonLimit(func() error {
			d, err = endToEnd(ctx, opts, changes)
			return err
		})
		cpu, rss = SelfCPU()-cpu0, PeakRSS()
		return d, err
	})
	if err != nil {
		return nil, err
	}
	ref := (ref1 + ref2) / 2
	o.log("%s: reference %s and %s, decoder %s, end to end %s", s.Name(), ref1, ref2, dec, e2e)
	rate := func(d time.Duration) float64 { return float64(changes) / d.Seconds() }
	return []Figure{
		{Name: "MariaDB write", Unit: "rows/s", Value: rate(write)},
		{Name: "mariadb-binlog", Unit: "rows/s", Value: rate(ref)},
		{Name: "decoder", Unit: "rows/s", Value: rate(dec)},
		{Name: "decoder / mariadb-binlog", Unit: "ratio", Value: ref.Seconds() / dec.Seconds(), Target: ">= 0.6"},
		{Name: "end to end into DuckDB", Unit: "rows/s", Value: rate(e2e)},
		{Name: "end to end / MariaDB write", Unit: "ratio", Value: write.Seconds() / e2e.Seconds(), Target: ">= 1.0"},
		{Name: "end to end CPU", Unit: "s per 1M rows", Value: cpu.Seconds() * 1e6 / float64(changes)},
		{Name: "end to end peak RSS", Unit: "MiB", Value: rss / (1 << 20)},
	}, nil
}

// writeWorkload inserts rows, updates them and deletes a fifth, in
// 1,000-row transactions.
func writeWorkload(exec func(string) error, rows int) error {
	var sb strings.Builder
	for lo := 0; lo < rows; lo += 1000 {
		sb.Reset()
		sb.WriteString("INSERT INTO bench.t VALUES ")
		for i := lo; i < lo+1000; i++ {
			if i > lo {
				sb.WriteByte(',')
			}
			fmt.Fprintf(&sb, `(%d,%d,'customer %08d with a forty-byte label',TIMESTAMPADD(SECOND,%d,'2024-01-01'),%d.%02d,'{"i":%d,"ok":true}')`,
				i, i%100000, i, i, i%10000000, i%100, i)
		}
		if err := exec(sb.String()); err != nil {
			return err
		}
	}
	for lo := 0; lo < rows; lo += 1000 {
		if err := exec(fmt.Sprintf("UPDATE bench.t SET n = n + 1, amount = amount * 2 WHERE id >= %d AND id < %d", lo, lo+1000)); err != nil {
			return err
		}
	}
	for lo := 0; lo < rows/5; lo += 1000 {
		if err := exec(fmt.Sprintf("DELETE FROM bench.t WHERE id >= %d AND id < %d", lo, lo+1000)); err != nil {
			return err
		}
	}
	return nil
}

// writeBulk inserts rows in 10,000-row transactions of 1,000-row
// statements, then updates them all, 10,000 per statement.
func writeBulk(exec func(string) error, rows int) error {
	var sb strings.Builder
	for lo := 0; lo < rows; lo += 10000 {
		if err := exec("BEGIN"); err != nil {
			return err
		}
		for s := lo; s < lo+10000; s += 1000 {
			sb.Reset()
			sb.WriteString("INSERT INTO bench.t VALUES ")
			for i := s; i < s+1000; i++ {
				if i > s {
					sb.WriteByte(',')
				}
				fmt.Fprintf(&sb, "(%d,%d,'name %d',%d.5,'2024-01-01 00:00:00.%06d',%d.25)", i, i%1000, i, i, i%1000000, i%100000)
			}
			if err := exec(sb.String()); err != nil {
				return err
			}
		}
		if err := exec("COMMIT"); err != nil {
			return err
		}
	}
	for lo := 0; lo < rows; lo += 10000 {
		if err := exec(fmt.Sprintf("UPDATE bench.t SET a = a + 1, c = c * 2 WHERE id >= %d AND id < %d", lo, lo+10000)); err != nil {
			return err
		}
	}
	return nil
}

// decodeAll reads changes records through the source alone.
func decodeAll(ctx context.Context, opts mysql.Options, changes int) (time.Duration, error) {
	src, err := mysql.New(opts, nil, nil)
	if err != nil {
		return 0, err
	}
	t := time.Now()
	if err := src.Open(ctx, nil); err != nil {
		return 0, err
	}
	defer src.Close(ctx)
	for n := 0; n < changes; {
		b, err := src.Read(ctx)
		if err != nil {
			return 0, err
		}
		n += len(b.Records)
	}
	return time.Since(t), nil
}

// endToEnd runs the pipeline into DuckDB until changes are durable, then
// stops it (DuckDB checkpoints on close) and returns the whole time.
func endToEnd(ctx context.Context, opts mysql.Options, changes int) (time.Duration, error) {
	dir, err := os.MkdirTemp("", "sluice-bench-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	src, err := mysql.New(opts, nil, nil)
	if err != nil {
		return 0, err
	}
	store, err := offsets.OpenDir(filepath.Join(dir, "offsets"), "bench")
	if err != nil {
		return 0, err
	}
	defer store.Close()
	sink := duckdb.New(duckdb.Options{Name: "duck", Path: filepath.Join(dir, "bench.duckdb")}, nil)
	rt, err := pipeline.New(pipeline.Config{Pipeline: "bench", RetryMaxAttempts: 5}, src,
		[]pipeline.NamedSink{{Name: "duck", Sink: sink}}, store, pipeline.Options{})
	if err != nil {
		return 0, err
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	runErr := make(chan error, 1)
	t := time.Now()
	go func() { runErr <- rt.Run(runCtx) }()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for rt.Stats().Written["duck"] < int64(changes) {
		select {
		case err := <-runErr:
			return 0, fmt.Errorf("pipeline stopped after %d rows: %v", rt.Stats().Written["duck"], err)
		case <-tick.C:
		}
	}
	stop()
	<-runErr
	return time.Since(t), nil
}

// profiled runs f, under a CPU profile and followed by a heap profile
// when prefix is set.
func profiled(prefix, phase string, f func() (time.Duration, error)) (time.Duration, error) {
	if prefix == "" {
		return f()
	}
	cpu, err := os.Create(prefix + phase + ".cpu.pprof")
	if err != nil {
		return 0, err
	}
	defer cpu.Close()
	if err := pprof.StartCPUProfile(cpu); err != nil {
		return 0, err
	}
	// The execution trace shows what the CPU profile cannot: which
	// goroutine waits on which, and when the sink's writes run.
	tr, err := os.Create(prefix + phase + ".trace")
	if err != nil {
		pprof.StopCPUProfile()
		return 0, err
	}
	defer tr.Close()
	if err := trace.Start(tr); err != nil {
		pprof.StopCPUProfile()
		return 0, err
	}
	d, ferr := f()
	trace.Stop()
	pprof.StopCPUProfile()
	heap, err := os.Create(prefix + phase + ".heap.pprof")
	if err != nil {
		return 0, err
	}
	defer heap.Close()
	return d, errors.Join(ferr, pprof.WriteHeapProfile(heap))
}

// one returns the first cell of a query's result.
func one(c *client.Conn, q string) (string, error) {
	r, err := c.Execute(q)
	if err != nil {
		return "", fmt.Errorf("%s: %w", q, err)
	}
	defer r.Close()
	if len(r.Values) == 0 {
		return "", fmt.Errorf("%s: no rows", q)
	}
	s, err := r.GetString(0, 0)
	return strings.Clone(s), err
}

func (o RunOptions) log(format string, args ...any) {
	if o.Log != nil {
		o.Log(format, args...)
	}
}

// binlogTool finds mariadb-binlog (or mysqlbinlog) and records its version.
func binlogTool(o RunOptions) (string, error) {
	tool, err := exec.LookPath("mariadb-binlog")
	if err != nil {
		if tool, err = exec.LookPath("mysqlbinlog"); err != nil {
			return "", errors.New("mariadb-binlog not found: apt-get install mariadb-client")
		}
	}
	if out, err := exec.Command(tool, "--version").Output(); err == nil {
		o.version(filepath.Base(tool), strings.TrimSpace(string(out)))
	}
	return tool, nil
}

// binlogReference is the binlog reference: mariadb-binlog reading every
// binlog from first off the server, rows decoded and printed, into
// /dev/null.
func binlogReference(tool string, m *harness.MariaDB, first string) (time.Duration, error) {
	cmd := exec.Command(tool, "--read-from-remote-server", "--host", m.Host, "--port", strconv.Itoa(m.Port), "--user", "root",
		"--base64-output=decode-rows", "--verbose", "--to-last-log", first)
	var stderr strings.Builder
	cmd.Stdout, cmd.Stderr = nil, &stderr // nil: /dev/null
	t := time.Now()
	if err := cmd.Run(); err != nil {
		return 0, fmt.Errorf("%s: %w\n%s", tool, err, stderr.String())
	}
	return time.Since(t), nil
}
