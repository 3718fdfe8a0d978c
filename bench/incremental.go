package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"go.uber.org/zap"

	"github.com/sluice-cdc/sluice/offsets"
	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/sinks/duckdb"
	"github.com/sluice-cdc/sluice/snapshot"
	"github.com/sluice-cdc/sluice/sources/mysql"
	"github.com/sluice-cdc/sluice/sources/postgres"
)

// PGIncremental is the incremental snapshot engine reading the table of
// workload (c) (default 5,000,000 rows of the six-column shape) into
// Kafka and into DuckDB, next to the reference read of the same table in
// the same run.
// Measured in one run:
//
//  1. reference: psql's COPY … TO STDOUT of the table to /dev/null,
//     before and after sluice (mean);
//  2. fast path: the source's initial load (exported snapshot, 2 readers)
//     into Kafka, as pg-snapshot;
//  3. incremental, stream idle: snapshot.mode incremental (2 windows,
//     chunks adapting towards 500ms, up to 65,536 rows) into Kafka until
//     the broker acknowledged every row;
//  4. incremental under load: the same again, from a new slot, while a
//     writer commits 2,000 single-row updates a second; the figure is the
//     snapshot's duration, and the stream lag is the longest time a
//     committed update waited to be handed over by the source while the
//     snapshot ran (target < 5 s);
//  5. and 6. phases 3 and 4 again into DuckDB (the embedded sink; target
//     ≥ 0.5× the reference idle), each from a new slot into a new file.
type PGIncremental struct{}

// Name implements Scenario.
func (PGIncremental) Name() string { return "pg-incremental" }

// Run implements Scenario.
func (s PGIncremental) Run(o RunOptions) ([]Figure, error) {
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
	ref1, err := copyRef()
	if err != nil {
		return nil, err
	}

	fastSrc, err := pg.source(postgres.Options{Pipeline: "fast", Slot: "fast", HeartbeatInterval: time.Hour,
		Snapshot: postgres.SnapshotOptions{Mode: postgres.SnapshotInitial, Parallel: 2, ChunkRows: 100_000}})
	if err != nil {
		return nil, err
	}
	id := pipeline.TableID{Schema: "public", Table: "bench_rows"}
	return incrementalRun{
		rows: rows, ref: "COPY TO STDOUT", runRef: copyRef, ref1: ref1, connector: "postgresql",
		fast: snapshot.New(fastSrc, fastSrc.ChunkReader(4), snapshot.Options{Tables: []pipeline.TableID{id}}),
		engine: func(name string) (*snapshot.Engine, error) {
			src, err := pg.source(postgres.Options{Pipeline: name, Slot: name, HeartbeatInterval: time.Second,
				Snapshot: postgres.SnapshotOptions{Mode: postgres.SnapshotNever}})
			if err != nil {
				return nil, err
			}
			return snapshot.New(src, src.ChunkReader(4), snapshot.Options{Fresh: true, Parallel: 2,
				Tables: []pipeline.TableID{id}, Log: zap.NewNop()}), nil
		},
		update: func(id int) string { return fmt.Sprintf("UPDATE %s SET n = n + 1 WHERE id = %d", pgTable, id) },
		open: func(ctx context.Context) (func(string) error, func(), error) {
			c, err := pg.pool.Acquire(ctx)
			if err != nil {
				return nil, nil, err
			}
			return func(q string) error { _, err := c.Exec(ctx, q); return err }, c.Release, nil
		},
	}.run(ctx, o, br, s.Name())
}

// incrementalRun is the measured part of the incremental scenarios.
type incrementalRun struct {
	rows      int
	ref       string                        // the reference's figure name
	runRef    func() (time.Duration, error) // the reference read, run again at the end
	ref1      time.Duration                 // its first run
	connector string
	fast      pipeline.Source                             // the source's initial load
	engine    func(name string) (*snapshot.Engine, error) // a fresh incremental pipeline
	// open returns a connection's exec and its release for the writer;
	// update is one of its single-row updates.
	open   func(ctx context.Context) (func(string) error, func(), error)
	update func(id int) string
}

