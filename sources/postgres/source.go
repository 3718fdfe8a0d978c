package postgres

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/snapshot"
	"github.com/sluice-cdc/sluice/sources/internal/handoff"
)

// Snapshot modes.
const (
	// SnapshotInitial loads every table from the slot's exported snapshot
	// before streaming, on the first run of a pipeline.
	SnapshotInitial = "initial"
	// SnapshotNever streams changes from the slot's consistent point only.
	SnapshotNever = "never"
)

// HeartbeatPrefix is the logical decoding message prefix of sluice
// heartbeats (Invariant 8).
const HeartbeatPrefix = "sluice.heartbeat"

// WatermarkPrefix is the logical decoding message prefix of incremental
// snapshot watermarks: transactional messages, so they are decoded in
// commit order with the changes around them (snapshot/).
const WatermarkPrefix = "sluice.watermark"

// Options configure a Postgres source. Zero values take the defaults noted
// on each field.
type Options struct {
	// Pipeline names the pipeline; it labels metrics and logs and derives the
	// default publication and slot names.
	Pipeline string
	// DSN is a libpq URL or key/value string for the captured database.
	DSN string
	// Password, when set, overrides the DSN's password (kept out of the DSN so
	// configs can take it from the environment).
	Password string
	// Tables are the captured tables as "schema.table"; at least one.
	Tables []string
	// Publication defaults to "sluice_<pipeline>". It is created FOR TABLE
	// Tables when absent and extended with missing tables when present.
	Publication string
	// Slot defaults to "sluice_<pipeline>" (lower-case letters, digits, _).
	Slot string
	// FullIdentityTables are tables (a subset of Tables) captured with
	// REPLICA IDENTITY FULL: tables without a primary key or replica identity
	// index, or whose large (TOAST-ed) values must travel with every update.
	FullIdentityTables []string
	// HeartbeatInterval between heartbeat messages; default 10s.
	HeartbeatInterval time.Duration
	// StatusInterval between standby status updates to the server (and slot
	// metric polls); default 10s. Acks are also reported as they come.
	StatusInterval time.Duration
	// Streaming asks the server to stream large in-progress transactions
	// (PostgreSQL 14+); they are buffered and handed over at their commit.
	Streaming bool
	// SpillThreshold is the bytes a transaction may buffer in memory before
	// it spills to SpillDir; 0 takes the decoder's default.
	SpillThreshold int64
	// SpillDir holds spilled transactions; "" takes the decoder's default.
	SpillDir string
	// Snapshot configures the initial load.
	Snapshot SnapshotOptions
	// ReconnectInitial and ReconnectMax bound the exponential backoff between
	// attempts to re-establish a dropped replication connection; defaults 1s
	// and 1m.
	ReconnectInitial, ReconnectMax time.Duration
	// DropSlotOnExit drops the replication slot in Close. Meant for
	// throwaway pipelines: the next run starts from scratch.
	DropSlotOnExit bool
	// FromPreviousCheckpoint says the checkpoint given to Open is older
	// than one this pipeline committed and may have acknowledged
	// (`sluice run --from-previous-checkpoint` after a corrupt newest
	// one): a slot confirmed beyond it is then expected rather than a sign
	// of another consumer, and streaming resumes at the slot's
	// confirmed_flush_lsn. That is safe because a position is acknowledged
	// only after every record at or before it is durable in every sink and
	// a checkpoint holding it is committed (Invariant 1).
	FromPreviousCheckpoint bool
	// SlotCreateTimeout bounds the wait of slot creation for transactions
	// that were running when it started; default 5m. On timeout the error
	// lists the blocking sessions and prepared transactions.
	SlotCreateTimeout time.Duration
}

// SnapshotOptions configure the initial load.
type SnapshotOptions struct {
	// Mode is SnapshotInitial (default) or SnapshotNever.
	Mode string
	// Parallel is the number of reader connections; default 4.
	Parallel int
	// ChunkRows is the number of rows per primary-key range; default 10000.
	ChunkRows int
	// ReadOnly makes incremental snapshots write nothing: watermarks are
	// WAL positions read from the server, which the stream meets
	// (marks.go), for a user who may not write. A server in recovery (a
	// hot standby, PostgreSQL 16+) is always read this way.
	ReadOnly bool
}

