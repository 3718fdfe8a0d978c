package postgres

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"go.uber.org/zap"

	"github.com/sluice-cdc/sluice/pipeline"
)

// maxDecodeRetries is how many consecutive sessions may end in the same
// decoding failure, each followed by a reconnect, before the source stops:
// a failure that survives reconnects is in the data, and retrying forever
// would stall the pipeline silently.
const maxDecodeRetries = 3

type itemKind uint8

const (
	itemTxn       itemKind = iota // a transaction's chunk
	itemHeartbeat                 // a heartbeat message
	itemKeepalive                 // an empty position from an idle keepalive
	itemMark                      // read-only snapshot watermarks (lsnMarks)
)

// streamItem is one decoded chunk on its way from the receiver to Read.
type streamItem struct {
	records    []pipeline.Record
	final      bool
	pos        pipeline.Position // final items only
	end        pglogrepl.LSN
	commitTime time.Time
	kind       itemKind
	dead       []pipeline.DeadLetter // undecodable changes (Invariant 7)
}

// streamer owns the replication connection: one goroutine receives,
// decodes and queues chunks, answers keepalives and reports the flush
// position. Nothing else touches the connection; Ack and Close reach the
// goroutine through atomics and by moving the socket's read deadline.
type streamer struct {
	s   *Source
	log *zap.Logger
	dec *Decoder

	out  chan streamItem
	done chan struct{}

	errMu sync.Mutex
	err   error

	connMu   sync.Mutex
	conn     *pgconn.PgConn
	wakeFlag atomic.Bool
	wakeCh   chan struct{}

	connected  atomic.Bool
	received   atomic.Uint64 // highest WAL start of data received
	serverEnd  atomic.Uint64 // highest WAL end reported by keepalives
	currentWAL atomic.Uint64 // server's pg_current_wal_lsn, polled

	// Owned by the receiving goroutine.
	handed      pglogrepl.LSN    // end LSN of the last final item queued
	lastVersion pipeline.Version // version of the last data record queued
	partial     bool             // a transaction's non-final chunk is queued
	lastStatus  time.Time
	sentFlush   pglogrepl.LSN
	keptAlive   pglogrepl.LSN // highest keepalive WAL end of this session
	lastAsk     time.Time     // last keepalive asked for (markPoll)
}

func newStreamer(s *Source) (*streamer, error) {
	opts := DecoderOptions{
		Database:        s.database,
		Resolver:        NewTypeResolver(s.pool, s.log),
		Catalog:         s.catalog,
		SpillDir:        s.opts.SpillDir,
		SpillThreshold:  s.opts.SpillThreshold,
		HeartbeatPrefix: HeartbeatPrefix,
		Generation:      s.gen,
		Refetch:         refetcher(s.pool, s.log, s.version),
		StartShapes:     s.startShapes,
		Watch:           WatchHooks{LeftOut: s.m.leftOut.Inc, Gone: func(n int) { s.m.tablesGone.Set(float64(n)) }},
		Log:             s.log,
	}
	for _, t := range s.tables {
		opts.Tables = append(opts.Tables, pipeline.TableID{Database: s.database, Schema: t.Schema, Table: t.Name})
	}
	if !s.standby {
		opts.Republish = func(ctx context.Context, read []pipeline.TableID) (Republished, error) {
			also := make([]TableRef, len(read))
			for i, id := range read {
				also[i] = TableRef{Schema: id.Schema, Name: id.Table}
			}
			gone, err := s.ensurePublication(ctx, true, also)
			if err != nil {
				return Republished{}, err
			}
			var r Republished
			var at pglogrepl.LSN
			if err := s.pool.QueryRow(ctx, "SELECT pg_current_wal_lsn()").Scan(&at); err != nil {
				return r, err
			}
			ids := func(refs []TableRef) []pipeline.TableID {
				out := make([]pipeline.TableID, len(refs))
				for i, t := range refs {
					out[i] = pipeline.TableID{Database: s.database, Schema: t.Schema, Table: t.Name}
				}
				return out
			}
			r.Gone, r.At = ids(gone), uint64(at)
			return r, nil
		}
	}
	dec, err := NewDecoder(opts)
	if err != nil {
		return nil, err
	}
	return &streamer{s: s, log: s.log, dec: dec, out: make(chan streamItem, streamBuffer),
		done: make(chan struct{}), wakeCh: make(chan struct{}, 1), handed: s.start}, nil
}

