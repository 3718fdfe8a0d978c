package daemon

import (
	"encoding/json"
	"fmt"
	"net/url"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/sluice-cdc/sluice/config"
	"github.com/sluice-cdc/sluice/internal/tlsconf"
	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/schema"
	"github.com/sluice-cdc/sluice/sinks/bleve"
	"github.com/sluice-cdc/sluice/sinks/duckdb"
	"github.com/sluice-cdc/sluice/sinks/kafka"
	pgsink "github.com/sluice-cdc/sluice/sinks/postgres"
	redissink "github.com/sluice-cdc/sluice/sinks/redis"
	"github.com/sluice-cdc/sluice/sinks/search"
	"github.com/sluice-cdc/sluice/snapshot"
	"github.com/sluice-cdc/sluice/sources/generate"
	"github.com/sluice-cdc/sluice/sources/mysql"
	"github.com/sluice-cdc/sluice/sources/postgres"
)

// buildSource makes the configured source.
func buildSource(cfg *config.Config, flags RunFlags, log *zap.Logger, reg prometheus.Registerer) (pipeline.Source, error) {
	switch {
	case cfg.Source.Generate != nil:
		return generate.New(generateOptions(cfg.Source.Generate)), nil
	case cfg.Source.Postgres != nil:
		p := cfg.Source.Postgres
		opts := postgres.Options{
			Pipeline: cfg.Pipeline, DSN: p.DSN, Password: p.Password, Tables: p.Tables,
			Publication: p.Publication, Slot: p.Slot, FullIdentityTables: p.FullIdentityTables,
			HeartbeatInterval: p.HeartbeatInterval.Std(), StatusInterval: p.StatusInterval.Std(),
			Streaming: p.Streaming, SpillThreshold: p.SpillThreshold.Int64(),
			SpillDir:         filepath.Join(cfg.Offsets.Dir, "spill"),
			ReconnectInitial: p.ReconnectBackoff.Initial.Std(), ReconnectMax: p.ReconnectBackoff.Max.Std(),
			DropSlotOnExit: flags.DropSlotOnExit, FromPreviousCheckpoint: flags.FromPreviousCheckpoint,
		}
		opts.Snapshot.Mode = p.Snapshot.Mode
		opts.Snapshot.Parallel = p.Snapshot.Parallel
		opts.Snapshot.ChunkRows = int(p.Snapshot.ChunkRows)
		opts.Snapshot.ReadOnly = p.Snapshot.ReadOnly
		if p.Snapshot.Mode == "incremental" {
			opts.Snapshot.Mode = postgres.SnapshotNever // the engine reads the tables
		}
		src, err := postgres.New(opts, log.Named("postgres"), reg)
		if err != nil {
			return nil, err
		}
		ids := make([]pipeline.TableID, len(p.Tables))
		for i, t := range p.Tables {
			schema, name, _ := strings.Cut(t, ".")
			ids[i] = pipeline.TableID{Schema: schema, Table: name}
		}
		// Every Postgres pipeline runs the incremental snapshot engine:
		// tables added later and `sluice snapshot` requests use it.
		return snapshot.New(src, src.ChunkReader(2*p.Snapshot.Parallel), snapshot.Options{
			Tables: ids, Fresh: p.Snapshot.Mode == "incremental", IgnoreAdded: p.Snapshot.Mode == "never",
			Parallel: p.Snapshot.Parallel, MaxChunkRows: p.Snapshot.MaxChunkRows, ChunkTime: p.Snapshot.ChunkTime.Std(),
			MaxChunkBytes: int(p.Snapshot.MaxChunkBytes.Int64()),
			Log:           log.Named("snapshot"), Registerer: reg,
		}), nil
	case cfg.Source.MySQL != nil:
		return buildMySQL(cfg, log, reg)
	}
	return nil, fmt.Errorf("config: no source configured")
}

func generateOptions(g *config.GenerateSource) generate.Options {
	return generate.Options{
		Seed: g.Seed, Tables: g.Tables, InitialRows: int(g.InitialRows), Changes: g.Changes, Rate: g.Rate,
		Mix:   generate.Mix{Insert: g.Mix.Insert, Update: g.Mix.Update, Delete: g.Mix.Delete},
		Batch: g.Batch, Database: "generate",
	}
}

