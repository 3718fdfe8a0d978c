package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/sluice-cdc/sluice/integration/harness"
	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/sources/postgres"
)

// The Postgres workload's table (workloads (a)–(c) of the benchmark issue):
// six columns, the label ~40 bytes, or 2 KB stored out of line (TOAST,
// STORAGE EXTERNAL so it is not compressed inline) in the TOAST variant.
const (
	pgDB     = "bench"
	pgTable  = "public.bench_rows"
	pgPub    = "sluice_bench"
	pgCreate = `CREATE TABLE ` + pgTable + ` (id bigint PRIMARY KEY, n integer NOT NULL, label text NOT NULL,
		at timestamptz NOT NULL, amount numeric(12,2) NOT NULL, doc jsonb NOT NULL)`
	pgToast = `ALTER TABLE ` + pgTable + ` ALTER COLUMN label SET STORAGE EXTERNAL`
)

// pgInsert inserts ids $1..$2; label is %s (a SQL expression of g).
const pgInsert = `INSERT INTO ` + pgTable + `
	SELECT g, (g %% 100000)::int, %s, timestamptz '2024-01-01 00:00:00+00' + g * interval '1 second',
		((g %% 10000000) / 100.0)::numeric(12,2), jsonb_build_object('i', g, 'ok', true)
	FROM generate_series($1::bigint, $2::bigint) g`

func pgInsertSQL(toast bool) string {
	label := `'customer ' || lpad(g::text, 8, '0') || ' with a forty-byte label'`
	if toast {
		label = `repeat(md5(g::text), 64)` // 2,048 bytes
	}
	return fmt.Sprintf(pgInsert, label)
}

// pgServer is a throwaway PostgreSQL with the workload's table and
// publication.
type pgServer struct {
	pg   *harness.Postgres
	pool *pgxpool.Pool
}

func startPostgres(ctx context.Context, o RunOptions, toast bool) (*pgServer, error) {
	pg, err := harness.StartPostgres(ctx, harness.PostgresOptions{})
	if err != nil {
		return nil, err
	}
	s := &pgServer{pg: pg}
	stmts := []string{pgCreate, `CREATE PUBLICATION ` + pgPub + ` FOR TABLE ` + pgTable}
	if toast {
		stmts = append(stmts, pgToast)
	}
	if err := pg.CreateDatabase(ctx, pgDB); err != nil {
		s.stop()
		return nil, err
	}
	if err := pg.Exec(ctx, pgDB, stmts...); err != nil {
		s.stop()
		return nil, err
	}
	if s.pool, err = pgxpool.New(ctx, pg.DSN(pgDB)); err != nil {
		s.stop()
		return nil, err
	}
	var v string
	if err := s.pool.QueryRow(ctx, "SHOW server_version").Scan(&v); err == nil {
		o.version("PostgreSQL", v)
	}
	return s, nil
}

func (s *pgServer) stop() {
	if s.pool != nil {
		s.pool.Close()
	}
	_ = s.pg.Stop()
}

func (s *pgServer) lsn(ctx context.Context, q string, args ...any) (pglogrepl.LSN, error) {
	var v string
	if err := s.pool.QueryRow(ctx, q, args...).Scan(&v); err != nil {
		return 0, fmt.Errorf("%s: %w", q, err)
	}
	return pglogrepl.ParseLSN(v)
}

// createSlot creates a pgoutput slot and returns its consistent point.
func (s *pgServer) createSlot(ctx context.Context, name string) (pglogrepl.LSN, error) {
	return s.lsn(ctx, "SELECT lsn::text FROM pg_create_logical_replication_slot($1, 'pgoutput')", name)
}

// writeWorkload runs workload (a) or (b): rows inserts, then the same rows
// updated (n and amount; the label is untouched, so a TOAST-ed label is an
// unchanged value in the log), then a fifth deleted, each in 1,000-row
// transactions. It returns the number of changes.
func (s *pgServer) writeWorkload(ctx context.Context, rows int, toast bool) (int, error) {
	ins := pgInsertSQL(toast)
	for lo := 0; lo < rows; lo += 1000 {
		if _, err := s.pool.Exec(ctx, ins, lo, lo+999); err != nil {
			return 0, err
		}
	}
	for lo := 0; lo < rows; lo += 1000 {
		if _, err := s.pool.Exec(ctx, `UPDATE `+pgTable+` SET n = n + 1, amount = amount * 2 WHERE id BETWEEN $1 AND $2`, lo, lo+999); err != nil {
			return 0, err
		}
	}
	for lo := 0; lo < rows/5; lo += 1000 {
		if _, err := s.pool.Exec(ctx, `DELETE FROM `+pgTable+` WHERE id BETWEEN $1 AND $2`, lo, lo+999); err != nil {
			return 0, err
		}
	}
	return rows + rows + rows/5, nil
}