// pluginArgs are the pgoutput options: protocol 2 (streaming of large
// transactions when asked) from PostgreSQL 14, else protocol 1.
func (st *streamer) pluginArgs() []string {
	v2 := st.s.version >= 140000
	args := []string{"proto_version '1'", "publication_names '" + quoteIdent(st.s.opts.Publication) + "'"}
	if v2 {
		args[0] = "proto_version '2'"
		args = append(args, "messages 'true'")
		if st.s.opts.Streaming {
			args = append(args, "streaming 'on'")
		}
	}
	return args
}

// startReplication issues START_REPLICATION at lsn. The server sends every
// transaction that commits at or after lsn (or after the slot's
// confirmed_flush_lsn, if that is later).
func (st *streamer) startReplication(ctx context.Context, conn *pgconn.PgConn, lsn pglogrepl.LSN) error {
	err := pglogrepl.StartReplication(ctx, conn, st.s.opts.Slot, lsn,
		pglogrepl.StartReplicationOptions{Mode: pglogrepl.LogicalReplication, PluginArgs: st.pluginArgs()})
	if err != nil {
		return st.classify(fmt.Errorf("postgres source: start replication at %s: %w", lsn, err))
	}
	return nil
}

// classify marks errors that mean the slot cannot deliver any more as fatal.
func (st *streamer) classify(err error) error {
	if isSlotGone(err) {
		why := err.Error()
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) {
			why = "the server says: " + pgErr.Message
		}
		return pipeline.Fatal(slotGone(st.s.opts.Slot, pglogrepl.LSN(st.s.acked.Load()), why))
	}
	return err
}

func (st *streamer) fail(err error) {
	st.errMu.Lock()
	st.err = err
	st.errMu.Unlock()
	st.log.Error("postgres source stopped", zap.Error(err))
}

func (st *streamer) failure() error {
	st.errMu.Lock()
	defer st.errMu.Unlock()
	return st.err
}

// wake makes the receiver look at the ack position now: it sets a flag the
// receiver checks after arming its read deadline, then moves the deadline to
// now, so a wake-up is never lost and no timer or context is needed per
// message.
func (st *streamer) wake() {
	st.wakeFlag.Store(true)
	select {
	case st.wakeCh <- struct{}{}:
	default:
	}
	st.connMu.Lock()
	if st.conn != nil {
		_ = st.conn.Conn().SetReadDeadline(time.Now())
	}
	st.connMu.Unlock()
}

func (st *streamer) setConn(c *pgconn.PgConn) {
	st.connMu.Lock()
	st.conn = c
	st.connMu.Unlock()
}

// run receives until ctx ends or a fatal error, reconnecting with
// exponential backoff. A new session resumes at the end LSN of the last
// transaction queued for Read (never earlier than the last Ack), so nothing
// already in the pipeline is lost or needs the server again; records the
// server re-sends of a transaction that was only partly queued are dropped
// by version.
func (st *streamer) run(ctx context.Context, conn *pgconn.PgConn) {
	defer close(st.done)
	defer func() { _ = st.dec.Close() }()
	backoff := st.s.opts.ReconnectInitial
	decodeFailures := 0
	for {
		if conn != nil {
			before := st.handed
			st.setConn(conn)
			err := st.session(ctx, conn)
			st.setConn(nil)
			st.connected.Store(false)
			closeConn(conn)
			conn = nil
			if ctx.Err() != nil {
				return
			}
			if st.handed != before {
				backoff, decodeFailures = st.s.opts.ReconnectInitial, 0
			}
			if pipeline.IsFatal(err) {
				st.fail(err)
				return
			}
			var de *DecodeError
			if errors.As(err, &de) {
				if decodeFailures++; decodeFailures >= maxDecodeRetries {
					st.fail(pipeline.Fatal(fmt.Errorf("postgres source: %w (failed %d times in a row after reconnecting; "+
						"the transaction ending after %s cannot be decoded)", err, decodeFailures, st.handed)))
					return
				}
			}
			st.dec.Reset()
			st.s.m.reconnects.Inc()
			st.log.Warn("replication connection lost; reconnecting", zap.Error(err),
				zap.Duration("backoff", backoff), zap.Stringer("resume_lsn", st.handed))
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, st.s.opts.ReconnectMax)
		c, err := st.reconnect(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if pipeline.IsFatal(err) {
				st.fail(err)
				return
			}
			st.log.Warn("reconnect failed", zap.Error(err), zap.Duration("backoff", backoff))
			continue
		}
		conn = c
	}
}