const (
	defaultInterval          = 10 * time.Second
	defaultReconnectInitial  = time.Second
	defaultReconnectMax      = time.Minute
	defaultParallel          = 4
	defaultChunkRows         = 10000
	defaultSlotCreateTimeout = 5 * time.Minute
	// streamBuffer is the number of decoded chunks between the replication
	// receiver and Read. A full buffer blocks the receiver, which stops
	// reading the socket: backpressure reaches the server (Invariant 6).
	// These records are outside the runtime's in-flight cap, so the buffer
	// stays small: 16 chunks held up to 80,000 decoded records (about 50
	// MiB) beyond it during a backlog drain.
	streamBuffer = 4
	// maxCoalesce caps the records Read merges from consecutive complete
	// transactions into one batch.
	maxCoalesce = 4096
)

var (
	slotPattern  = regexp.MustCompile(`^[a-z0-9_]{1,63}$`)
	identPattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_$]{0,62}$`)
)

// Source is the Postgres change source: logical replication through a
// pgoutput slot, with an optional initial load from the slot's exported
// snapshot. It implements pipeline.Source and pipeline.StatusReporter.
type Source struct {
	opts   Options
	log    *zap.Logger
	m      *metrics
	tables []TableRef
	full   map[TableRef]bool

	pool     *pgxpool.Pool  // preflight, catalog, heartbeats, slot polls
	readers  []*ChunkReader // closed with the source
	database string
	version  int  // server_version_num
	standby  bool // in recovery at Open: a hot standby
	systemID string
	start    pglogrepl.LSN // checkpoint LSN, or the consistent point
	// floor is the highest generation a sink recorded (floorHeld: any);
	// gen leads every version of this run (Invariant 10).
	floor     uint64
	floorHeld bool
	gen       uint64

	acked atomic.Uint64 // flush LSN: end of the last durable transaction

	stream   *streamer
	marks    lsnMarks // read-only watermarks (marks.go)
	load     *snapshotLoad
	redoLoad bool // the slot was left by an interrupted load
	loadDone bool
	queue    *handoff.Queue[streamItem]

	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu            sync.Mutex
	lastEventTime time.Time // commit time of the last transaction (or heartbeat) handed over
	shapesSeen    map[TableRef]bool
	// startShapes are the captured tables' shapes at Open (ddlevents.go).
	startShapes map[pipeline.TableID]*pipeline.Table
}

var (
	_ pipeline.Source         = (*Source)(nil)
	_ pipeline.StatusReporter = (*Source)(nil)
)

// New validates opts and returns an unopened source. Metrics are registered
// on reg when it is not nil.
func New(opts Options, log *zap.Logger, reg prometheus.Registerer) (*Source, error) {
	if log == nil {
		log = zap.NewNop()
	}
	if err := opts.withDefaults(); err != nil {
		return nil, fmt.Errorf("postgres source: %w", err)
	}
	s := &Source{opts: opts, log: log.With(zap.String("slot", opts.Slot)),
		full: map[TableRef]bool{}, shapesSeen: map[TableRef]bool{}}
	seen := map[TableRef]bool{}
	for _, t := range opts.Tables {
		ref, err := parseTableRef(t)
		if err != nil {
			return nil, fmt.Errorf("postgres source: tables: %w", err)
		}
		if seen[ref] {
			return nil, fmt.Errorf("postgres source: tables: %s listed twice", t)
		}
		seen[ref] = true
		s.tables = append(s.tables, ref)
	}
	for _, t := range opts.FullIdentityTables {
		ref, err := parseTableRef(t)
		if err != nil {
			return nil, fmt.Errorf("postgres source: full_identity_tables: %w", err)
		}
		if !seen[ref] {
			return nil, fmt.Errorf("postgres source: full_identity_tables: %s is not one of the captured tables", t)
		}
		s.full[ref] = true
	}
	m, err := newMetrics(reg, opts.Pipeline)
	if err != nil {
		return nil, fmt.Errorf("postgres source: metrics: %w", err)
	}
	s.m = m
	return s, nil
}

func (o *Options) withDefaults() error {
	if o.DSN == "" {
		return errors.New("dsn is required")
	}
	if len(o.Tables) == 0 {
		return errors.New("tables: at least one schema.table is required")
	}
	base := "sluice_" + sanitizeName(o.Pipeline)
	if o.Publication == "" {
		o.Publication = base
	}
	if o.Slot == "" {
		o.Slot = base
	}
	if !identPattern.MatchString(o.Publication) {
		return fmt.Errorf("publication %q: want letters, digits and underscores, starting with a letter or _ (at most 63)", o.Publication)
	}
	if !slotPattern.MatchString(o.Slot) {
		return fmt.Errorf("slot %q: want lower-case letters, digits and underscores (at most 63)", o.Slot)
	}
	if o.HeartbeatInterval <= 0 {
		o.HeartbeatInterval = defaultInterval
	}
	if o.StatusInterval <= 0 {
		o.StatusInterval = defaultInterval
	}
	if o.ReconnectInitial <= 0 {
		o.ReconnectInitial = defaultReconnectInitial
	}
	if o.ReconnectMax <= 0 {
		o.ReconnectMax = defaultReconnectMax
	}
	if o.ReconnectMax < o.ReconnectInitial {
		o.ReconnectMax = o.ReconnectInitial
	}
	if o.SlotCreateTimeout <= 0 {
		o.SlotCreateTimeout = defaultSlotCreateTimeout
	}
	switch o.Snapshot.Mode {
	case "":
		o.Snapshot.Mode = SnapshotInitial
	case SnapshotInitial, SnapshotNever:
	default:
		return fmt.Errorf("snapshot mode %q: want %q or %q", o.Snapshot.Mode, SnapshotInitial, SnapshotNever)
	}
	if o.Snapshot.Parallel <= 0 {
		o.Snapshot.Parallel = defaultParallel
	}
	if o.Snapshot.ChunkRows <= 0 {
		o.Snapshot.ChunkRows = defaultChunkRows
	}
	return nil
}

// sanitizeName maps a pipeline name onto slot-name characters.
func sanitizeName(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	out := b.String()
	if out == "" {
		out = "default"
	}
	if len(out) > 56 {
		out = out[:56]
	}
	return out
}

// parseTableRef reads "schema.table"; both parts must be plain identifiers.
func parseTableRef(s string) (TableRef, error) {
	schema, name, ok := strings.Cut(s, ".")
	if !ok || !identPattern.MatchString(schema) || !identPattern.MatchString(name) {
		return TableRef{}, fmt.Errorf("%q: want schema.table with plain identifiers (letters, digits, _, $)", s)
	}
	return TableRef{Schema: schema, Name: name}, nil
}

// quoted is the table's name quoted for SQL.
func (t TableRef) quoted() string { return quoteIdent(t.Schema) + "." + quoteIdent(t.Name) }

func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// Open connects, runs the preflight checks, prepares the publication and the
// slot, starts the initial load when this is a fresh pipeline and starts
// streaming. from is nil on a fresh pipeline, else a Position made by this
// FloorGeneration implements pipeline.Generational.
func (s *Source) FloorGeneration(floor uint64, held bool) { s.floor, s.floorHeld = floor, held }

// source.
func (s *Source) Open(ctx context.Context, from pipeline.Position) (err error) {
	var resume *Position
	if from != nil {
		p, err := ParsePosition(from)
		if err != nil {
			return pipeline.Fatal(fmt.Errorf("postgres source: %w", err))
		}
		if p.Slot != s.opts.Slot {
			return pipeline.Fatal(fmt.Errorf("postgres source: the checkpoint is for slot %q but the pipeline is configured with slot %q; "+
				"restore the slot name, or re-snapshot with `sluice run --reset-offsets`", p.Slot, s.opts.Slot))
		}
		resume = &p
	}
	// A restore into another cluster is refused below with a checkpoint
	// and re-snapshotted without one: the server never moves under a
	// resumed generation.
	if resume != nil {
		s.gen = pipeline.NextGeneration(s.floor, s.floorHeld, true, resume.Generation, false)
	} else {
		s.gen = pipeline.NextGeneration(s.floor, s.floorHeld, false, 0, false)
	}
	if s.floorHeld || s.gen > 0 {
		s.log.Info("versions generation", zap.Uint64("generation", s.gen), zap.Uint64("sinks_hold", s.floor), zap.Bool("resumed", resume != nil))
	}
	runCtx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	var repl *pgconn.PgConn
	defer func() {
		if err != nil {
			if repl != nil {
				_ = repl.Close(context.Background())
			}
			if s.load != nil {
				s.load.closeConns()
				s.load = nil
			}
			cancel()
			s.cancel = nil
			if s.pool != nil {
				s.pool.Close()
				s.pool = nil
			}
		}
	}()

	if err := s.connectPool(ctx); err != nil {
		return err
	}
	if err := s.preflight(ctx); err != nil {
		return err
	}
	// Left out of the publication (or some operations) while a resumed
	// pipeline was stopped: their changes until now were not published,
	// and the tables are read again from the rewrite messages put back
	// with them.
	if _, err := s.ensurePublication(ctx, resume != nil, nil); err != nil {
		return err
	}
	if err := s.ensureEventTriggers(ctx); err != nil {
		return err
	}
	if err := s.loadStartShapes(ctx); err != nil {
		return err
	}
	repl, err = s.connectReplication(ctx)
	if err != nil {
		return fmt.Errorf("postgres source: replication connection: %w", err)
	}
	sys, err := pglogrepl.IdentifySystem(ctx, repl)
	if err != nil {
		return fmt.Errorf("postgres source: identify system: %w", err)
	}
	s.systemID = sys.SystemID
	if resume != nil && resume.SystemID != "" && resume.SystemID != s.systemID {
		return pipeline.Fatal(fmt.Errorf("postgres source: the checkpoint was taken on database system %s but the server is system %s "+
			"(a different cluster, or one restored from a backup); its slot positions do not apply: re-snapshot with `sluice run --reset-offsets`",
			resume.SystemID, s.systemID))
	}

	var created *pglogrepl.CreateReplicationSlotResult
	if resume == nil {
		res, err := s.createFreshSlot(ctx, repl)
		if err != nil {
			return err
		}
		created = &res
		if s.start, err = parseLSN(res.ConsistentPoint); err != nil {
			return fmt.Errorf("postgres source: slot %s consistent point: %w", s.opts.Slot, err)
		}
	} else {
		if s.start, err = s.checkResumeSlot(ctx, resume.LSN); err != nil {
			return err
		}
	}
	s.acked.Store(uint64(s.start))

	var load *snapshotLoad
	if created != nil && s.opts.Snapshot.Mode == SnapshotInitial {
		load = newSnapshotLoad(s, s.start, created.SnapshotName)
		s.load = load // closed by the deferred cleanup on failure
		// The exported snapshot lives until the next command on repl, so
		// every reader imports it before START_REPLICATION below.
		if err := load.importSnapshot(ctx); err != nil {
			return err
		}
	}

	stream, err := newStreamer(s)
	if err != nil {
		return fmt.Errorf("postgres source: %w", err)
	}
	s.mu.Lock()
	s.stream, s.load = stream, load
	s.queue = handoff.New("postgres source", stream.out, stream.done, stream.failure,
		func(it *streamItem) handoff.Part {
			return handoff.Part{Records: it.records, Dead: it.dead, Pos: it.pos}
		})
	s.mu.Unlock()
	if err := s.stream.startReplication(ctx, repl, s.start); err != nil {
		return err
	}

	first := repl
	repl = nil // owned by the streamer now
	s.wg.Add(1)
	go func() { defer s.wg.Done(); s.stream.run(runCtx, first) }()
	if s.load != nil {
		s.wg.Add(1)
		go func() { defer s.wg.Done(); s.load.run(runCtx) }()
	}
	s.wg.Add(2)
	go func() { defer s.wg.Done(); s.heartbeats(runCtx) }()
	go func() { defer s.wg.Done(); s.pollSlot(runCtx) }()
	s.log.Info("postgres source open", zap.String("database", s.database), zap.Stringer("start_lsn", s.start),
		zap.Bool("initial_load", s.load != nil), zap.Int("server_version", s.version))
	return nil
}

func (s *Source) connectPool(ctx context.Context) error {
	cfg, err := pgxpool.ParseConfig(s.opts.DSN)
	if err != nil {
		return pipeline.Fatal(fmt.Errorf("postgres source: dsn: %w", redactDSNError(err)))
	}
	if s.opts.Password != "" {
		cfg.ConnConfig.Password = s.opts.Password
	}
	applySessionSettings(cfg.ConnConfig.RuntimeParams, s.opts.Pipeline)
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("postgres source: connect: %w", err)
	}
	s.pool = pool
	row := pool.QueryRow(ctx, "SELECT current_database(), current_setting('server_version_num')::int, pg_is_in_recovery()")
	if err := row.Scan(&s.database, &s.version, &s.standby); err != nil {
		return fmt.Errorf("postgres source: connect: %w", err)
	}
	return nil
}

// readOnly reports whether incremental snapshots write nothing
// (lsnMarks): when configured, or on a hot standby.
func (s *Source) readOnly() bool { return s.opts.Snapshot.ReadOnly || s.standby }

// wakeStream makes the streamer look at the registered marks now.
func (s *Source) wakeStream() {
	s.mu.Lock()
	st := s.stream
	s.mu.Unlock()
	if st != nil {
		st.wake()
	}
}

func (s *Source) connectReplication(ctx context.Context) (*pgconn.PgConn, error) {
	cfg, err := pgconn.ParseConfig(s.opts.DSN)
	if err != nil {
		return nil, pipeline.Fatal(redactDSNError(err))
	}
	if s.opts.Password != "" {
		cfg.Password = s.opts.Password
	}
	applySessionSettings(cfg.RuntimeParams, s.opts.Pipeline)
	cfg.RuntimeParams["replication"] = "database"
	return pgconn.ConnectConfig(ctx, cfg)
}

// applySessionSettings puts SessionSettings on a connection's startup
// parameters: pgoutput renders values with the walsender's settings, so the
// replication and the snapshot connections must agree for snapshot and stream
// values to be equal.
func applySessionSettings(params map[string]string, pipelineName string) {
	for k, v := range SessionSettings {
		params[k] = v
	}
	params["application_name"] = "sluice:" + pipelineName
}

// redactDSNError keeps parse errors of a DSN from echoing its password.
func redactDSNError(err error) error {
	var pe *pgconn.ParseConfigError
	if errors.As(err, &pe) {
		return fmt.Errorf("cannot parse the connection string: %v", pe.Unwrap())
	}
	return err
}

// Read returns the next batch: snapshot rows while the initial load runs
// (Pos nil), then an empty batch positioned at the consistent point, then
// streamed transactions. A batch holding complete transactions (or a
// heartbeat) carries the position of its last one; the chunks of a large
// transaction before its last carry a nil Pos (Invariant 2).
func (s *Source) Read(ctx context.Context) (pipeline.Batch, error) {
	if s.load != nil && !s.loadDone {
		b, ok, err := s.load.next(ctx)
		if err != nil {
			return pipeline.Batch{}, err
		}
		if ok {
			s.m.rows.Add(float64(len(b.Records)))
			return b, nil
		}
		s.loadDone = true
	}
	it, err := s.queue.Next(ctx)
	if err != nil {
		return pipeline.Batch{}, err
	}
	return s.queue.Batch(it, maxCoalesce, s.handOver), nil
}

// LoadState implements snapshot.Loader: the initial load's progress as of
// the batches Read returned.
func (s *Source) LoadState() (snapshot.LoadState, bool) {
	if s.load == nil || s.loadDone {
		return snapshot.LoadState{}, false
	}
	return s.load.state()
}

// handOver records what leaves the source, for status and metrics.
func (s *Source) handOver(it *streamItem) {
	n := 0
	for i := range it.records {
		if it.records[i].Op.IsData() {
			n++
		}
	}
	s.m.rows.Add(float64(n))
	if !it.final {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch it.kind {
	case itemTxn:
		s.m.transactions.Inc()
		if !it.commitTime.IsZero() {
			s.lastEventTime = it.commitTime
		}
	case itemHeartbeat:
		if len(it.records) > 0 && !it.records[0].EventTime.IsZero() {
			s.lastEventTime = it.records[0].EventTime
		}
	}
}

// Ack records that everything up to upTo is durable and checkpointed
// (Invariant 1): the slot's flush position becomes upTo's LSN, reported to
// the server right away when the replication connection is up, else on the
// next connection. It never blocks on the network.
func (s *Source) Ack(_ context.Context, upTo pipeline.Position) error {
	p, err := ParsePosition(upTo)
	if err != nil {
		return fmt.Errorf("postgres source: ack: %w", err)
	}
	if p.Slot != s.opts.Slot {
		return fmt.Errorf("postgres source: ack: position of slot %q, this source reads slot %q", p.Slot, s.opts.Slot)
	}
	// Invariant 1: only a position the runtime reports durable and
	// checkpointed becomes the flush LSN; it never moves backwards.
	for {
		cur := s.acked.Load()
		if uint64(p.LSN) <= cur {
			return nil
		}
		if s.acked.CompareAndSwap(cur, uint64(p.LSN)) {
			break
		}
	}
	if s.stream != nil {
		s.stream.wake()
	}
	return nil
}

// Close stops the receiver, the load and the background tasks and closes
// every connection. It acknowledges nothing: the last status sent carries
// the last Ack. With DropSlotOnExit the slot is dropped afterwards.
func (s *Source) Close(ctx context.Context) error {
	if s.cancel == nil {
		return nil
	}
	s.cancel()
	if s.stream != nil {
		s.stream.wake()
	}
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return fmt.Errorf("postgres source: close: %w", ctx.Err())
	}
	var err error
	if s.load != nil {
		s.load.closeConns()
	}
	if s.opts.DropSlotOnExit && s.pool != nil {
		err = s.dropSlot(ctx)
	}
	if s.pool != nil {
		s.pool.Close()
	}
	s.mu.Lock()
	for _, r := range s.readers {
		r.Close()
	}
	s.mu.Unlock()
	s.cancel = nil
	return err
}

// Status reports the phase, the snapshot progress per table, the lag and
// whether the replication connection is up.
func (s *Source) Status() pipeline.SourceStatus {
	s.mu.Lock()
	load, stream := s.load, s.stream
	st := pipeline.SourceStatus{Phase: PhaseStream, LastEventTime: s.lastEventTime}
	s.mu.Unlock()
	if load != nil {
		st.Tables = load.progress()
		if !load.finished() {
			st.Phase = "snapshot"
		}
	}
	if stream != nil {
		st.Connected = stream.connected.Load()
		st.LagBytes = stream.lagBytes()
	}
	return st
}

// lagSeconds is now minus the commit time of the last transaction handed
// over, or 0 before the first.
func (s *Source) lagSeconds() float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lastEventTime.IsZero() {
		return 0
	}
	return time.Since(s.lastEventTime).Seconds()
}

// position is the encoded stream position at lsn.
func (s *Source) position(lsn pglogrepl.LSN) pipeline.Position {
	return Position{Phase: PhaseStream, Slot: s.opts.Slot, LSN: lsn, SystemID: s.systemID, Generation: s.gen}.Encode()
}

// catalog is the decoder's catalog lookup; each call after the first for a
// table means the stream saw a new shape of it.
func (s *Source) catalog(ctx context.Context, _ uint32, schema, name string) (*TableShape, error) {
	ref := TableRef{Schema: schema, Name: name}
	s.mu.Lock()
	seen := s.shapesSeen[ref]
	s.shapesSeen[ref] = true
	s.mu.Unlock()
	if seen {
		s.m.relationChanges.Inc()
	}
	return LoadTableShape(ctx, s.pool, s.database, ref)
}

// tableName is "schema.table".
func tableName(r TableRef) string { return r.Schema + "." + r.Name }
