package mysql

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
	"go.uber.org/zap"

	"github.com/sluice-cdc/sluice/pipeline"
)

// streamer owns the binlog connection: one goroutine reads events, decodes
// them and queues transactions for Read. go-mysql's own retry is off
// (DisableRetrySync): it would resume in the middle of a transaction from
// the set it last saw. The streamer reconnects itself from the GTID set of
// the last whole transaction it decoded.
type streamer struct {
	s   *Source
	log *zap.Logger
	dec *decoder

	out  chan txItem
	done chan struct{}

	errMu sync.Mutex
	err   error

	checks shapeChecks // shapes changed with no row change (shapecheck.go)
}

func newStreamer(s *Source, server string) *streamer {
	dec := &decoder{flavor: s.flavor, server: server, shapes: s.shapes, chunk: txChunk, log: s.log,
		conv: converter{zeroNull: s.opts.ZeroDates == ZeroDatesNull, charsets: s.cs}, captured: s.tables,
		ignoreDDL: s.isIgnoredDDL, cascadeOK: s.isAcceptedCascade, onDDL: s.m.ddl.Inc, marks: s.watermarks(), pend: s.posMarks}
	return &streamer{s: s, log: s.log, dec: dec, out: make(chan txItem, streamBuffer), done: make(chan struct{})}
}

func (st *streamer) failure() error {
	st.errMu.Lock()
	defer st.errMu.Unlock()
	return st.err
}

func (st *streamer) fail(err error) {
	st.errMu.Lock()
	st.err = err
	st.errMu.Unlock()
}

// run streams from `from` until ctx ends or a fatal error.
func (st *streamer) run(ctx context.Context, from Position) {
	defer close(st.done)
	st.dec.epoch = from.Epoch
	last := from
	if last.Server == "" {
		last.Server = st.dec.server // the server Open connected to
	}
	wait := st.s.opts.ReconnectInitial
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			st.s.m.reconnects.Inc()
		}
		progressed, err := st.session(ctx, &last)
		st.setConnected(false)
		if ctx.Err() != nil {
			return
		}
		if pipeline.IsFatal(err) {
			st.fail(err)
			return
		}
		if progressed {
			wait = st.s.opts.ReconnectInitial
		}
		st.log.Warn("binlog connection lost; reconnecting from the last whole transaction",
			zap.Error(err), zap.String("gtid", last.GTID), zap.Duration("in", wait))
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = min(wait*2, st.s.opts.ReconnectMax)
	}
}

// session runs one binlog connection. It returns whether any transaction
// arrived, and why it ended.
func (st *streamer) session(ctx context.Context, last *Position) (progressed bool, err error) {
	s := st.s
	gset, err := last.gtidSet()
	if err != nil {
		return false, pipeline.Fatal(err)
	}
	cfg := replication.BinlogSyncerConfig{
		ServerID: s.opts.ServerID, Flavor: s.flavor, Host: s.host, Port: s.port, User: s.user, Password: s.pass,
		TLSConfig: s.opts.TLS, HeartbeatPeriod: s.opts.HeartbeatInterval, ReadTimeout: s.opts.ReadTimeout,
		DisableRetrySync: true, ParseTime: true, TimestampStringLocation: time.UTC, FillZeroLogPos: s.flavor == FlavorMariaDB,
		Logger: slogTo(st.log), Localhost: s.reportHost(),
		// go-mysql queues 10240 events by default (tens of MB of rows):
		// a short queue keeps memory bounded and lets backpressure reach
		// the socket (Invariant 6).
		EventCacheCount: 128,
	}
	// Invariant 4 across a failover: a reconnect through a proxy or a VIP
	// may reach another server, whose binlog files and offsets say nothing
	// about the old one's. Check who answers on every session; a new
	// server moves versions to a new epoch, above everything before.
	was := last.Server
	if id, err := st.identity(ctx, *last); err != nil {
		return false, err
	} else if last.Server != "" && id != last.Server {
		st.log.Warn("the stream reconnected to another server (failover, or a proxy that moved); versions move to a new epoch",
			zap.String("was", last.Server), zap.String("now", id), zap.Uint64("epoch", last.Epoch+1))
		last.Server, last.Epoch = id, last.Epoch+1
		st.dec.server, st.dec.epoch = id, last.Epoch
		// reached's file and offset are the old server's until the new
		// one's first commit: no read-only watermark goes out at them.
		st.dec.foreign = true
	}
	// Closing a syncer KILLs its connection's thread id through a new
	// connection to the same address. Behind a proxy or a VIP that may
	// reach another server (a failover), where the id names some other
	// session, an application's as likely as not. The session's dialer
	// refuses once it is over, so no KILL goes out: closing the socket
	// ends the dump thread, and a new dump with this server_id replaces
	// one left behind.
	var over atomic.Bool
	dialer := &net.Dialer{}
	cfg.Dialer = func(ctx context.Context, network, address string) (net.Conn, error) {
		if over.Load() {
			return nil, errSessionOver
		}
		return dialer.DialContext(ctx, network, address)
	}
	syncer := replication.NewBinlogSyncer(cfg)
	defer func() {
		over.Store(true)
		syncer.Close()
	}()
	stream, err := syncer.StartSyncGTID(gset)
	if err != nil {
		return false, classify(err, last, was)
	}
	st.setConnected(true)
	// Whatever changed while no session read the binlog is pending until
	// the catalog or a TABLE_MAP tells (Invariant 11).
	for _, n := range st.dec.captured {
		st.dec.shapes.markPending(tableID(n))
	}
	st.dec.open = false // a transaction cut by the last connection arrives again whole
	st.dec.reached = *last
	// The session starts before every XA still prepared (no position passes
	// one), so their prepares arrive again.
	st.dec.prepared = nil
	emit := func(it txItem) error {
		select {
		case st.out <- it:
		case <-ctx.Done():
			return ctx.Err()
		}
		if it.pos != nil {
			*last = it.at
			progressed = true
		}
		return nil
	}
	for {
		ev, err := st.next(ctx, stream)
		if err != nil {
			return progressed, classify(err, last, was)
		}
		if ev == nil { // a read-only watermark was registered
			if err := st.dec.dueMarks(emit); err != nil {
				return progressed, err
			}
			continue
		}
		if err := st.dec.event(ev, emit); err != nil {
			if ctx.Err() != nil {
				return progressed, ctx.Err()
			}
			return progressed, pipeline.Fatal(err)
		}
		if !st.dec.open && !st.dec.inTx {
			st.readShapes(ctx)
			if err := st.applyShapes(st.dec.reached, emit); err != nil {
				return progressed, err
			}
			if err := st.dec.dueMarks(emit); err != nil {
				return progressed, err
			}
		}
	}
}