func (st *streamer) reconnect(ctx context.Context) (*pgconn.PgConn, error) {
	conn, err := st.s.connectReplication(ctx)
	if err != nil {
		return nil, fmt.Errorf("postgres source: replication connection: %w", err)
	}
	sys, err := pglogrepl.IdentifySystem(ctx, conn)
	if err == nil && sys.SystemID != st.s.systemID {
		err = pipeline.Fatal(fmt.Errorf("postgres source: the server is now database system %s, not %s: the slot's positions do not apply; %s",
			sys.SystemID, st.s.systemID, resnapshotHint))
	}
	if err == nil {
		err = st.startReplication(ctx, conn, st.handed)
	}
	if err != nil {
		closeConn(conn)
		return nil, err
	}
	st.log.Info("replication resumed", zap.Stringer("lsn", st.handed))
	return conn, nil
}

func closeConn(c *pgconn.PgConn) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = c.Close(ctx)
}

// session receives on one connection until it fails or ctx ends.
func (st *streamer) session(ctx context.Context, conn *pgconn.PgConn) error {
	st.connected.Store(true)
	st.lastStatus = time.Time{} // report the flush position right away
	st.keptAlive = 0            // the server resends from st.handed
	emit := func(c Chunk) error { return st.emit(ctx, conn, c) }
	for {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		// status clears the wake flag first: a mark registered after it
		// is seen by dueMarks or by the flag check below.
		if err := st.status(conn, false); err != nil {
			return err
		}
		if err := st.dueMarks(ctx, conn); err != nil {
			return err
		}
		deadline := st.lastStatus.Add(st.s.opts.StatusInterval)
		markAt, ask := st.markDeadline()
		if ask && time.Since(st.lastAsk) >= markPoll {
			// A watermark waits for an LSN ahead of the stream: the
			// server's keepalive tells how far it has decoded.
			if err := st.sendStatus(conn, true); err != nil {
				return err
			}
			st.lastAsk = time.Now()
		}
		if !markAt.IsZero() && markAt.Before(deadline) {
			deadline = markAt
		}
		if err := conn.Conn().SetReadDeadline(deadline); err != nil {
			return err
		}
		if st.wakeFlag.Load() {
			continue
		}
		msg, err := conn.ReceiveMessage(context.Background())
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return st.classify(err)
		}
		switch m := msg.(type) {
		case *pgproto3.CopyData:
			if len(m.Data) == 0 {
				continue
			}
			switch m.Data[0] {
			case pglogrepl.PrimaryKeepaliveMessageByteID:
				pkm, err := pglogrepl.ParsePrimaryKeepaliveMessage(m.Data[1:])
				if err != nil {
					return err
				}
				storeMax(&st.serverEnd, pkm.ServerWALEnd)
				st.keptAlive = max(st.keptAlive, pkm.ServerWALEnd)
				if err := st.status(conn, pkm.ReplyRequested); err != nil {
					return err
				}
				if err := st.keepalivePosition(ctx, conn, pkm.ServerWALEnd); err != nil {
					return err
				}
			case pglogrepl.XLogDataByteID:
				xld, err := pglogrepl.ParseXLogData(m.Data[1:])
				if err != nil {
					return err
				}
				storeMax(&st.received, xld.WALStart)
				if err := st.dec.Decode(ctx, xld.WALData, xld.WALStart, emit); err != nil {
					return err
				}
			}
		case *pgproto3.ErrorResponse:
			return st.classify(pgconn.ErrorResponseToPgError(m))
		case *pgproto3.CopyDone:
			return errors.New("the server ended the replication stream")
		}
	}
}

// status sends a standby status update when forced, when the ack position
// moved, or when StatusInterval passed since the last one.
//
// Invariant 1: the flush position is the LSN of the last Ack — the end of
// the last transaction whose checkpoint is committed — or, before any Ack,
// the checkpoint being resumed or the slot's consistent point. It is always
// set explicitly: pglogrepl would copy the write position into a zero flush
// position and release WAL that is not durable anywhere.
func (st *streamer) status(conn *pgconn.PgConn, force bool) error {
	st.wakeFlag.Store(false)
	acked := pglogrepl.LSN(st.s.acked.Load())
	if !force && acked == st.sentFlush && time.Since(st.lastStatus) < st.s.opts.StatusInterval {
		return nil
	}
	return st.sendStatus(conn, false)
}

// sendStatus sends a standby status update with the ack position; with
// reply the server answers with a keepalive.
func (st *streamer) sendStatus(conn *pgconn.PgConn, reply bool) error {
	acked := pglogrepl.LSN(st.s.acked.Load())
	write := max(acked, pglogrepl.LSN(st.received.Load()))
	err := pglogrepl.SendStandbyStatusUpdate(context.Background(), conn, pglogrepl.StandbyStatusUpdate{
		WALWritePosition: write, WALFlushPosition: acked, WALApplyPosition: acked, ClientTime: time.Now(), ReplyRequested: reply})
	if err != nil {
		return fmt.Errorf("send standby status: %w", err)
	}
	st.sentFlush, st.lastStatus = acked, time.Now()
	return nil
}