func (r incrementalRun) run(ctx context.Context, o RunOptions, br *broker, name string) ([]Figure, error) {
	rows := r.rows
	fast, err := br.toKafka(ctx, kafkaRun{src: r.fast, prefix: "fast", connector: r.connector, records: int64(rows), profile: o.Profile})
	if err != nil {
		return nil, fmt.Errorf("fast path: %w", err)
	}
	eng, err := r.engine("idle")
	if err != nil {
		return nil, err
	}
	idle, err := br.toKafka(ctx, kafkaRun{src: eng, prefix: "idle", connector: r.connector, records: int64(rows), profile: o.Profile})
	if err != nil {
		return nil, fmt.Errorf("incremental, idle: %w", err)
	}
	loaded, lag, err := r.underLoad(ctx, "loaded", func(eng *snapshot.Engine, until func(*pipeline.Runtime) bool) (phase, error) {
		return br.toKafka(ctx, kafkaRun{src: eng, prefix: "loaded", connector: r.connector, profile: o.Profile, until: until})
	})
	if err != nil {
		return nil, fmt.Errorf("incremental, under load: %w", err)
	}
	if eng, err = r.engine("duckidle"); err != nil {
		return nil, err
	}
	duckIdle, err := toDuckDB(ctx, eng, "duckidle", o.Profile, int64(rows), nil)
	if err != nil {
		return nil, fmt.Errorf("incremental into DuckDB, idle: %w", err)
	}
	duckLoaded, duckLag, err := r.underLoad(ctx, "duckloaded", func(eng *snapshot.Engine, until func(*pipeline.Runtime) bool) (phase, error) {
		return toDuckDB(ctx, eng, "duckloaded", o.Profile, 0, until)
	})
	if err != nil {
		return nil, fmt.Errorf("incremental into DuckDB, under load: %w", err)
	}
	lag = max(lag, duckLag)
	ref2, err := r.runRef()
	if err != nil {
		return nil, err
	}
	ref := (r.ref1 + ref2) / 2
	o.log("%s: %s %s and %s, initial load %s (first batch durable after %s), incremental idle %s (after %s), under 2,000 updates/s %s; into DuckDB idle %s, under load %s (stream lag up to %s)",
		name, r.ref, r.ref1, ref2, fast.wall, fast.first, idle.wall, idle.first, loaded.wall, duckIdle.wall, duckLoaded.wall, lag)
	n := float64(rows)
	rate := func(d time.Duration) float64 { return n / d.Seconds() }
	return []Figure{
		{Name: r.ref, Unit: "rows/s", Value: rate(ref)},
		{Name: "sluice initial load → Kafka", Unit: "rows/s", Value: rate(fast.wall)},
		{Name: "sluice incremental → Kafka, idle", Unit: "rows/s", Value: rate(idle.wall)},
		{Name: "sluice incremental → Kafka, 2,000 updates/s", Unit: "rows/s", Value: rate(loaded.wall)},
		{Name: "initial load / reference", Unit: "ratio", Value: ref.Seconds() / fast.wall.Seconds()},
		{Name: "incremental / reference, idle", Unit: "ratio", Value: ref.Seconds() / idle.wall.Seconds(), Target: ">= 0.35"},
		{Name: "incremental / reference, under load", Unit: "ratio", Value: ref.Seconds() / loaded.wall.Seconds()},
		{Name: "sluice incremental → DuckDB, idle", Unit: "rows/s", Value: rate(duckIdle.wall)},
		{Name: "sluice incremental → DuckDB, 2,000 updates/s", Unit: "rows/s", Value: rate(duckLoaded.wall)},
		{Name: "incremental → DuckDB / reference, idle", Unit: "ratio", Value: ref.Seconds() / duckIdle.wall.Seconds(), Target: ">= 0.5"},
		{Name: "incremental → DuckDB / reference, under load", Unit: "ratio", Value: ref.Seconds() / duckLoaded.wall.Seconds()},
		{Name: "stream lag during the snapshot", Unit: "s", Value: lag.Seconds(), Target: "< 5"},
		{Name: "sluice CPU, incremental idle", Unit: "s per 1M rows", Value: idle.cpu.Seconds() * 1e6 / n},
		{Name: "sluice peak RSS, incremental idle", Unit: "MiB", Value: idle.peakRSS / (1 << 20)},
	}, nil
}

// underLoad runs a fresh incremental pipeline named name through into
// while a writer commits 2,000 single-row updates a second, until the
// snapshot is over; it returns the phase and the stream lag: the longest
// time a committed update waited to be handed over by the source while
// the snapshot ran.
func (r incrementalRun) underLoad(ctx context.Context, name string,
	into func(*snapshot.Engine, func(*pipeline.Runtime) bool) (phase, error)) (phase, time.Duration, error) {
	eng, err := r.engine(name)
	if err != nil {
		return phase{}, 0, err
	}
	wctx, stopWriter := context.WithCancel(ctx)
	var lagMax atomic.Int64 // nanoseconds
	writerErr := make(chan error, 1)
	go func() { writerErr <- r.write(wctx, 2000) }()
	started := time.Now()
	begun := false // the engine listed its table: the runtime opened it
	res, err := into(eng, func(*pipeline.Runtime) bool {
		if !begun {
			begun = len(eng.Snapshotting()) > 0
			return false
		}
		// The lag: now minus the commit time of the last transaction the
		// source handed over, once the stream has handed one.
		if st := eng.Status(); !st.LastEventTime.IsZero() && time.Since(started) > 2*time.Second {
			if lag := time.Since(st.LastEventTime); int64(lag) > lagMax.Load() {
				lagMax.Store(int64(lag))
			}
		}
		return len(eng.Snapshotting()) == 0
	})
	stopWriter()
	if werr := <-writerErr; err == nil && werr != nil {
		err = werr
	}
	return res, time.Duration(lagMax.Load()), err
}

