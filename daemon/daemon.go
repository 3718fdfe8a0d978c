package daemon

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"runtime/debug"
	"sort"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.uber.org/zap"

	"github.com/sluice-cdc/sluice/config"
	"github.com/sluice-cdc/sluice/internal/memtrim"
	"github.com/sluice-cdc/sluice/obs"
	"github.com/sluice-cdc/sluice/offsets"
	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/snapshot"
)

// RunFlags are the command-line switches of `sluice run`.
type RunFlags struct {
	// ResetOffsets moves the stored checkpoint aside (never deletes it) and
	// starts over, with a fresh snapshot.
	ResetOffsets bool
	// FromPreviousCheckpoint resumes from the checkpoint before the newest,
	// after a corrupt newest checkpoint was reported.
	FromPreviousCheckpoint bool
	// DropSlotOnExit drops the Postgres replication slot at exit (throwaway
	// runs only: the slot's position is lost).
	DropSlotOnExit bool
	// HTTPListen overrides http.listen when not empty.
	HTTPListen string
	// OnListen is called with the bound HTTP address (tests, quickstart).
	OnListen func(addr string)
}

// Exit codes of `sluice run` (documented in the README).
const (
	ExitOK          = 0
	ExitFailure     = 1   // the pipeline failed while running
	ExitConfig      = 2   // the config (or a flag) is invalid
	ExitSetup       = 3   // a source or sink refused to start (preflight, privileges, lost slot)
	ExitCheckpoint  = 4   // the stored checkpoint is corrupt, foreign or from a newer sluice
	ExitUndrained   = 5   // stopped before every record read was durable (the drain deadline passed)
	ExitInterrupted = 130 // a second signal stopped sluice without draining
)

// ExitCode maps an error returned by Run to the documented exit code.
func ExitCode(err error) int {
	if err == nil {
		return ExitOK
	}
	var ce *config.Errors
	var corrupt *offsets.CorruptError
	var format *offsets.FormatError
	var foreign *offsets.ForeignError
	var open *pipeline.OpenError
	var undrained *pipeline.UndrainedError
	switch {
	case errors.As(err, &undrained):
		return ExitUndrained
	case errors.As(err, &ce):
		return ExitConfig
	case errors.As(err, &corrupt), errors.As(err, &format), errors.As(err, &foreign):
		return ExitCheckpoint
	case errors.As(err, &open):
		return ExitSetup
	}
	return ExitFailure
}

// RegisterSecrets tells the log redactor about every secret in cfg.
func RegisterSecrets(cfg *config.Config) {
	if p := cfg.Source.Postgres; p != nil {
		if p.Password != "" {
			obs.RegisterSecret(p.Password)
		}
		if u, err := url.Parse(p.DSN); err == nil && u.User != nil {
			if pw, ok := u.User.Password(); ok && pw != "" {
				obs.RegisterSecret(pw)
			}
		}
	}
	for _, s := range cfg.Sinks {
		if p := s.Postgres; p != nil {
			obs.RegisterSecret(p.Password)
			if u, err := url.Parse(p.DSN); err == nil && u.User != nil {
				if pw, ok := u.User.Password(); ok {
					obs.RegisterSecret(pw)
				}
			}
		}
		if r := s.Redis; r != nil {
			obs.RegisterSecret(r.Password)
		}
		if k := s.Kafka; k != nil {
			for _, pw := range []string{k.SASL.Password, k.Registry.Password} {
				if pw != "" {
					obs.RegisterSecret(pw)
				}
			}
		}
	}
}

// Run builds the pipeline from cfg and runs it until ctx is cancelled (a
// graceful stop) or it fails. A failure marked pipeline.Restart (an
// initial load that gave way to a schema change) starts the pipeline again
// from its last checkpoint, after restartWait, without leaving the
// process; --reset-offsets and --from-previous-checkpoint apply to the
// first start only. With --drop-slot-on-exit the failure ends the run
// instead: the stop drops the slot the checkpoint needs.
func Run(ctx context.Context, cfg *config.Config, flags RunFlags, log *zap.Logger) error {
	RegisterSecrets(cfg)
	log = log.With(zap.String("pipeline", cfg.Pipeline))
	// A restart serves where the first start did, also on a port the
	// system picked (":0").
	onListen := flags.OnListen
	flags.OnListen = func(addr string) {
		flags.HTTPListen = addr
		if onListen != nil {
			onListen(addr)
		}
	}
	wait := restartWait
	for restarts := 1; ; restarts++ {
		err := runOnce(ctx, cfg, flags, log)
		if err == nil || !pipeline.IsRestart(err) || flags.DropSlotOnExit || ctx.Err() != nil {
			return err
		}
		log.Warn("starting the pipeline again from its last checkpoint", zap.Error(err),
			zap.Int("restart", restarts), zap.Duration("after", wait))
		flags.ResetOffsets, flags.FromPreviousCheckpoint = false, false
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		wait = min(2*wait, maxRestartWait)
	}
}