// keepalivePosition hands an empty batch positioned at a keepalive's WAL
// end to the pipeline when nothing is in flight: everything queued has been
// acknowledged and no transaction is partly queued. Every transaction that
// commits before that LSN has already been received (the server reports the
// position up to which it has decoded), so once the batch is checkpointed
// and acknowledged the slot advances past WAL that holds nothing for us —
// written by other databases, or by tables outside the publication — while
// the slot never confirms more than a checkpoint holds.
func (st *streamer) keepalivePosition(ctx context.Context, conn *pgconn.PgConn, walEnd pglogrepl.LSN) error {
	if st.partial || walEnd <= st.handed || pglogrepl.LSN(st.s.acked.Load()) < st.handed || len(st.out) > 0 {
		return nil
	}
	it := streamItem{final: true, end: walEnd, pos: st.s.position(walEnd), kind: itemKeepalive}
	if err := st.push(ctx, conn, it); err != nil {
		return err
	}
	st.handed = walEnd
	return nil
}

// emit queues a decoded chunk for Read.
func (st *streamer) emit(ctx context.Context, conn *pgconn.PgConn, c Chunk) error {
	// After a reconnect the server re-sends a transaction that was only
	// partly queued; its records up to the last queued version are already
	// in the pipeline.
	recs := c.Records
	for i := range c.Records {
		if c.Records[i].Op.IsData() && !st.lastVersion.Less(c.Records[i].Version) {
			// Copy only when something is dropped (rare: after a
			// reconnect), not for every chunk.
			recs = slices.DeleteFunc(slices.Clone(c.Records), func(r pipeline.Record) bool {
				return r.Op.IsData() && !st.lastVersion.Less(r.Version)
			})
			break
		}
	}
	it := streamItem{records: recs, final: c.Final, dead: c.Dead}
	if !c.Final {
		if len(recs) == 0 && len(c.Dead) == 0 {
			return nil
		}
	} else {
		it.kind = itemTxn
		if n := len(c.Records); n > 0 && c.Records[n-1].Op == pipeline.OpHeartbeat {
			// A heartbeat, with the shapes it found changed (Invariant 11).
			it.kind = itemHeartbeat
		}
		if c.EndLSN <= st.handed && !st.partial && (it.kind == itemHeartbeat || len(recs) == 0) {
			return nil // re-sent after a reconnect, already queued
		}
		// Invariant 2: only a transaction's last chunk (or a heartbeat)
		// carries a position.
		it.end, it.commitTime = c.EndLSN, c.CommitTime
		it.pos = st.s.position(c.EndLSN)
		for i := range recs {
			recs[i].Pos = it.pos
		}
	}
	if err := st.push(ctx, conn, it); err != nil {
		return err
	}
	for i := range recs {
		if recs[i].Op.IsData() && st.lastVersion.Less(recs[i].Version) {
			st.lastVersion = recs[i].Version
		}
	}
	st.partial = !c.Final
	if c.Final && it.end > st.handed {
		st.handed = it.end
	}
	return nil
}

// push queues an item, blocking while Read is behind (Invariant 6: the
// socket is not read meanwhile, so backpressure reaches the server). While
// blocked it keeps reporting status, so the server neither times the
// connection out nor waits for acks.
func (st *streamer) push(ctx context.Context, conn *pgconn.PgConn, it streamItem) error {
	// Invariant 6: block, never drop.
	select {
	case st.out <- it:
		return nil
	default:
	}
	tick := time.NewTicker(max(st.s.opts.StatusInterval/2, 10*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case st.out <- it:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-st.wakeCh:
		case <-tick.C:
		}
		if err := st.status(conn, false); err != nil {
			return err
		}
	}
}

// lagBytes is the server's current WAL position (as last polled) minus the
// position the receiver has reached.
func (st *streamer) lagBytes() int64 {
	cur := st.currentWAL.Load()
	got := max(st.received.Load(), st.serverEnd.Load())
	if cur == 0 || got >= cur {
		return 0
	}
	return int64(cur - got)
}

func storeMax(a *atomic.Uint64, v pglogrepl.LSN) {
	for {
		cur := a.Load()
		if uint64(v) <= cur || a.CompareAndSwap(cur, uint64(v)) {
			return
		}
	}
}
