package mysql

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/snapshot"
	"github.com/sluice-cdc/sluice/sources/internal/handoff"
)

// Snapshot modes.
const (
	SnapshotInitial = "initial" // load every table, then stream from the load's position
	SnapshotNever   = "never"   // stream from the server's current position
)

// Snapshot locks (MySQL only; MariaDB never locks).
const (
	LockFlushTables = "flush_tables" // FLUSH TABLES WITH READ LOCK while the readers start
	LockNone        = "none"         // takes no lock: only with the incremental snapshot engine (snapshot/)
)

// Options configure a MySQL/MariaDB source.
type Options struct {
	// Pipeline names the pipeline; it labels metrics and derives the
	// default server id.
	Pipeline string
	// DSN is mysql://user[:password]@host:port.
	DSN string
	// Password, when set, overrides the DSN's.
	Password string
	// TLS, when set, encrypts every connection.
	TLS *tls.Config
	// Tables are the captured tables as "database.table"; at least one.
	Tables []string
	// ServerID is the replica id the binlog connection registers with; it
	// must be unique among the server's replicas. 0 derives one from the
	// pipeline name.
	ServerID uint32
	// HeartbeatInterval is how often an idle server sends a heartbeat;
	// default 10s. ReadTimeout (default 3× the heartbeat) ends a
	// connection that stays silent longer.
	HeartbeatInterval, ReadTimeout time.Duration
	// StatusInterval between polls of the server's binlog position for the
	// lag metrics; default 10s.
	StatusInterval time.Duration
	// ZeroDates is ZeroDatesNull (default) or ZeroDatesDeadLetter.
	ZeroDates string
	// IgnoreDDLTables are captured tables for which a statement the source
	// cannot read is skipped with a warning instead of stopping.
	IgnoreDDLTables []string
	// CascadeTables are captured tables accepted as the children of
	// cascading foreign keys, whose cascaded changes the binlog does not
	// carry (preflight refuses the others).
	CascadeTables []string
	// ReconnectInitial and ReconnectMax bound the backoff between binlog
	// connection attempts; defaults 1s and 1m.
	ReconnectInitial, ReconnectMax time.Duration
	Snapshot                       SnapshotOptions
	// StartGTID, with Snapshot.Mode SnapshotNever and no checkpoint,
	// streams from this GTID set (MySQL) or position (MariaDB) instead of
	// the server's current one: every transaction after it is read.
	StartGTID string
	// WatermarkTable, "database.table", turns on the incremental
	// snapshot's watermarks (ChunkReader): the stream decodes this
	// pipeline's rows of it as OpWatermark records.
	WatermarkTable string
	// ReadOnlySnapshot makes the incremental snapshot write nothing: its
	// watermarks are GTID positions read from the server, which the
	// stream meets (readonly.go), for a replica or a user without write
	// privileges. WatermarkTable is then unused.
	ReadOnlySnapshot bool
}

// SnapshotOptions configure the initial load.
type SnapshotOptions struct {
	Mode      string // SnapshotInitial (default) or SnapshotNever
	Parallel  int    // reader connections; default 2
	ChunkRows int    // rows per primary-key range; default 100000
	Lock      string // LockFlushTables (default) or LockNone; MySQL only
}

// readerStopWait bounds how long Close waits for a load reader to notice
// the cancellation before it closes the reader's connection.
const readerStopWait = 5 * time.Second

const (
	// streamBuffer is the decoded items between the binlog reader and
	// Read; a full buffer stops the reader, so backpressure reaches the
	// server's socket (Invariant 6). Their records are outside the
	// runtime's in-flight cap, so it stays small (16 items held up to
	// 65,536 records beyond it).
	streamBuffer = 4
	// maxCoalesce caps the records Read merges from whole transactions.
	maxCoalesce = 4096
	// txChunk is the rows of an open transaction handed over at a time.
	txChunk = 4096
)

// Source is the MySQL / MariaDB binlog source. It implements
// pipeline.Source and pipeline.StatusReporter.
type Source struct {
	opts    Options
	log     *zap.Logger
	m       *metrics
	tables  []tableName
	host    string
	port    uint16
	user    string
	pass    string
	srv     *Server
	flavor  string
	cs      *charsets
	shapes  *shapes
	start   Position
	load    *snapshotLoad
	stream  *streamer
	queue   *handoff.Queue[txItem]
	started bool
	// floor is the highest epoch a sink recorded (floorHeld: any).
	floor     uint64
	floorHeld bool

	readers []*ChunkReader // closed with the source
	// posMarks are the read-only snapshot's watermarks (nil otherwise).
	posMarks *positionMarks

	cancel    context.CancelFunc
	streamCtx context.Context // the stream's context, kept while the load runs
	wg        sync.WaitGroup

	mu            sync.Mutex
	phase         string
	lastEventTime time.Time
	received      Position
	lagBytes      int64
	connected     bool
}