// restartWait and maxRestartWait bound the wait before a restart
// (doubling from one to the next in a run).
const (
	restartWait    = time.Second
	maxRestartWait = time.Minute
)

// runOnce builds the pipeline from cfg and runs it once.
func runOnce(ctx context.Context, cfg *config.Config, flags RunFlags, log *zap.Logger) error {
	setMemoryLimit(MemoryLimit(cfg), log)
	trimCtx, stopTrim := context.WithCancel(ctx)
	defer stopTrim()
	go memtrim.Run(trimCtx, trimInterval)
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics := obs.NewMetrics(reg, cfg.Pipeline)

	store, err := offsets.OpenDir(cfg.Offsets.Dir, cfg.Pipeline, offsets.WithLogger(log.Named("offsets")))
	if err != nil {
		return &pipeline.OpenError{What: "offset store", Err: err}
	}
	defer store.Close()
	var st pipeline.OffsetStore = store
	switch {
	case flags.ResetOffsets:
		if err := store.Reset(ctx); err != nil {
			return err
		}
		log.Warn("offsets reset: starting over with a fresh snapshot", zap.String("dir", cfg.Offsets.Dir))
	case flags.FromPreviousCheckpoint:
		cp, ok, err := store.LoadPrevious(ctx)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("--from-previous-checkpoint: no previous checkpoint in %s", cfg.Offsets.Dir)
		}
		log.Warn("resuming from the previous checkpoint", zap.Uint64("seq", cp.Seq))
		st = &previousStore{DirStore: store, cp: cp}
	}

	deadLetters, err := openDLQ(ctx, cfg, reg)
	if err != nil {
		return &pipeline.OpenError{What: "dead-letter queue", Err: err}
	}
	defer deadLetters.Close()

	src, err := buildSource(cfg, flags, log, reg)
	if err != nil {
		return &pipeline.OpenError{What: "source", Err: err}
	}
	sinks, err := buildSinks(cfg, log)
	if err != nil {
		return err
	}
	closeRoutes, err := routeSinks(ctx, cfg, sinks)
	defer closeRoutes()
	if err != nil {
		return err
	}
	ops, closeOps, err := buildTransforms(cfg, src, flags.ResetOffsets, obs.NewWindowMetrics(reg, cfg.Pipeline), obs.NewOperatorMetrics(reg, cfg.Pipeline), log)
	defer closeOps()
	if err != nil {
		return err
	}
	if err := checkTransforms(ctx, cfg, ops); err != nil {
		return err
	}
	sampler, err := buildSampler(cfg, sinks, reg, log)
	if err != nil {
		return &pipeline.OpenError{What: "continuous verification", Err: err}
	}
	rt, err := pipeline.New(runtimeConfig(cfg), src, sinks, st, pipeline.Options{
		Operators: ops, DLQ: deadLetters, Observer: metricsObserver{metrics}, Log: log.Named("runtime"), Tap: tapOf(sampler),
	})
	if err != nil {
		return err
	}
	started := time.Now()
	status := func() any { return Report(cfg.Pipeline, started, rt, src, deadLetters) }
	metrics.SetCheckpointAgeFunc(func() time.Duration {
		s := rt.Stats()
		if s.LastCheckpoint.CommittedAt.IsZero() {
			return time.Since(started)
		}
		return time.Since(s.LastCheckpoint.CommittedAt)
	})
	listen := cfg.HTTP.Listen
	if flags.HTTPListen != "" {
		listen = flags.HTTPListen
	}
	if listen != "" {
		ready := func() error {
			if err := rt.Ready(); err != nil {
				return err
			}
			// Ready means connected: a streaming source that lost its
			// connection (and is reconnecting) is not ready.
			if sr, ok := src.(pipeline.StatusReporter); ok {
				if st := sr.Status(); st.Phase == "stream" && !st.Connected {
					return fmt.Errorf("pipeline %s: source is reconnecting", cfg.Pipeline)
				}
			}
			return nil
		}
		srv := obs.NewServer(listen, reg, status, ready, log.Named("http"))
		srv.Handle(SearchPath, searchHandler(sinks))
		if eng, ok := src.(*snapshot.Engine); ok {
			srv.Handle(SnapshotPath, snapshotHandler(eng))
		}
		if cfg.HTTP.Pprof {
			srv.HandleProfiles()
		}
		if err := srv.Start(); err != nil {
			return &pipeline.OpenError{What: "http server", Err: err}
		}
		defer func() {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			_ = srv.Shutdown(sctx)
		}()
		log.Info("serving /metrics /healthz /readyz /status", zap.String("addr", srv.Addr()))
		if flags.OnListen != nil {
			flags.OnListen(srv.Addr())
		}
	}
	log.Info("pipeline starting", zap.String("source", cfg.Source.Kind()), zap.Int("sinks", len(sinks)))
	stopSampler := startSampler(ctx, sampler)
	err = rt.Run(ctx)
	stopSampler()
	if err != nil {
		log.Error("pipeline stopped with an error", zap.Error(err))
		return err
	}
	log.Info("pipeline stopped")
	return nil
}

