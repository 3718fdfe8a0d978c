package daemon

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"go.uber.org/zap"

	"github.com/sluice-cdc/sluice/config"
	"github.com/sluice-cdc/sluice/offsets"
	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/sinks/kafka"
	"github.com/sluice-cdc/sluice/snapshot"
	"github.com/sluice-cdc/sluice/sources/generate"
	"github.com/sluice-cdc/sluice/sources/mysql"
	"github.com/sluice-cdc/sluice/sources/postgres"
	"github.com/sluice-cdc/sluice/verify"
)

// VerifyFlags are the options of `sluice verify`.
type VerifyFlags struct {
	Tables   []string // schema.table; empty: every captured table
	Sink     string   // one sink by name; empty: every sink
	Progress func(done, total int, r verify.Result)
	Settle   time.Duration // longest wait for the checkpoint before a recheck
}

// Verify compares every captured table of cfg with every sink that
// mirrors it (see package verify). The pipeline may be running: sinks
// that are servers are read beside it, and differences are rechecked once
// its checkpoint catches up; an embedded sink (DuckDB, Bleve) can be read
// only while the daemon that holds it is stopped, and says so otherwise.
func Verify(ctx context.Context, cfg *config.Config, flags VerifyFlags, log *zap.Logger) (verify.Report, error) {
	RegisterSecrets(cfg)
	src, err := verifySource(cfg)
	if err != nil {
		return verify.Report{}, err
	}
	built, err := buildSinks(cfg, log)
	if err != nil {
		return verify.Report{}, err
	}
	closeRoutes, err := routeSinks(ctx, cfg, built)
	defer closeRoutes()
	if err != nil {
		return verify.Report{}, err
	}
	transform, err := recordChain(cfg)
	if err != nil {
		return verify.Report{}, err
	}
	var sinks []verify.NamedSink
	for _, s := range built {
		if flags.Sink != "" && s.Name != flags.Sink {
			continue
		}
		vs := verify.NamedSink{Name: s.Name, Route: s.Route, Transform: transform}
		_, isKafka := s.Sink.(*kafka.Sink)
		if r, ok := s.Sink.(verify.Sink); !ok {
			vs.Err = fmt.Errorf("sink %s: %w", s.Name, verify.ErrNotSupported)
		} else if isKafka {
			// A topic is read by a client of its own, without Open: Open
			// would fence a running exactly-once pipeline's producer and
			// create the DLQ and offsets topics.
			vs.Sink = r
		} else if err := s.Sink.Open(ctx); err != nil {
			vs.Err = fmt.Errorf("open sink %s: %w (an embedded sink cannot be read while the daemon holds it: stop the pipeline, or verify the other sinks with --sink)", s.Name, err)
		} else {
			defer s.Sink.Close(context.WithoutCancel(ctx))
			vs.Sink = r
		}
		sinks = append(sinks, vs)
	}
	if flags.Sink != "" && len(sinks) == 0 {
		return verify.Report{}, fmt.Errorf("no sink named %q in %s", flags.Sink, cfg.File)
	}
	checkpoint := func(context.Context) (pipeline.Position, error) {
		cp, found, err := offsets.Peek(cfg.Offsets.Dir, cfg.Pipeline)
		if err != nil || !found || len(cp.Position) == 0 || string(cp.Position) == "null" {
			return nil, err
		}
		return pipeline.Position(cp.Position), nil
	}
	return verify.Run(ctx, src, sinks, verify.Options{Tables: flags.Tables, Checkpoint: checkpoint, Progress: flags.Progress, Settle: flags.Settle})
}