// New validates opts and returns an unopened source.
func New(opts Options, log *zap.Logger, reg prometheus.Registerer) (*Source, error) {
	if log == nil {
		log = zap.NewNop()
	}
	if err := opts.withDefaults(); err != nil {
		return nil, err
	}
	s := &Source{opts: opts, log: log}
	if opts.ReadOnlySnapshot {
		s.posMarks = &positionMarks{}
	}
	u, err := url.Parse(opts.DSN)
	if err != nil || u.Scheme != "mysql" && u.Scheme != "mariadb" || u.Host == "" {
		return nil, fmt.Errorf("mysql source: dsn: want mysql://user@host:port")
	}
	host, portStr, err := net.SplitHostPort(u.Host)
	if err != nil {
		host, portStr = u.Host, "3306"
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("mysql source: dsn: port %q is not a number", portStr)
	}
	s.host, s.port = host, uint16(port)
	if u.User != nil {
		s.user = u.User.Username()
		s.pass, _ = u.User.Password()
	}
	if opts.Password != "" {
		s.pass = opts.Password
	}
	for _, t := range opts.Tables {
		db, name, ok := strings.Cut(t, ".")
		if !ok || db == "" || name == "" {
			return nil, fmt.Errorf("mysql source: table %q: want database.table", t)
		}
		s.tables = append(s.tables, tableName{db: db, table: name})
	}
	if s.m, err = newMetrics(reg, opts.Pipeline); err != nil {
		return nil, err
	}
	return s, nil
}

func (o *Options) withDefaults() error {
	if len(o.Tables) == 0 {
		return errors.New("mysql source: no tables to capture")
	}
	if o.WatermarkTable != "" {
		if db, t, ok := strings.Cut(o.WatermarkTable, "."); !ok || db == "" || t == "" || strings.Contains(t, ".") {
			return fmt.Errorf("mysql source: watermark table %q: want database.table", o.WatermarkTable)
		}
	}
	if o.ServerID == 0 {
		h := fnv.New32a()
		h.Write([]byte("sluice/" + o.Pipeline))
		o.ServerID = 1_000_000 + h.Sum32()%1_000_000_000
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&o.HeartbeatInterval, 10*time.Second)
	def(&o.ReadTimeout, 3*o.HeartbeatInterval)
	def(&o.StatusInterval, 10*time.Second)
	def(&o.ReconnectInitial, time.Second)
	def(&o.ReconnectMax, time.Minute)
	if o.ZeroDates == "" {
		o.ZeroDates = ZeroDatesNull
	}
	if o.ZeroDates != ZeroDatesNull && o.ZeroDates != ZeroDatesDeadLetter {
		return fmt.Errorf("mysql source: zero_dates %q: want %q or %q", o.ZeroDates, ZeroDatesNull, ZeroDatesDeadLetter)
	}
	if o.Snapshot.Mode == "" {
		o.Snapshot.Mode = SnapshotInitial
	}
	if o.Snapshot.Parallel <= 0 {
		o.Snapshot.Parallel = 2
	}
	if o.Snapshot.ChunkRows <= 0 {
		o.Snapshot.ChunkRows = 100000
	}
	if o.Snapshot.Lock == "" {
		o.Snapshot.Lock = LockFlushTables
	}
	return nil
}

// connect opens a client connection with the session settings every
// sluice connection uses (UTC, so TIMESTAMP values read as UTC).
func (s *Source) connect(ctx context.Context) (*client.Conn, error) {
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	opts := []client.Option{func(c *client.Conn) error {
		if s.opts.TLS != nil {
			c.SetTLSConfig(s.opts.TLS)
		}
		return nil
	}}
	c, err := client.ConnectWithContext(dctx, net.JoinHostPort(s.host, strconv.Itoa(int(s.port))), s.user, s.pass, "", 30*time.Second, opts...)
	if err != nil {
		return nil, fmt.Errorf("mysql source: connect to %s:%d as %s: %w", s.host, s.port, s.user, err)
	}
	if _, err := c.Execute("SET time_zone = '+00:00', NAMES utf8mb4"); err != nil {
		c.Close()
		return nil, fmt.Errorf("mysql source: session settings: %w", err)
	}
	return c, nil
}

