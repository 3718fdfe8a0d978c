package integration

import (
	"context"
	"fmt"
	"net"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"go.uber.org/zap"

	"github.com/sluice-cdc/sluice/integration/harness"
	"github.com/sluice-cdc/sluice/offsets"
	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/sinks/duckdb"
	"github.com/sluice-cdc/sluice/sources/mysql"
)

// BenchmarkMariaDBBinlog measures the binlog source against MariaDB's own
// tools on one server and one binlog, in the same run:
//
//	go test -run '^$' -bench MariaDBBinlog -benchtime 1x -timeout 30m ./integration/
//
// SLUICE_BENCH_ROWS overrides the rows (default 1,000,000 inserts, then the
// same rows updated, in transactions of 10,000, a 6-column table);
// SLUICE_BENCH_BATCH sets the runtime's batch_max_records (default: the
// config default).
//
//  1. write: the workload itself; its rate is MariaDB's write rate;
//  2. reference: mariadb-binlog --read-from-remote-server
//     --base64-output=decode-rows --verbose reading the binlog to /dev/null;
//  3. decoder: the source (snapshot never, from the GTID before the
//     writes) until Read returned every row change;
//  4. end to end: pipeline.Runtime with the source and the DuckDB sink
//     until the runtime reports every row change durable in DuckDB, and
//     then stopped, which checkpoints DuckDB's WAL into the database file
//     (so deferring checkpoints does not flatter the figure).
//
// Reported: rows/s of each, decoder/reference (target ≥ 0.6) and
// end-to-end/write (target ≥ 1.0: sluice keeps up with a saturated
// primary).
func BenchmarkMariaDBBinlog(b *testing.B) {
	rows := 1_000_000
	if v, err := strconv.Atoi(os.Getenv("SLUICE_BENCH_ROWS")); err == nil && v > 0 {
		rows = v
	}
	tool, err := osexec.LookPath("mariadb-binlog")
	if err != nil {
		if tool, err = osexec.LookPath("mysqlbinlog"); err != nil {
			harness.SkipOrFail(b, fmt.Errorf("mariadb-binlog not found: apt-get install mariadb-client"))
		}
	}
	m := harness.MariaDBT(b)
	ctx := context.Background()
	addr := net.JoinHostPort(m.Host, strconv.Itoa(m.Port))
	c, err := client.Connect(addr, "root", "", "")
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	exec := func(q string) {
		if _, err := c.Execute(q); err != nil {
			b.Fatalf("%.80s: %v", q, err)
		}
	}
	exec("CREATE DATABASE bench")
	exec("CREATE TABLE bench.t (id INT PRIMARY KEY, a INT, b VARCHAR(32), c DOUBLE, d DATETIME(6), e DECIMAL(12,2))")
	r, err := c.Execute("SELECT @@GLOBAL.gtid_binlog_pos")
	if err != nil {
		b.Fatal(err)
	}
	start, _ := r.GetString(0, 0)
	start = strings.Clone(start)

	// 1. The workload.
	const tx, stmt = 10000, 1000
	t0 := time.Now()
	var sb strings.Builder
	for lo := 0; lo < rows; lo += tx {
		exec("BEGIN")
		for s := lo; s < min(lo+tx, rows); s += stmt {
			sb.Reset()
			sb.WriteString("INSERT INTO bench.t VALUES ")
			for i := s; i < min(s+stmt, rows); i++ {
				if i > s {
					sb.WriteByte(',')
				}
				fmt.Fprintf(&sb, "(%d,%d,'name %d',%d.5,'2024-01-01 00:00:00.%06d',%d.25)", i, i%1000, i, i, i%1000000, i%100000)
			}
			exec(sb.String())
		}
		exec("COMMIT")
	}
	for lo := 0; lo < rows; lo += tx {
		exec(fmt.Sprintf("UPDATE bench.t SET a = a + 1, c = c * 2 WHERE id >= %d AND id < %d", lo, lo+tx))
	}
	write := time.Since(t0)
	changes := 2 * rows

	// 2. The reference reader.
	logs, err := c.Execute("SHOW BINARY LOGS")
	if err != nil {
		b.Fatal(err)
	}
	first, _ := logs.GetString(0, 0)
	first = strings.Clone(first)
	reference := func() time.Duration {
		cmd := osexec.Command(tool, "--read-from-remote-server", "--host", m.Host, "--port", strconv.Itoa(m.Port), "--user", "root",
			"--base64-output=decode-rows", "--verbose", "--to-last-log", first)
		devnull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
		if err != nil {
			b.Fatal(err)
		}
		defer devnull.Close()
		cmd.Stdout = devnull
		var stderr strings.Builder
		cmd.Stderr = &stderr
		t := time.Now()
		if err := cmd.Run(); err != nil {
			b.Fatalf("%s: %v\n%s", tool, err, stderr.String())
		}
		return time.Since(t)
	}
	opts := mysql.Options{Pipeline: "bench", DSN: "mysql://root@" + addr, Tables: []string{"bench.t"}, StartGTID: start,
		Snapshot: mysql.SnapshotOptions{Mode: mysql.SnapshotNever}}

	// 3. The decoder.
	decoder := func() time.Duration {
		src, err := mysql.New(opts, nil, nil)
		if err != nil {
			b.Fatal(err)
		}
		t := time.Now()
		if err := src.Open(ctx, nil); err != nil {
			b.Fatal(err)
		}
		defer src.Close(ctx)
		n := 0
		for n < changes {
			batch, err := src.Read(ctx)
			if err != nil {
				b.Fatal(err)
			}
			n += len(batch.Records)
		}
		return time.Since(t)
	}

	// 4. End to end into DuckDB.
	endToEnd := func() time.Duration {
		dir := b.TempDir()
		src, err := mysql.New(opts, nil, nil)
		if err != nil {
			b.Fatal(err)
		}
		store, err := offsets.OpenDir(filepath.Join(dir, "offsets"), "bench")
		if err != nil {
			b.Fatal(err)
		}
		defer store.Close()
		sink := duckdb.New(duckdb.Options{Name: "duck", Path: filepath.Join(dir, "bench.duckdb")}, zap.NewNop())
		batch, _ := strconv.Atoi(os.Getenv("SLUICE_BENCH_BATCH"))
		rt, err := pipeline.New(pipeline.Config{Pipeline: "bench", RetryMaxAttempts: 5, BatchMaxRecords: batch}, src,
			[]pipeline.NamedSink{{Name: "duck", Sink: sink}}, store, pipeline.Options{})
		if err != nil {
			b.Fatal(err)
		}
		runCtx, stop := context.WithCancel(ctx)
		defer stop()
		runErr := make(chan error, 1)
		cpu0 := bkSelfCPU()
		t := time.Now()
		go func() { runErr <- rt.Run(runCtx) }()
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		var half time.Duration
		for rt.Stats().Written["duck"] < int64(changes) {
			if half == 0 && rt.Stats().Written["duck"] >= int64(rows) {
				half = time.Since(t)
			}
			select {
			case err := <-runErr:
				b.Fatalf("pipeline stopped after %d rows: %v", rt.Stats().Written["duck"], err)
			case <-tick.C:
			}
		}
		// Stopping closes the sink, which checkpoints DuckDB: the time
		// includes folding the WAL into the database file.
		last := time.Since(t)
		stop()
		<-runErr
		d := time.Since(t)
		b.Logf("end to end: the inserts took %s, the updates %s, the final checkpoint %s; sluice used %.2fs of CPU",
			half, last-half, d-last, bkSelfCPU()-cpu0)
		return d
	}

	b.ResetTimer()
	ref1 := reference()
	dec := decoder()
	ref2 := reference()
	e2e := endToEnd()
	b.StopTimer()
	ref := (ref1 + ref2) / 2
	rate := func(d time.Duration) float64 { return float64(changes) / d.Seconds() }
	b.ReportMetric(rate(write), "write-rows/s")
	b.ReportMetric(rate(ref), "reference-rows/s")
	b.ReportMetric(rate(dec), "decoder-rows/s")
	b.ReportMetric(rate(e2e), "e2e-rows/s")
	b.ReportMetric(ref.Seconds()/dec.Seconds(), "decoder/reference")
	b.ReportMetric(write.Seconds()/e2e.Seconds(), "e2e/write")
	b.Logf("%d row changes: write %s, reference %s and %s, decoder %s, end to end into DuckDB %s", changes, write, ref1, ref2, dec, e2e)
}