func buildMySQL(cfg *config.Config, log *zap.Logger, reg prometheus.Registerer) (pipeline.Source, error) {
	opts, err := mysqlOptions(cfg)
	if err != nil {
		return nil, err
	}
	m := cfg.Source.MySQL
	if m.Snapshot.Mode == "incremental" {
		opts.Snapshot.Mode = mysql.SnapshotNever // the engine reads the tables
	}
	src, err := mysql.New(opts, log.Named("mysql"), reg)
	if err != nil {
		return nil, err
	}
	ids := make([]pipeline.TableID, len(m.Tables))
	for i, t := range m.Tables {
		db, name, _ := strings.Cut(t, ".")
		ids[i] = pipeline.TableID{Database: db, Schema: db, Table: name}
	}
	// Like Postgres, every MySQL pipeline runs the engine: tables added
	// later and `sluice snapshot` requests use it.
	return snapshot.New(src, src.ChunkReader(2*m.Snapshot.Parallel), snapshot.Options{
		Tables: ids, Fresh: m.Snapshot.Mode == "incremental", IgnoreAdded: m.Snapshot.Mode == "never",
		Parallel: m.Snapshot.Parallel, MaxChunkRows: m.Snapshot.MaxChunkRows, ChunkTime: m.Snapshot.ChunkTime.Std(),
		MaxChunkBytes: int(m.Snapshot.MaxChunkBytes.Int64()),
		Log:           log.Named("snapshot"), Registerer: reg,
	}), nil
}

// mysqlOptions are the MySQL source's options of cfg.
func mysqlOptions(cfg *config.Config) (mysql.Options, error) {
	m := cfg.Source.MySQL
	opts := mysql.Options{
		Pipeline: cfg.Pipeline, DSN: m.DSN, Password: m.Password, Tables: m.Tables, ServerID: uint32(m.ServerID),
		HeartbeatInterval: m.HeartbeatInterval.Std(), ReadTimeout: m.ReadTimeout.Std(), StatusInterval: m.StatusInterval.Std(),
		ZeroDates: m.ZeroDates, IgnoreDDLTables: m.IgnoreDDLTables, CascadeTables: m.CascadeTables,
		ReconnectInitial: m.ReconnectBackoff.Initial.Std(), ReconnectMax: m.ReconnectBackoff.Max.Std(),
		Snapshot: mysql.SnapshotOptions{Mode: m.Snapshot.Mode, Parallel: m.Snapshot.Parallel, ChunkRows: int(m.Snapshot.ChunkRows),
			Lock: m.Snapshot.Lock},
		WatermarkTable: m.Snapshot.WatermarkTable, ReadOnlySnapshot: m.Snapshot.ReadOnly,
	}
	if t := m.TLS; t.Enabled {
		tc, err := tlsconf.Config(t.CAFile, t.CertFile, t.KeyFile, t.InsecureSkipVerify)
		if err != nil {
			return opts, &pipeline.OpenError{What: "source mysql tls", Err: err}
		}
		opts.TLS = tc
	}
	return opts, nil
}