// Report builds the /status document.
func Report(name string, started time.Time, rt *pipeline.Runtime, src pipeline.Source, q pipeline.DLQ) obs.StatusReport {
	s := rt.Stats()
	r := obs.StatusReport{
		Pipeline:            name,
		State:               s.State,
		StartedAt:           started,
		InFlightRecords:     int64(s.InFlightRecords),
		InFlightBytes:       s.InFlightBytes,
		CheckpointSeq:       s.LastCheckpoint.Seq,
		DLQDepth:            q.Depth(),
		DLQOldestAgeSeconds: q.OldestAge().Seconds(),
	}
	for _, h := range s.Sinks {
		ss := obs.SinkStatus{Name: h.Name, RecordsWritten: s.Written[h.Name],
			FailingSince: h.FailingSince, LastError: h.LastError, BatchLimit: h.BatchLimit, Undrained: h.Undrained, Holding: h.Holding}
		for _, q := range h.Quarantined {
			ss.Quarantined = append(ss.Quarantined, obs.QuarantinedTable{Table: q.Table.String(), Since: q.Since, Reason: obs.Redact(q.Reason)})
		}
		r.Sinks = append(r.Sinks, ss)
	}
	if !s.LastCheckpoint.CommittedAt.IsZero() {
		r.LastCheckpoint = s.LastCheckpoint.CommittedAt
		r.CheckpointAgeSeconds = time.Since(s.LastCheckpoint.CommittedAt).Seconds()
	}
	if sr, ok := src.(pipeline.StatusReporter); ok {
		r.Source = sr.Status()
		if r.Source.Phase == "stream" && len(r.Source.Tables) > 0 && s.LastCheckpoint.CommittedAt.IsZero() {
			// The load's rows are read but no checkpoint covers them yet:
			// a kill now redoes the whole load, so it is not over.
			r.Source.Phase = "snapshot"
			r.LoadUncheckpointed = true
		}
		if r.State == "running" {
			r.State = obs.StateStreaming
			if r.Source.Phase == "snapshot" {
				r.State = obs.StateSnapshot
			}
		}
		if !r.Source.LastEventTime.IsZero() {
			r.LagSeconds = time.Since(r.Source.LastEventTime).Seconds()
		}
	} else if r.State == "running" {
		r.State = obs.StateStreaming
	}
	if s.Degraded && (r.State == obs.StateStreaming || r.State == obs.StateSnapshot) {
		r.State = obs.StateDegraded
	}
	if s.Err != nil {
		r.Error = obs.Redact(s.Err.Error())
	}
	return r
}

func sortedKeys(m map[string]int64) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// previousStore serves the previous checkpoint once, then commits normally.
type previousStore struct {
	*offsets.DirStore
	cp     pipeline.Checkpoint
	served bool
}