// Open connects, runs the preflight checks and starts the initial load or
// the stream (Invariant 3: the stream starts at or before the load's
// position).
func (s *Source) Open(ctx context.Context, from pipeline.Position) (err error) {
	c, err := s.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	srv, err := Preflight(ctx, c, PreflightOptions{Tables: s.opts.Tables, ServerID: s.opts.ServerID, ReportHost: s.reportHost(),
		CascadeTables: s.opts.CascadeTables})
	if err != nil {
		return err
	}
	for _, w := range srv.Warnings {
		s.log.Warn(w)
	}
	s.srv = srv
	s.flavor = FlavorMySQL
	server := srv.UUID
	if srv.MariaDB {
		s.flavor, server = FlavorMariaDB, fmt.Sprintf("server_id=%d", srv.ServerID)
	}
	if s.cs, err = loadCharsets(c); err != nil {
		return err
	}
	s.shapes = newShapes(s.cs, s.isCaptured, s.opts.ZeroDates == ZeroDatesNull)
	s.shapes.onChange = func(pipeline.TableID, int) { s.m.schemaChanges.Inc() }
	s.shapes.log = s.log
	for _, t := range s.tables {
		descs, err := catalogDescs(c, t.db, t.table)
		if err != nil {
			return err
		}
		s.shapes.seed(tableID(t), descs)
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.cancel = cancel
	defer func() {
		if err != nil {
			cancel()
		}
	}()
	switch {
	case from != nil:
		p, err := ParsePosition(from)
		if err != nil {
			return err
		}
		if p.Flavor != s.flavor {
			return fmt.Errorf("mysql source: the checkpoint is from a %s server, this is %s %s", p.Flavor, s.flavor, srv.Version)
		}
		moved := p.Server != server
		epoch := pipeline.NextGeneration(s.floor, s.floorHeld, true, p.Epoch, moved)
		switch {
		case moved:
			s.log.Warn("the server changed since the checkpoint (failover or a new server); versions move to a new epoch",
				zap.String("was", p.Server), zap.String("now", server), zap.Uint64("epoch", epoch))
		case epoch != p.Epoch:
			s.log.Warn("a sink holds versions of a later epoch than the checkpoint (a run stopped before its first checkpoint after a failover); versions move above it",
				zap.Uint64("checkpoint_epoch", p.Epoch), zap.Uint64("sinks_hold", s.floor), zap.Uint64("epoch", epoch))
		}
		if !moved {
			if err := checkSameHistory(c, srv, p); err != nil {
				return err
			}
		}
		p.Server, p.Epoch = server, epoch
		if err := checkNotPurged(c, srv, p); err != nil {
			return err
		}
		s.start, s.phase = p, "stream"
	case s.opts.Snapshot.Mode == SnapshotNever:
		p, err := currentPosition(c, srv)
		if err != nil {
			return err
		}
		if s.opts.StartGTID != "" {
			p = Position{Flavor: s.flavor, GTID: s.opts.StartGTID}
			if err := p.Validate(); err != nil {
				return fmt.Errorf("mysql source: start gtid: %w", err)
			}
			if err := checkNotPurged(c, srv, p); err != nil {
				return err
			}
		}
		p.Server, p.Epoch = server, s.epochFresh()
		s.start, s.phase = p, "stream"
	default:
		if !srv.MariaDB && s.opts.Snapshot.Lock == LockNone {
			return errors.New("mysql source: the initial load of a MySQL server takes a brief FLUSH TABLES WITH READ LOCK, and " +
				"snapshot.lock is none: use snapshot.mode: incremental, which takes no lock, or lock: flush_tables")
		}
		s.load = newSnapshotLoad(s, server)
		if err := s.load.begin(ctx); err != nil {
			return err
		}
		s.start, s.phase = s.load.start, "snapshot"
		s.wg.Add(1)
		go func() { defer s.wg.Done(); s.load.run(runCtx) }()
	}
	s.stream = newStreamer(s, server)
	s.queue = handoff.New("mysql source", s.stream.out, s.stream.done, s.stream.failure,
		func(it *txItem) handoff.Part { return handoff.Part{Records: it.records, Dead: it.dead, Pos: it.pos} })
	s.wg.Add(1)
	go func() { defer s.wg.Done(); s.poll(runCtx) }()
	if s.load == nil {
		s.startStream(runCtx)
	} else {
		s.streamCtx = runCtx
	}
	return nil
}

// FloorGeneration implements pipeline.Generational: the epoch is the
// MySQL source's generation (Invariant 10).
func (s *Source) FloorGeneration(floor uint64, held bool) { s.floor, s.floorHeld = floor, held }

// epochFresh is the epoch of a run without a checkpoint: above every epoch
// a sink recorded.
func (s *Source) epochFresh() uint64 {
	e := pipeline.NextGeneration(s.floor, s.floorHeld, false, 0, false)
	if s.floorHeld {
		s.log.Info("starting without a checkpoint above the versions sinks hold", zap.Uint64("sinks_hold", s.floor), zap.Uint64("epoch", e))
	}
	return e
}

func (s *Source) startStream(ctx context.Context) {
	s.started = true
	s.wg.Add(1)
	go func() { defer s.wg.Done(); s.stream.run(ctx, s.start) }()
}

// reportHost is the host name the binlog connection registers with, which
// names the pipeline in SHOW SLAVE HOSTS.
func (s *Source) reportHost() string {
	h := "sluice-" + s.opts.Pipeline
	if len(h) > 60 {
		h = h[:60]
	}
	return h
}

func tableID(t tableName) pipeline.TableID {
	return pipeline.TableID{Database: t.db, Schema: t.db, Table: t.table}
}

func (s *Source) isCaptured(db, table string) bool {
	for _, t := range s.tables {
		if t.db == db && t.table == table {
			return true
		}
	}
	return false
}

func (s *Source) isAcceptedCascade(db, table string) bool {
	return slices.Contains(s.opts.CascadeTables, db+"."+table)
}

func (s *Source) isIgnoredDDL(db, table string) bool {
	for _, t := range s.opts.IgnoreDDLTables {
		if t == db+"."+table {
			return true
		}
	}
	return false
}

// Read returns snapshot rows while the initial load runs (Pos nil), then an
// empty batch at the load's position, then streamed transactions: a batch
// of whole transactions carries the position of its last one; chunks of a
// large open transaction carry a nil Pos (Invariant 2).
func (s *Source) Read(ctx context.Context) (pipeline.Batch, error) {
	if s.load != nil && !s.started {
		b, ok, err := s.load.next(ctx)
		if err != nil {
			return pipeline.Batch{}, err
		}
		if ok {
			s.m.rows.Add(float64(len(b.Records)))
			return b, nil
		}
		// The load is complete: stream from its position, which the
		// empty batch makes the first checkpoint.
		s.load.close()
		s.setPhase("stream")
		s.startStream(s.streamCtx)
		return pipeline.Batch{Pos: s.start.Encode()}, nil
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
	if s.load == nil || s.started {
		return snapshot.LoadState{}, false
	}
	return s.load.state(), true
}

// handOver records what leaves the source, for status and metrics.
func (s *Source) handOver(it *txItem) {
	n := 0
	for i := range it.records {
		if it.records[i].Op.IsData() {
			n++
		}
	}
	s.m.rows.Add(float64(n))
	if it.pos == nil {
		return
	}
	s.m.transactions.Inc()
	s.mu.Lock()
	s.lastEventTime = it.commitTime
	s.received = it.at
	s.mu.Unlock()
}

// Ack has nothing to release upstream: the server keeps its binlog by its
// own retention, not by replica acknowledgements. The checkpoint, committed
// before Ack (Invariant 1), is what a restart resumes from.
func (s *Source) Ack(_ context.Context, upTo pipeline.Position) error {
	if _, err := ParsePosition(upTo); err != nil {
		return err
	}
	return nil
}

// Close stops the stream, the load and the poller. The load's readers
// stop at their next row; their connections are closed once they have (a
// connection closed under a reader would race with it), or after
// readerStopWait when one is stuck in a statement.
func (s *Source) Close(context.Context) error {
	if s.cancel != nil {
		s.cancel()
	}
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(readerStopWait):
		if s.load != nil {
			s.load.close()
		}
		<-done
	}
	if s.load != nil {
		s.load.close()
	}
	s.mu.Lock()
	readers := s.readers
	s.mu.Unlock()
	for _, r := range readers {
		r.Close()
	}
	return nil
}

func (s *Source) setPhase(p string) {
	s.mu.Lock()
	s.phase = p
	s.mu.Unlock()
}

// Status reports the phase, the snapshot progress, the lag and the
// connection state.
func (s *Source) Status() pipeline.SourceStatus {
	s.mu.Lock()
	st := pipeline.SourceStatus{Phase: s.phase, LagBytes: s.lagBytes, LastEventTime: s.lastEventTime, Connected: s.connected}
	s.mu.Unlock()
	if s.load != nil {
		st.Tables = s.load.progress()
	}
	return st
}