func verifySource(cfg *config.Config) (verify.Source, error) {
	switch {
	case cfg.Source.Postgres != nil:
		p := cfg.Source.Postgres
		dsn := withPassword(p.DSN, p.Password)
		var ids []pipeline.TableID
		for _, t := range p.Tables {
			schema, table, _ := strings.Cut(t, ".")
			ids = append(ids, pipeline.TableID{Schema: schema, Table: table})
		}
		return pgVerify{dsn: dsn, tables: ids}, nil
	case cfg.Source.MySQL != nil:
		opts, err := mysqlOptions(cfg)
		if err != nil {
			return nil, err
		}
		var ids []pipeline.TableID
		for _, t := range cfg.Source.MySQL.Tables {
			db, table, _ := strings.Cut(t, ".")
			ids = append(ids, pipeline.TableID{Database: db, Schema: db, Table: table})
		}
		return mysqlVerify{opts: opts, tables: ids}, nil
	case cfg.Source.Generate != nil:
		opts := generateOptions(cfg.Source.Generate)
		total := generate.Total(opts)
		if total < 0 {
			return nil, fmt.Errorf("verify compares a bounded generate feed with its sinks: set source.generate.changes in %s (an endless feed has no final state)", cfg.File)
		}
		return genVerify{opts: opts, total: total}, nil
	}
	return nil, fmt.Errorf("verify compares a database source with its sinks; the %s source has no database to read", cfg.Source.Kind())
}

// genVerify is a bounded generate feed as a verify.Source: its tables
// hold the feed's final state, which a checkpoint at the feed's end has
// delivered.
type genVerify struct {
	opts  generate.Options
	total int64
}

func (g genVerify) Tables() []pipeline.TableID {
	var ids []pipeline.TableID
	for _, t := range generate.Tables(g.opts) {
		ids = append(ids, t.ID)
	}
	return ids
}

func (g genVerify) Scan(ctx context.Context, id pipeline.TableID, shape func(*pipeline.Table) error, row func([]any) error) error {
	for _, t := range generate.Tables(g.opts) {
		if t.ID != id {
			continue
		}
		if err := shape(t); err != nil {
			return err
		}
		for _, r := range generate.Expected(g.opts, g.total)[id] {
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := row(slices.Clone(r)); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("generate: no table %s", id)
}

func (g genVerify) Now(context.Context) (verify.Mark, error) { return seqMark(g.total), nil }

// seqMark is covered by a generate checkpoint at or past its seq.
type seqMark int64

func (m seqMark) String() string { return fmt.Sprintf("seq %d", int64(m)) }

func (m seqMark) CoveredBy(cp pipeline.Position) (bool, error) {
	seq, err := generate.ParsePos(cp)
	return seq >= int64(m), err
}

type pgVerify struct {
	dsn    string
	tables []pipeline.TableID
}

func (p pgVerify) Tables() []pipeline.TableID { return p.tables }

func (p pgVerify) Scan(ctx context.Context, id pipeline.TableID, shape func(*pipeline.Table) error, row func([]any) error) error {
	return postgres.ScanTable(ctx, p.dsn, id.Schema, id.Table, shape, row)
}

func (p pgVerify) Now(ctx context.Context) (verify.Mark, error) {
	lsn, err := postgres.CurrentLSN(ctx, p.dsn)
	return lsnMark(lsn), err
}

// lsnMark is covered by a checkpoint at or past its LSN.
type lsnMark pglogrepl.LSN

func (m lsnMark) String() string { return pglogrepl.LSN(m).String() }

func (m lsnMark) CoveredBy(cp pipeline.Position) (bool, error) {
	// A checkpoint position wraps the source's with the snapshot progress.
	pos, err := postgres.ParsePosition(snapshot.StreamPosition(cp))
	if err != nil {
		return false, err
	}
	return pos.LSN >= pglogrepl.LSN(m), nil
}

type mysqlVerify struct {
	opts   mysql.Options
	tables []pipeline.TableID
}

func (m mysqlVerify) Tables() []pipeline.TableID { return m.tables }

func (m mysqlVerify) Scan(ctx context.Context, id pipeline.TableID, shape func(*pipeline.Table) error, row func([]any) error) error {
	return mysql.ScanTable(ctx, m.opts, id.Schema, id.Table, shape, row)
}

func (m mysqlVerify) Now(ctx context.Context) (verify.Mark, error) {
	p, err := mysql.CurrentPosition(ctx, m.opts)
	return gtidMark{p}, err
}

// gtidMark is covered by a checkpoint whose GTID set holds its own.
type gtidMark struct{ p mysql.Position }

func (m gtidMark) String() string { return m.p.GTID }

func (m gtidMark) CoveredBy(cp pipeline.Position) (bool, error) {
	pos, err := mysql.ParsePosition(snapshot.StreamPosition(cp))
	if err != nil {
		return false, err
	}
	return pos.Covers(m.p)
}
