package postgres

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sluice-cdc/sluice/pipeline"
)

// lsnMarks are the watermarks of a read-only incremental snapshot
// (SnapshotOptions.ReadOnly, or a server in recovery: a hot standby,
// where nothing can be written). Instead of committing a logical decoding
// message, ChunkReader.Mark registers the watermark here with an LSN and
// the streamer hands it over between two transactions once it has passed
// that LSN (streamer.dueMarks), where a message committed at that point
// of the WAL would have stood. The window stays sound (Invariant 12)
// because of where each one is placed (ChunkReader.positionMark):
//   - a low watermark goes out at once, wherever the stream is; Mark then
//     returns only once the server has replayed (a standby) or written (a
//     primary) that point: every transaction the stream showed before it
//     has its commit record in what a read taken now can see. On a
//     standby, transactions become visible in the order their commit
//     records replay, so the chunk sees them all; on a primary, the
//     visibility guard reads a chunk again whose snapshot still had one
//     of them in progress (snapshot.Chunk.InProgress), as with messages;
//   - a high watermark waits for the LSN a read taken after the chunk
//     returns (pg_last_wal_replay_lsn() on a standby,
//     pg_current_wal_insert_lsn() on a primary): every transaction the
//     chunk saw has its commit record ending at or before it, so every
//     change the chunk holds came before the watermark. A later point
//     only widens the window.
//
// The stream's point between transactions is the end of the last
// transaction it handed over, or a keepalive's WAL end (the end of the
// last record the server decoded, everything before it sent): the next
// commit record starts at or after it. A watermark at point P is
// versioned {generation, P, 0, 1}: above every transaction before it
// (commit LSN < P) and below every change of the next (commit LSN ≥ P,
// index ≥ 2), as a message transaction at P would sort (docs/versions.md).
type lsnMarks struct {
	mu   sync.Mutex
	list []lsnMark
	// n is len(list), read without the lock by the receiver on every
	// message: with no mark registered (every pipeline but a read-only
	// snapshot's) the stream pays one atomic load a message.
	n atomic.Int64
}

type lsnMark struct {
	token string
	at    pglogrepl.LSN      // 0: the stream's next point between transactions
	fired chan pglogrepl.LSN // receives the point where the mark went out; buffered
}

// add registers a watermark holding token at LSN at (0: at once). The
// returned channel receives the stream's point where it went out.
func (m *lsnMarks) add(token string, at pglogrepl.LSN) <-chan pglogrepl.LSN {
	fired := make(chan pglogrepl.LSN, 1)
	m.mu.Lock()
	m.list = append(m.list, lsnMark{token: token, at: at, fired: fired})
	m.n.Store(int64(len(m.list)))
	m.mu.Unlock()
	return fired
}

// waiting reports whether a mark is registered, and whether one of them
// waits for an LSN the stream has not reached (reached).
func (m *lsnMarks) waiting(reached pglogrepl.LSN) (some, ahead bool) {
	if m.n.Load() == 0 {
		return false, false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, pm := range m.list {
		if pm.at > reached {
			ahead = true
		}
	}
	return len(m.list) > 0, ahead
}

// due removes and returns, in the order they were registered, the marks
// due at reached.
func (m *lsnMarks) due(reached pglogrepl.LSN) []lsnMark {
	if m.n.Load() == 0 {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []lsnMark
	keep := m.list[:0]
	for _, pm := range m.list {
		if pm.at <= reached {
			out = append(out, pm)
		} else {
			keep = append(keep, pm)
		}
	}
	clear(m.list[len(keep):])
	m.list = keep
	m.n.Store(int64(len(keep)))
	return out
}

// markPoll is how often the streamer asks an idle server for a keepalive
// (its decoded WAL end) while a watermark waits for an LSN ahead of the
// stream.
const markPoll = 20 * time.Millisecond

// reached is the stream's point between transactions: every transaction
// whose commit record ends at or before it has been handed over, and the
// next starts at or after it. ok is false while a transaction is partly
// handed over.
func (st *streamer) reached() (pglogrepl.LSN, bool) {
	if st.partial {
		return 0, false
	}
	return max(st.handed, st.keptAlive), true
}

// dueMarks hands over, as one OpWatermark item positioned at the
// stream's point, the registered watermarks it has reached. It runs on
// the receiving goroutine between messages, and never while a
// transaction is partly handed over (Invariant 2: its position is a
// transaction boundary).
func (st *streamer) dueMarks(ctx context.Context, conn *pgconn.PgConn) error {
	at, ok := st.reached()
	if !ok {
		return nil
	}
	due := st.s.marks.due(at)
	if len(due) == 0 {
		return nil
	}
	v := pipeline.Version{st.s.gen, uint64(at), 0, 1}
	it := streamItem{final: true, end: at, pos: st.s.position(at), kind: itemMark}
	for _, pm := range due {
		it.records = append(it.records, pipeline.Record{Op: pipeline.OpWatermark, After: []any{pm.token},
			EventTime: time.Now().UTC(), Version: v, Pos: it.pos})
	}
	if err := st.push(ctx, conn, it); err != nil {
		return err
	}
	st.handed = at
	for _, pm := range due {
		pm.fired <- at
	}
	return nil
}

// markDeadline is when the receiver should stop waiting for a message to
// hand over due marks (now) or ask for a keepalive (markPoll), or the
// zero time when no mark waits.
func (st *streamer) markDeadline() (time.Time, bool) {
	at, ok := st.reached()
	if !ok {
		return time.Time{}, false
	}
	some, ahead := st.s.marks.waiting(at)
	switch {
	case !some:
		return time.Time{}, false
	case !ahead:
		return time.Now(), false // due now
	}
	return time.Now().Add(markPoll), true
}

// positionMark is Mark for a read-only snapshot (lsnMarks).
func (r *ChunkReader) positionMark(ctx context.Context, c *pgx.Conn, token string, table pipeline.TableID, high func(*pipeline.Table) error) error {
	if high == nil {
		var point pglogrepl.LSN
		fired := r.s.marks.add(token, 0)
		r.s.wakeStream()
		select {
		case point = <-fired:
		case <-ctx.Done():
			return ctx.Err()
		}
		return r.waitServer(ctx, c, point)
	}
	// The shape is read under the table's lock, held until the LSN is
	// read: no schema change of the table commits between the two.
	tx, err := c.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if err := r.highShape(ctx, tx, table, high); err != nil {
		return err
	}
	at, err := serverLSN(ctx, tx)
	if err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	r.s.marks.add(token, at)
	r.s.wakeStream()
	return nil
}

// waitServer returns once the server has replayed (or written) the WAL up
// to point.
func (r *ChunkReader) waitServer(ctx context.Context, c *pgx.Conn, point pglogrepl.LSN) error {
	wait := time.Millisecond
	for {
		at, err := serverLSN(ctx, c)
		if err != nil {
			return err
		}
		if at >= point {
			return nil
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return ctx.Err()
		}
		wait = min(2*wait, 100*time.Millisecond)
	}
}

// serverLSN is the end of the WAL a read taken now can see committed: on
// a standby the replayed position, on a primary the insert position.
func serverLSN(ctx context.Context, q Querier) (pglogrepl.LSN, error) {
	var s *string
	err := q.QueryRow(ctx, `SELECT (CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn()
		ELSE pg_current_wal_insert_lsn() END)::text`).Scan(&s)
	if err != nil {
		return 0, err
	}
	if s == nil {
		return 0, errors.New("postgres source: the server is in recovery but replays no WAL (an archive-only standby?): " +
			"read-only snapshots need a streaming hot standby")
	}
	return pglogrepl.ParseLSN(*s)
}