// buildSinks makes the configured sinks.
func buildSinks(cfg *config.Config, log *zap.Logger) ([]pipeline.NamedSink, error) {
	var out []pipeline.NamedSink
	for _, s := range cfg.Sinks {
		switch {
		case s.Bleve != nil:
			b := s.Bleve
			out = append(out, pipeline.NamedSink{Name: b.Name, Sink: bleve.New(bleve.Options{
				Name: b.Name, Path: b.Path, TombstoneTTL: b.TombstoneTTL.Std(),
			}, log.Named("sink").With(zap.String("sink", b.Name)))})
		case s.OpenSearch != nil || s.Elasticsearch != nil:
			x, kind := s.OpenSearch, "opensearch"
			if x == nil {
				x, kind = s.Elasticsearch, "elasticsearch"
			}
			out = append(out, pipeline.NamedSink{Name: x.Name, Sink: search.New(indexOptions(kind, x),
				log.Named("sink").With(zap.String("sink", x.Name)))})
		case s.DuckDB != nil:
			d := s.DuckDB
			out = append(out, pipeline.NamedSink{Name: d.Name, Sink: duckdb.New(duckdb.Options{
				Name: d.Name, Path: d.Path, Schema: d.Schema, HardDelete: d.HardDelete, TombstoneTTL: d.TombstoneTTL.Std(),
				MemoryLimit: d.MemoryLimit.Int64(), Threads: d.Threads, RowGroupSize: d.RowGroupSize, TableTemplate: d.TableTemplate,
			}, log.Named("sink").With(zap.String("sink", d.Name)))})
		case s.Kafka != nil:
			k, err := buildKafka(cfg, s.Kafka, log.Named("sink").With(zap.String("sink", s.Kafka.Name)))
			if err != nil {
				return nil, err
			}
			out = append(out, pipeline.NamedSink{Name: s.Kafka.Name, Sink: k})
		case s.Postgres != nil:
			p := s.Postgres
			template := p.TableTemplate
			if p.TablePrefix != "" {
				template = p.TablePrefix + "{table}" // the older setting (config checks they are not both set)
			}
			out = append(out, pipeline.NamedSink{Name: p.Name, Sink: pgsink.New(pgsink.Options{
				Name: p.Name, DSN: withPassword(p.DSN, p.Password), Schema: p.Schema, TableTemplate: template,
				HardDelete: p.HardDelete, TombstoneTTL: p.TombstoneTTL.Std(),
			}, log.Named("sink").With(zap.String("sink", p.Name)))})
		case s.Redis != nil:
			r := s.Redis
			out = append(out, pipeline.NamedSink{Name: r.Name, Sink: redissink.New(redissink.Options{
				Name: r.Name, Addr: r.Addr, Username: r.Username, Password: r.Password, DB: r.DB,
				KeyTemplate: r.KeyTemplate, Format: r.Format, TTL: r.TTL.Std(), TombstoneTTL: r.TombstoneTTL.Std(), TLS: r.TLS,
			}, log.Named("sink").With(zap.String("sink", r.Name)))})
		default:
			return nil, fmt.Errorf("config: sink %q has no kind", s.Name())
		}
	}
	return out, nil
}

// indexOptions maps an opensearch or elasticsearch sink's settings.
func indexOptions(kind string, x *config.IndexSink) search.Options {
	o := search.Options{Name: x.Name, Kind: kind, URLs: x.URLs, Username: x.Username, Password: x.Password,
		APIKey: x.APIKey, IndexTemplate: x.IndexTemplate, AliasSuffix: x.AliasSuffix, StateIndex: x.StateIndex,
		Refresh: x.Refresh, TombstoneTTL: x.TombstoneTTL.Std(),
		BulkMaxBytes: int(x.BulkMaxBytes.Int64()), Timeout: x.Timeout.Std()}
	if o.TombstoneTTL == 0 {
		o.TombstoneTTL = -1 // the config's 0 keeps tombstones forever
	}
	if x.TLS.Enabled {
		o.CAFile, o.InsecureSkipVerify = x.TLS.CAFile, x.TLS.InsecureSkipVerify
	}
	if len(x.Mappings) > 0 {
		o.Mappings = map[string]json.RawMessage{}
		for _, m := range x.Mappings {
			o.Mappings[m.Table] = json.RawMessage(m.JSON)
		}
	}
	return o
}