// toDuckDB runs src through pipeline.Runtime into a DuckDB sink in a temp
// dir, measured like toKafka.
func toDuckDB(ctx context.Context, src pipeline.Source, prefix, profile string, n int64, until func(*pipeline.Runtime) bool) (phase, error) {
	dir, err := os.MkdirTemp("", "sluice-bench-")
	if err != nil {
		return phase{}, err
	}
	defer os.RemoveAll(dir)
	store, err := offsets.OpenDir(filepath.Join(dir, "offsets"), prefix)
	if err != nil {
		return phase{}, err
	}
	defer store.Close()
	sink := duckdb.New(duckdb.Options{Name: "duck", Path: filepath.Join(dir, "bench.duckdb")}, nil)
	rt, err := pipeline.New(pipeline.Config{Pipeline: prefix, RetryMaxAttempts: 5}, src,
		[]pipeline.NamedSink{{Name: "duck", Sink: sink}}, store, pipeline.Options{})
	if err != nil {
		return phase{}, err
	}
	return measure(ctx, rt, "duck", profile, "duckdb-"+prefix, n, until)
}

// write commits perSecond single-row updates a second until ctx ends.
func (r incrementalRun) write(ctx context.Context, perSecond int) error {
	exec, release, err := r.open(ctx)
	if err != nil {
		return err
	}
	defer release()
	rng := rand.New(rand.NewPCG(9, 9))
	tick := time.NewTicker(time.Second / time.Duration(perSecond))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		if err := exec(r.update(rng.IntN(r.rows))); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
}

// MariaDBIncremental is PGIncremental on MariaDB: the table of
// mariadb-snapshot, the mariadb client's SELECT stream as the reference,
// and a watermark table in the sluice database.
type MariaDBIncremental struct{}

// Name implements Scenario.
func (MariaDBIncremental) Name() string { return "mariadb-incremental" }

// Run implements Scenario.
func (s MariaDBIncremental) Run(o RunOptions) ([]Figure, error) {
	rows := o.Rows
	if rows <= 0 {
		rows = 5_000_000
	}
	ctx := context.Background()
	m, br, err := withBroker(ctx, o, func(o RunOptions) (*mariaServer, error) { return startMaria(ctx, o) })
	if err != nil {
		return nil, err
	}
	defer br.stop()
	defer m.stop()
	if err := m.fill(o, s.Name(), rows); err != nil {
		return nil, err
	}
	ref1, err := m.selectAll(ctx)
	if err != nil {
		return nil, err
	}
	opts := m.options("fast")
	opts.WatermarkTable = mysql.DefaultWatermarkTable
	opts.Snapshot = mysql.SnapshotOptions{Mode: mysql.SnapshotInitial, Parallel: 2, ChunkRows: 100_000}
	fastSrc, err := mysql.New(opts, nil, nil)
	if err != nil {
		return nil, err
	}
	id := pipeline.TableID{Database: "bench", Schema: "bench", Table: "t"}
	return incrementalRun{
		rows: rows, ref: "mariadb SELECT *", runRef: func() (time.Duration, error) { return m.selectAll(ctx) }, ref1: ref1,
		connector: "mysql",
		fast:      snapshot.New(fastSrc, fastSrc.ChunkReader(4), snapshot.Options{Tables: []pipeline.TableID{id}}),
		engine: func(name string) (*snapshot.Engine, error) {
			opts := m.options(name)
			opts.WatermarkTable = mysql.DefaultWatermarkTable
			opts.Snapshot.Mode = mysql.SnapshotNever
			src, err := mysql.New(opts, nil, nil)
			if err != nil {
				return nil, err
			}
			return snapshot.New(src, src.ChunkReader(4), snapshot.Options{Fresh: true, Parallel: 2,
				Tables: []pipeline.TableID{id}, Log: zap.NewNop()}), nil
		},
		update: func(id int) string { return fmt.Sprintf("UPDATE bench.t SET n = n + 1 WHERE id = %d", id) },
		open: func(ctx context.Context) (func(string) error, func(), error) {
			c, err := client.Connect(m.addr, "root", "", "")
			if err != nil {
				return nil, nil, err
			}
			return func(q string) error { _, err := c.Execute(q); return err }, func() { c.Close() }, nil
		},
	}.run(ctx, o, br, s.Name())
}