func (p *previousStore) Load(ctx context.Context, name string) (pipeline.Checkpoint, bool, error) {
	if !p.served {
		p.served = true
		return p.cp, true, nil
	}
	return p.DirStore.Load(ctx, name)
}

// setMemoryLimit sets the Go runtime's soft memory limit (Invariant 6:
// with the in-flight cap it keeps the heap near a known size instead of
// letting garbage double it) unless GOMEMLIMIT set one, and under that
// limit the collector's GCPercent unless GOGC set one.
func setMemoryLimit(limit int64, log *zap.Logger) {
	if os.Getenv("GOMEMLIMIT") != "" {
		log.Info("memory limit from GOMEMLIMIT", zap.String("GOMEMLIMIT", os.Getenv("GOMEMLIMIT")))
		return
	}
	debug.SetMemoryLimit(limit)
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(GCPercent)
	}
}

// GCPercent is the collector's GOGC while the daemon's own memory limit is
// in force. The limit bounds the heap (Invariant 6); GOGC only decides how
// far below it the collector already runs. At Go's default, 100, a
// collection started each time the heap doubled from the 60–90 MB a drain
// or a snapshot keeps live, well under the 192 MiB limit of the default
// caps. At 200 (three times live, still capped by the limit) sluice's CPU
// per million changes went from 3.43 to 2.95 s in a pg-stream run (263k
// → 293k rows/s) and from 2.04–2.09 to 1.89–1.96 s in the MariaDB
// incremental snapshot's (2,000,000 rows, 2 runs each), for 6–15 MiB more
// peak RSS (bench, 2026-12-07). Without the daemon's limit (GOMEMLIMIT set
// in the environment) Go's default stays: nothing else would bound the
// heap three times live lets grow.
const GCPercent = 200

// trimInterval is how often the daemon drops the pages of its own binary
// it holds no copy of (memtrim): what it faulted in once, DuckDB's static
// initializers above all, leaves the resident set (an idle pipeline: 69
// MiB RSS before the first trim, 21 after). Under load the code and the
// Go runtime's tables a drain runs are back within a second, so a
// drain's peak does not change; a longer interval keeps the cost of
// faulting them back small (Invariant 6).
const trimInterval = 5 * time.Second

// fixedHeap is what the Go heap holds beside records in flight and the
// batches being written: schemas, clients, metrics, decoders' buffers.
// 32MiB rather than 64 took the 2,002,000-change drains' peaks from 264
// to 230 MiB (Bleve, whose merges allocate 32 MB buffers) and 197 to 170
// (Kafka) at the same drain speed (bench pg-backlog-sinks).
const fixedHeap = 32 << 20

// MemoryLimit is runtime.memory_limit, or when it is 0 what the caps
// allow the Go heap to hold: the records in flight, two batches being
// encoded or written, fixedHeap, and the incremental snapshot's windows,
// each holding a chunk of up to max_chunk_bytes until its high watermark
// while the next one is decoded. Without a soft limit the heap grows to
// twice what is live before the GC runs (a Kafka drain peaked at 254 MiB
// RSS against 165 with a limit; bench pg-backlog-sinks); a limit below
// what is live makes the GC run without end (an incremental snapshot
// into Kafka took 10 CPU-seconds per million rows instead of 3.4 when
// the windows' chunks were left out; bench pg-incremental).
func MemoryLimit(cfg *config.Config) int64 {
	rt := cfg.Runtime
	if l := rt.MemoryLimit.Int64(); l > 0 {
		return l
	}
	limit := rt.MaxInFlightBytes.Int64() + 2*rt.BatchMaxBytes.Int64() + fixedHeap
	switch src := cfg.Source; {
	case src.Postgres != nil && src.Postgres.Snapshot.Mode != "never":
		limit += 2 * int64(src.Postgres.Snapshot.Parallel) * src.Postgres.Snapshot.MaxChunkBytes.Int64()
	case src.MySQL != nil && src.MySQL.Snapshot.Mode != "never":
		limit += 2 * int64(src.MySQL.Snapshot.Parallel) * src.MySQL.Snapshot.MaxChunkBytes.Int64()
	}
	return limit
}