// recvlogical is the streaming reference: pg_recvlogical (pgoutput, the
// session settings of sluice's connections) draining slot up to end into
// /dev/null.
func (s *pgServer) recvlogical(ctx context.Context, slot string, end pglogrepl.LSN) (time.Duration, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(s.pg.BinDir, "pg_recvlogical"),
		"-d", s.pg.DSN(pgDB), "--slot", slot, "--start", "--no-loop",
		"-o", "proto_version=2", "-o", "publication_names="+pgPub,
		"--endpos", end.String(), "-f", "/dev/null")
	var opts []string
	for k, v := range postgres.SessionSettings {
		opts = append(opts, "-c "+k+"="+v)
	}
	cmd.Env = append(os.Environ(), "PGOPTIONS="+strings.Join(opts, " "), "PGAPPNAME=bench_recvlogical")
	t0 := time.Now()
	if out, err := cmd.CombinedOutput(); err != nil {
		return 0, fmt.Errorf("pg_recvlogical: %w\n%s", err, out)
	}
	return time.Since(t0), nil
}

func (s *pgServer) source(o postgres.Options) (*postgres.Source, error) {
	o.DSN, o.Tables, o.Publication = s.pg.DSN(pgDB), []string{pgTable}, pgPub
	return postgres.New(o, zap.NewNop(), nil)
}

// PGStream measures the Postgres source streaming into Kafka on workload
// (a) (Toast false: "pg-stream") or (b) (Toast true: "pg-toast"): N
// inserts, N updates and N/5 deletes of the six-column table in 1,000-row
// transactions, every consumer reading the same backlog from its own slot,
// all created before the writes. Measured in one run, in this order:
//
//  1. write: the workload itself (PostgreSQL's own write rate);
//  2. reference: pg_recvlogical to /dev/null (again as step 6; the ratio
//     uses the mean);
//  3. sluice: pipeline.Runtime with the source and the Kafka sink at the
//     config defaults (Debezium envelope in Avro through the registry,
//     acks=all, idempotent, lz4) until the broker acknowledged every
//     change; CPU and peak RSS are the phase's, with the whole backlog
//     waiting (the "RSS at a 1,000,000-row backlog" target);
//  4. Kafka ceiling: the records sluice wrote, produced again by franz-go
//     from memory with the same settings;
//  5. Debezium: the embedded engine (JSON converter) into the same broker;
//  6. reference again.
type PGStream struct {
	Toast bool
}

// Name implements Scenario.
func (s PGStream) Name() string {
	if s.Toast {
		return "pg-toast"
	}
	return "pg-stream"
}