// next waits for the stream's next event. With read-only watermarks it
// also returns (nil, nil) when one is registered, so that an idle stream
// can hand it over without waiting for an event.
func (st *streamer) next(ctx context.Context, stream *replication.BinlogStreamer) (*replication.BinlogEvent, error) {
	if st.dec.pend == nil {
		return stream.GetEvent(ctx)
	}
	ev, err := stream.GetEvent(st.dec.pend.waitContext(ctx))
	if err != nil && ctx.Err() == nil && errors.Is(err, context.Canceled) {
		return nil, nil
	}
	return ev, err
}

// identity names the server the source reaches now, in Position.Server's
// form (MySQL: @@server_uuid; MariaDB: server_id=N). When it is the server
// last was read from, its binlog must still be last's history (a RESET
// MASTER between two sessions is fatal, never resumed).
func (st *streamer) identity(ctx context.Context, last Position) (string, error) {
	c, err := st.s.connect(ctx)
	if err != nil {
		return "", fmt.Errorf("mysql source: identify the server: %w", err)
	}
	defer c.Close()
	vars, err := variables(c, "server_id", "server_uuid")
	if err != nil {
		return "", fmt.Errorf("mysql source: identify the server: %w", err)
	}
	id := vars["server_uuid"]
	if st.s.flavor == FlavorMariaDB {
		id = "server_id=" + vars["server_id"]
	}
	if id == last.Server {
		srv := &Server{MariaDB: st.s.flavor == FlavorMariaDB}
		if err := checkSameHistory(c, srv, last); err != nil {
			return "", pipeline.Fatal(err)
		}
	}
	return id, nil
}

func (st *streamer) setConnected(up bool) {
	s := st.s
	s.mu.Lock()
	s.connected = up
	s.mu.Unlock()
	if up {
		s.m.connected.Set(1)
	} else {
		s.m.connected.Set(0)
	}
}

// classify turns the server's refusal to serve a position into a fatal
// error that says what to do; other errors are retried.
//
// was is the server the session's position came from: when the session
// reached another one (a failover), the server's refusal means it lacks
// transactions the pipeline already read from was (a replica promoted
// before it received them), and the sinks may hold changes it never had.
func classify(err error, at *Position, was string) error {
	var me *gomysql.MyError
	if !errors.As(err, &me) || me.Code != gomysql.ER_MASTER_FATAL_ERROR_READING_BINLOG {
		return err
	}
	if was != "" && at.Server != was {
		return pipeline.Fatal(fmt.Errorf("%w: the stream moved from %s to %s (a failover), which cannot send the binlog from the checkpoint (gtid %q): %s; "+
			"it lacks transactions this pipeline already read from %s (promoted before it received them), so the sinks may hold changes it never had: "+
			"take a new snapshot from it with sluice run --reset-offsets (a planned switchover waits for the replica to catch up first)",
			errDiverged, was, at.Server, at.GTID, me.Message, was))
	}
	return pipeline.Fatal(fmt.Errorf("%w: the server cannot send the binlog from the checkpoint (gtid %q): %s; "+
		"the changes since are lost to this pipeline: take a new snapshot with sluice run --reset-offsets", errPurged, at.GTID, me.Message))
}