// withPassword sets password on a postgres:// URL or key=value DSN.
func withPassword(dsn, password string) string {
	if password == "" {
		return dsn
	}
	if u, err := url.Parse(dsn); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		name := ""
		if u.User != nil {
			name = u.User.Username()
		}
		u.User = url.UserPassword(name, password)
		return u.String()
	}
	quoted := strings.ReplaceAll(strings.ReplaceAll(password, `\`, `\\`), `'`, `\'`)
	return dsn + " password='" + quoted + "'"
}

// buildKafka makes a kafka sink and its schema registry client.
// routeTopics lists the topic templates the route transforms name.
func routeTopics(cfg *config.Config) []string {
	var out []string
	for _, t := range cfg.Transforms {
		if r := t.Route; r != nil {
			for _, rule := range r.Rules {
				if rule.Topic != "" && !slices.Contains(out, rule.Topic) {
					out = append(out, rule.Topic)
				}
			}
		}
	}
	return out
}

func buildKafka(cfg *config.Config, k *config.KafkaSink, log *zap.Logger) (*kafka.Sink, error) {
	regOpts := schema.SRClientOptions{Username: k.Registry.Username, Password: k.Registry.Password, Timeout: k.Registry.Timeout.Std()}
	if t := k.Registry.TLS; t.Enabled {
		tc, err := tlsconf.Config(t.CAFile, t.CertFile, t.KeyFile, t.InsecureSkipVerify)
		if err != nil {
			return nil, &pipeline.OpenError{What: "sink " + k.Name + " registry", Err: err}
		}
		regOpts.TLS = tc
	}
	connector := cfg.Source.Kind()
	if connector == "postgres" {
		connector = "postgresql" // Debezium's name for the connector
	}
	opts := kafka.Options{
		Name: k.Name, Brokers: k.Brokers, ServerName: k.ServerName, TopicTemplate: k.TopicTemplate,
		Envelope: k.Envelope, SubjectStrategy: k.SubjectStrategy, Compatibility: k.Compatibility,
		IncompatiblePolicy: k.IncompatiblePolicy, Tombstones: k.Tombstones, Unchanged: k.UnchangedFields,
		ConnectorName: connector, Version: buildVersion(), DLQTopic: k.DLQTopic, RouteTopics: routeTopics(cfg),
		ExactlyOnce: k.ExactlyOnce, OffsetsTopic: k.OffsetsTopic, Pipeline: cfg.Pipeline,
		CreateTopics: kafka.TopicOptions{Enabled: k.CreateTopics.Enabled, Partitions: k.CreateTopics.Partitions,
			ReplicationFactor: k.CreateTopics.ReplicationFactor, Compact: k.CreateTopics.Compact},
		Producer: kafka.ProducerOptions{Linger: k.Producer.Linger.Std(), BatchMaxBytes: int(k.Producer.BatchMaxBytes.Int64()),
			Compression: k.Producer.Compression, DeliveryTimeout: k.Producer.DeliveryTimeout.Std()},
		TLS: kafka.TLSOptions{Enabled: k.TLS.Enabled, CAFile: k.TLS.CAFile, CertFile: k.TLS.CertFile, KeyFile: k.TLS.KeyFile,
			InsecureSkipVerify: k.TLS.InsecureSkipVerify},
		SASL: kafka.SASLOptions{Mechanism: k.SASL.Mechanism, Username: k.SASL.Username, Password: k.SASL.Password},
		// Room for a full batch, its tombstones and dead letters.
		MaxBufferedRecords: 2*cfg.Runtime.BatchMaxRecords + 1000,
	}
	if cfg.Source.Kind() == "mysql" {
		// GTIDs name a transaction on every server: exactly-once skips
		// what a run on another server replays (docs/versions.md).
		opts.Covers = mysql.Covers
	}
	s, err := kafka.New(opts, schema.NewSRClient(k.Registry.URL, regOpts), log)
	if err != nil {
		return nil, &pipeline.OpenError{What: "sink " + k.Name, Err: err}
	}
	return s, nil
}

// buildVersion is sluice's module version, "dev" for development builds.
func buildVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
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
		WriteTimeout:       r.WriteTimeout.Std(),
		PipelinedWrites:    r.PipelinedWrites,
		WriteTargetLatency: r.WriteTargetLatency.Std(),
		DegradedAfter:      r.DegradedAfter.Std(),
		RetryInitial:       r.Retry.Initial.Std(),
		RetryMax:           r.Retry.Max.Std(),
		RetryMaxAttempts:   r.Retry.MaxAttempts,
		QuarantineHold:     r.Quarantine == "hold",
	}
}