// Run implements Scenario.
func (s PGStream) Run(o RunOptions) ([]Figure, error) {
	rows := o.Rows
	if rows <= 0 {
		rows = 1_000_000
	}
	rows -= rows % 5000
	if rows < 5000 {
		return nil, fmt.Errorf("%s: at least 5000 rows", s.Name())
	}
	ctx := context.Background()
	pg, br, err := withBroker(ctx, o, func(o RunOptions) (*pgServer, error) { return startPostgres(ctx, o, s.Toast) })
	if err != nil {
		return nil, err
	}
	defer br.stop()
	defer pg.stop()
	slots := []string{"ref1", "sluice", "debezium", "ref2"}
	start := map[string]pglogrepl.LSN{}
	for _, sl := range slots {
		if start[sl], err = pg.createSlot(ctx, sl); err != nil {
			return nil, err
		}
	}
	t0 := time.Now()
	changes, err := pg.writeWorkload(ctx, rows, s.Toast)
	if err != nil {
		return nil, err
	}
	write := time.Since(t0)
	end, err := pg.lsn(ctx, "SELECT pg_current_wal_lsn()::text")
	if err != nil {
		return nil, err
	}
	o.log("%s: %d changes written in %s, %.0f MiB of WAL", s.Name(), changes, write, float64(end-start["ref1"])/(1<<20))

	src, err := pg.source(postgres.Options{Pipeline: "bench", Slot: "sluice", HeartbeatInterval: time.Hour,
		Snapshot: postgres.SnapshotOptions{Mode: postgres.SnapshotNever}})
	if err != nil {
		return nil, err
	}
	from := postgres.Position{Phase: postgres.PhaseStream, Slot: "sluice", LSN: start["sluice"]}.Encode()
	figs, err := comparison{
		changes: changes, ref: "pg_recvlogical", ratio: "sluice / pg_recvlogical", target: ">= 0.5",
		runRef: func(i int) (time.Duration, error) { return pg.recvlogical(ctx, fmt.Sprintf("ref%d", i), end) },
		sluice: kafkaRun{src: src, prefix: "bench", connector: "postgresql", records: int64(changes), from: []byte(from), profile: o.Profile},
		// Every change is one event and every delete one tombstone more.
		topic: "bench." + pgTable, stored: int64(changes + rows/5),
		debezium: DebeziumOptions{Connector: "postgres", Host: pg.pg.Host, Port: pg.pg.Port, User: "postgres",
			Database: pgDB, Tables: []string{pgTable}, Slot: "debezium", Publication: pgPub, SnapshotMode: "no_data",
			TopicPrefix: "dbz", Brokers: br.k.Brokers(), Records: changes},
		stream: true,
	}.run(ctx, o, br, s.Name())
	if err != nil {
		return nil, err
	}
	return append([]Figure{{Name: "PostgreSQL write", Unit: "rows/s", Value: float64(changes) / write.Seconds()}}, figs...), nil
}

// runDebezium runs the peer to completion and records its version.
func runDebezium(ctx context.Context, o RunOptions, d DebeziumOptions) (DebeziumResult, error) {
	r, err := StartDebezium(ctx, d)
	if err != nil {
		return DebeziumResult{}, err
	}
	res, err := r.Wait(ctx)
	if err != nil {
		return res, fmt.Errorf("debezium: %w", err)
	}
	o.version("Debezium "+d.Connector, res.Version+" (embedded engine, JSON converter)")
	return res, nil
}

// insert implements latencyDB.
func (s *pgServer) insert(ctx context.Context, first, n int) error {
	_, err := s.pool.Exec(ctx, pgInsertSQL(false), first, first+n-1)
	return err
}

// streamFromNow implements latencyDB: a new slot, resumed at its
// consistent point.
func (s *pgServer) streamFromNow(ctx context.Context, name string, heartbeat time.Duration) (pipeline.Source, []byte, error) {
	lsn, err := s.createSlot(ctx, name)
	if err != nil {
		return nil, nil, err
	}
	src, err := s.source(postgres.Options{Pipeline: name, Slot: name, HeartbeatInterval: heartbeat,
		Snapshot: postgres.SnapshotOptions{Mode: postgres.SnapshotNever}})
	if err != nil {
		return nil, nil, err
	}
	return src, []byte(postgres.Position{Phase: postgres.PhaseStream, Slot: name, LSN: lsn}.Encode()), nil
}

func (s *pgServer) connector() string { return "postgresql" }

// PGLatency is workload (d) on Postgres: end-to-end latency into Kafka
// under a steady 5,000 and 20,000 rows/s (50 and 200 rows committed every
// 10ms, for RunOptions.Duration each; Rows is ignored), then the recovery time after a
// kill -9 of the daemon at 5,000 rows/s (see recovery).
type PGLatency struct{}

// Name implements Scenario.
func (PGLatency) Name() string { return "pg-latency" }

// Run implements Scenario.
func (PGLatency) Run(o RunOptions) ([]Figure, error) {
	ctx := context.Background()
	pg, br, err := withBroker(ctx, o, func(o RunOptions) (*pgServer, error) { return startPostgres(ctx, o, false) })
	if err != nil {
		return nil, err
	}
	defer br.stop()
	defer pg.stop()
	yaml := fmt.Sprintf(`  postgres:
    dsn: %s
    tables: [%s]
    publication: %s
    slot: recover
    heartbeat_interval: 200ms
    snapshot:
      mode: never`, pg.pg.DSN(pgDB), pgTable, pgPub)
	return latencyScenario(ctx, o, pg, br, yaml, "recover."+pgTable)
}

