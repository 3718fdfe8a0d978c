package daemon

import (
	"fmt"
	"path/filepath"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/sluice-cdc/sluice/config"
	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/sinks/duckdb"
	"github.com/sluice-cdc/sluice/sources/generate"
	"github.com/sluice-cdc/sluice/sources/postgres"
)

// buildSource makes the configured source.
func buildSource(cfg *config.Config, flags RunFlags, log *zap.Logger, reg prometheus.Registerer) (pipeline.Source, error) {
	switch {
	case cfg.Source.Generate != nil:
		g := cfg.Source.Generate
		return generate.New(generate.Options{
			Seed: g.Seed, Tables: g.Tables, InitialRows: int(g.InitialRows), Changes: g.Changes, Rate: g.Rate,
			Mix:   generate.Mix{Insert: g.Mix.Insert, Update: g.Mix.Update, Delete: g.Mix.Delete},
			Batch: g.Batch, Database: "generate",
		}), nil
	case cfg.Source.Postgres != nil:
		p := cfg.Source.Postgres
		opts := postgres.Options{
			Pipeline: cfg.Pipeline, DSN: p.DSN, Password: p.Password, Tables: p.Tables,
			Publication: p.Publication, Slot: p.Slot, FullIdentityTables: p.FullIdentityTables,
			HeartbeatInterval: p.HeartbeatInterval.Std(), StatusInterval: p.StatusInterval.Std(),
			Streaming: p.Streaming, SpillThreshold: p.SpillThreshold.Int64(),
			SpillDir:         filepath.Join(cfg.Offsets.Dir, "spill"),
			ReconnectInitial: p.ReconnectBackoff.Initial.Std(), ReconnectMax: p.ReconnectBackoff.Max.Std(),
			DropSlotOnExit: flags.DropSlotOnExit,
		}
		opts.Snapshot.Mode = p.Snapshot.Mode
		opts.Snapshot.Parallel = p.Snapshot.Parallel
		opts.Snapshot.ChunkRows = int(p.Snapshot.ChunkRows)
		return postgres.New(opts, log.Named("postgres"), reg)
	}
	return nil, fmt.Errorf("config: no source configured")
}

// buildSinks makes the configured sinks.
func buildSinks(cfg *config.Config, log *zap.Logger) ([]pipeline.NamedSink, error) {
	var out []pipeline.NamedSink
	for _, s := range cfg.Sinks {
		switch {
		case s.DuckDB != nil:
			d := s.DuckDB
			out = append(out, pipeline.NamedSink{Name: d.Name, Sink: duckdb.New(duckdb.Options{
				Name: d.Name, Path: d.Path, Schema: d.Schema, HardDelete: d.HardDelete, TombstoneTTL: d.TombstoneTTL.Std(),
			}, log.Named("sink").With(zap.String("sink", d.Name)))})
		default:
			return nil, fmt.Errorf("config: sink %q has no kind", s.Name())
		}
	}
	return out, nil
}

// runtimeConfig maps the runtime section.
func runtimeConfig(cfg *config.Config) pipeline.Config {
	r := cfg.Runtime
	return pipeline.Config{
		Pipeline:           cfg.Pipeline,
		MaxInFlightRecords: r.MaxInFlightRecords,
		MaxInFlightBytes:   r.MaxInFlightBytes.Int64(),
		BatchMaxRecords:    r.BatchMaxRecords,
		BatchMaxBytes:      r.BatchMaxBytes.Int64(),
		BatchLinger:        r.BatchLinger.Std(),
		CheckpointInterval: r.CheckpointInterval.Std(),
		ShutdownTimeout:    r.ShutdownTimeout.Std(),
		RetryInitial:       r.Retry.Initial.Std(),
		RetryMax:           r.Retry.Max.Std(),
		RetryMaxAttempts:   r.Retry.MaxAttempts,
	}
}