// checkNotPurged fails when the server no longer has binlog the checkpoint
// needs (Invariant 9: a gap is reported, never skipped).
func checkNotPurged(c *client.Conn, srv *Server, p Position) error {
	fail := func(oldest string) error {
		return fmt.Errorf("%w: the checkpoint needs transactions after gtid %q, but the server purged them (its binlog now starts at %q); "+
			"take a new snapshot with sluice run --reset-offsets, and raise binlog_expire_logs_seconds so the binlog outlives an outage",
			errPurged, p.GTID, oldest)
	}
	if !srv.MariaDB {
		r, err := c.Execute("SELECT GTID_SUBSET(@@GLOBAL.gtid_purged, ?), @@GLOBAL.gtid_purged", p.GTID)
		if err != nil {
			return fmt.Errorf("mysql source: compare the checkpoint with gtid_purged: %w", err)
		}
		defer r.Close()
		if ok, _ := r.GetInt(0, 0); ok == 0 {
			purged, _ := getString(r, 0, 1)
			return fail(purged)
		}
		return nil
	}
	logs, err := c.Execute("SHOW BINARY LOGS")
	if err != nil || len(logs.Values) == 0 {
		return nil // no list: the stream's own error reports a gap
	}
	first, _ := getString(logs, 0, 0)
	logs.Close()
	// The oldest binlog starts with a Gtid_list event: the last GTID of
	// each domain before it, i.e. what was purged.
	ev, err := c.Execute("SHOW BINLOG EVENTS IN '" + strings.ReplaceAll(first, "'", "''") + "' LIMIT 4")
	if err != nil {
		return nil
	}
	defer ev.Close()
	startText := ""
	for i := range ev.Values {
		typ, _ := getStringByName(ev, i, "Event_type")
		if strings.EqualFold(typ, "Gtid_list") {
			info, _ := getStringByName(ev, i, "Info")
			startText = strings.Trim(strings.TrimSpace(info), "[]")
		}
	}
	oldest, err1 := gomysql.ParseMariadbGTIDSet(startText)
	have, err2 := gomysql.ParseMariadbGTIDSet(p.GTID)
	if err1 != nil || err2 != nil {
		return nil
	}
	o, h := oldest.(*gomysql.MariadbGTIDSet), have.(*gomysql.MariadbGTIDSet)
	for domain, g := range o.Sets {
		if mine := h.Sets[domain]; mine == nil || mine.SequenceNumber < g.SequenceNumber {
			return fail(startText)
		}
	}
	return nil
}

// currentPosition is the server's binlog end: where a stream without a
// snapshot starts.
func currentPosition(c *client.Conn, srv *Server) (Position, error) {
	r, err := c.Execute(binlogStatusQuery(srv))
	if err != nil {
		return Position{}, fmt.Errorf("mysql source: read the binlog position: %w", err)
	}
	defer r.Close()
	if len(r.Values) == 0 {
		return Position{}, errors.New("mysql source: the server reports no binlog position: is log_bin on?")
	}
	file, _ := getString(r, 0, 0)
	pos, _ := r.GetUint(0, 1)
	p := Position{Flavor: FlavorMySQL, File: file, Pos: uint32(pos)}
	if srv.MariaDB {
		p.Flavor = FlavorMariaDB
		// The GTID position of that very offset: gtid_binlog_pos, read
		// in a statement of its own, may already be past it under
		// concurrent commits, and the two would not name one point.
		g, err := c.Execute("SELECT IFNULL(BINLOG_GTID_POS(?, ?), '')", file, pos)
		if err != nil {
			return Position{}, fmt.Errorf("mysql source: BINLOG_GTID_POS(%s, %d): %w", file, pos, err)
		}
		p.GTID, _ = getString(g, 0, 0)
		g.Close()
	} else {
		p.GTID, _ = getString(r, 0, 4)
	}
	return p, p.Validate()
}

// poll refreshes the lag metrics from the server's binlog position.
func (s *Source) poll(ctx context.Context) {
	var c *client.Conn
	defer func() {
		if c != nil {
			c.Close()
		}
	}()
	t := time.NewTicker(s.opts.StatusInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if c == nil {
			var err error
			if c, err = s.connect(ctx); err != nil {
				continue
			}
		}
		lag, err := s.lagBytesNow(c)
		if err != nil {
			c.Close()
			c = nil
			continue
		}
		s.mu.Lock()
		s.lagBytes = lag
		last := s.lastEventTime
		s.mu.Unlock()
		s.m.lagBytes.Set(float64(lag))
		switch {
		case lag == 0 || last.IsZero():
			s.m.lagSeconds.Set(0)
		default:
			s.m.lagSeconds.Set(time.Since(last).Seconds())
		}
	}
}

// lagBytesNow is the binlog bytes between the last transaction received
// and the server's current position.
func (s *Source) lagBytesNow(c *client.Conn) (int64, error) {
	s.mu.Lock()
	at := s.received
	s.mu.Unlock()
	if at.File == "" {
		at = s.start
	}
	r, err := c.Execute("SHOW BINARY LOGS")
	if err != nil {
		return 0, err
	}
	defer r.Close()
	var lag int64
	counting := false
	for i := range r.Values {
		name, _ := getString(r, i, 0)
		size, _ := r.GetInt(i, 1)
		switch {
		case name == at.File:
			counting = true
			lag += size - int64(at.Pos)
		case counting:
			lag += size
		}
	}
	return max(lag, 0), nil
}