// PGSnapshot is workload (c): a table of N rows (default 5,000,000) of the
// six-column shape, read whole. Measured in one run:
//
//  1. reference: psql's COPY … TO STDOUT of the table to /dev/null,
//     before and after sluice (mean);
//  2. sluice: the source's initial snapshot (config defaults: 2 readers,
//     100,000-row key ranges) into Kafka until the broker acknowledged
//     every row;
//  3. Debezium: its initial snapshot (JSON converter) into the same broker.
type PGSnapshot struct{}

// Name implements Scenario.
func (PGSnapshot) Name() string { return "pg-snapshot" }

// Run implements Scenario.
func (s PGSnapshot) Run(o RunOptions) ([]Figure, error) {
	rows := o.Rows
	if rows <= 0 {
		rows = 5_000_000
	}
	ctx := context.Background()
	pg, br, err := withBroker(ctx, o, func(o RunOptions) (*pgServer, error) { return startPostgres(ctx, o, false) })
	if err != nil {
		return nil, err
	}
	defer br.stop()
	defer pg.stop()
	if err := pg.fill(ctx, o, s.Name(), rows); err != nil {
		return nil, err
	}
	copyRef := func() (time.Duration, error) { return pg.copyTime(ctx) }
	src, err := pg.source(postgres.Options{Pipeline: "snap", Slot: "snap", HeartbeatInterval: time.Hour,
		Snapshot: postgres.SnapshotOptions{Mode: postgres.SnapshotInitial, Parallel: 2, ChunkRows: 100_000}})
	if err != nil {
		return nil, err
	}
	return comparison{
		changes: rows, ref: "COPY TO STDOUT", ratio: "sluice / COPY", target: ">= 0.5",
		runRef: func(int) (time.Duration, error) { return copyRef() },
		sluice: kafkaRun{src: src, prefix: "snap", connector: "postgresql", records: int64(rows), profile: o.Profile},
		topic:  "snap." + pgTable, stored: int64(rows),
		debezium: DebeziumOptions{Connector: "postgres", Host: pg.pg.Host, Port: pg.pg.Port, User: "postgres",
			Database: pgDB, Tables: []string{pgTable}, Slot: "debezium", Publication: pgPub, SnapshotMode: "initial",
			TopicPrefix: "dbz", Brokers: br.k.Brokers(), Records: rows},
	}.run(ctx, o, br, s.Name())
}

// fill inserts rows rows of the six-column shape into the bench table
// and analyzes it.
func (s *pgServer) fill(ctx context.Context, o RunOptions, scenario string, rows int) error {
	ins := pgInsertSQL(false)
	t0 := time.Now()
	for lo := 0; lo < rows; lo += 250_000 {
		if _, err := s.pool.Exec(ctx, ins, lo, min(lo+250_000, rows)-1); err != nil {
			return err
		}
	}
	if _, err := s.pool.Exec(ctx, "VACUUM ANALYZE "+pgTable); err != nil {
		return err
	}
	var size int64
	if err := s.pool.QueryRow(ctx, "SELECT pg_table_size($1)", pgTable).Scan(&size); err != nil {
		return err
	}
	o.log("%s: %d rows loaded in %s, table %.0f MiB", scenario, rows, time.Since(t0), float64(size)/(1<<20))
	return nil
}

// copyTime times psql's COPY of the bench table TO STDOUT into /dev/null:
// the reference read.
func (s *pgServer) copyTime(ctx context.Context) (time.Duration, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(s.pg.BinDir, "psql"), "-X", "-q", "-d", s.pg.DSN(pgDB),
		"-c", "COPY "+pgTable+" TO STDOUT")
	var stderr strings.Builder
	cmd.Stdout, cmd.Stderr = nil, &stderr // nil: /dev/null
	t := time.Now()
	if err := cmd.Run(); err != nil {
		return 0, fmt.Errorf("psql COPY: %w\n%s", err, stderr.String())
	}
	return time.Since(t), nil
}
