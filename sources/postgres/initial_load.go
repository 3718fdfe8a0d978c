package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/snapshot"
)

const (
	// loadBatchRows and loadBatchBytes bound one snapshot batch.
	loadBatchRows  = 2000
	loadBatchBytes = 4 << 20
	// loadBuffer is the number of snapshot batches queued ahead of Read.
	loadBuffer = 4
)

var snapshotNamePattern = regexp.MustCompile(`^[0-9A-Fa-f-]{1,64}$`)

// snapshotLoad copies the captured tables from the slot's exported snapshot.
//
// Every reader connection imports the snapshot in a REPEATABLE READ READ ONLY
// transaction before START_REPLICATION is sent on the replication connection
// (the snapshot is valid only until that connection's next command); the
// readers keep it afterwards through their own transactions. Each table is
// split into primary-key ranges whose boundaries the database supplies (an
// index walk with LIMIT 1 OFFSET n, compared as rows, so composite keys and
// collations follow the index), and each range is COPYed in text form and
// decoded with DecodeText, so snapshot values equal stream values.
//
// Rows get version {0, consistent point, 0, 1} and each table's rows are
// preceded by a truncate barrier at {0, consistent point, 0, 0}, so a fresh
// load clears whatever an interrupted one left in the sinks (Invariant 4);
// every stream change commits at or after the consistent point with a row
// index of at least rowBase and sorts above both (see version.go).
//
// Batches carry no position of their own, but the source tells what a
// restart would still have to read after each one it hands over
// (LoadState): the incremental snapshot engine positions them at the
// consistent point with that progress, so a restart streams from there
// and reads only the key ranges not handed over, in chunks (see
// snapshot.Loader). A load with a table it cannot order by key (no
// primary key or replica identity index) is not resumable: a restart
// before its end takes the fresh path again (new slot, new load). After
// the last row an empty batch positioned at the consistent point starts
// the stream phase (Invariant 3: the stream starts exactly at the
// snapshot).
type snapshotLoad struct {
	s     *Source
	cp    pglogrepl.LSN
	name  string
	start time.Time
	out   chan loadItem

	connMu sync.Mutex
	conns  []*pgx.Conn

	errMu sync.Mutex
	err   error

	tablesMu sync.Mutex
	tables   []*loadTable
	done     atomic.Bool

	handedMu sync.Mutex
	// planned: every table's shape and ranges are registered.
	planned atomic.Bool
}

type loadTable struct {
	ref   TableRef
	shape *TableShape
	// Handed over through Read, under snapshotLoad.handedMu: the barrier,
	// the ranges (registered before the barrier), the rows.
	started   bool
	ranges    []*snapshot.RangeProgress
	handed    int64
	total     atomic.Int64
	rows      atomic.Int64
	remaining atomic.Int64 // ranges not yet copied
	finished  atomic.Bool
	rowsDone  prometheus.Gauge
	rowsTotal prometheus.Gauge
}

// loadJob is one key range of a table.
type loadJob struct {
	t     *loadTable
	where string // SQL predicate, "" for the whole table
	rng   *snapshot.RangeProgress
}

// loadItem is a batch of the load with what it completes.
type loadItem struct {
	b       pipeline.Batch
	t       *loadTable
	barrier bool                    // b holds t's truncate barrier
	rng     *snapshot.RangeProgress // the range b's rows belong to
	last    snapshot.Cursor         // the key of b's last row
	final   bool                    // b ends rng
}

func newSnapshotLoad(s *Source, cp pglogrepl.LSN, name string) *snapshotLoad {
	return &snapshotLoad{s: s, cp: cp, name: name, out: make(chan loadItem, loadBuffer)}
}

// importSnapshot opens Snapshot.Parallel reader connections and imports the
// exported snapshot on each.
func (l *snapshotLoad) importSnapshot(ctx context.Context) error {
	if !snapshotNamePattern.MatchString(l.name) {
		return fmt.Errorf("postgres source: unexpected snapshot name %q from slot creation", l.name)
	}
	cfg, err := pgx.ParseConfig(l.s.opts.DSN)
	if err != nil {
		return pipeline.Fatal(fmt.Errorf("postgres source: dsn: %w", redactDSNError(err)))
	}
	if l.s.opts.Password != "" {
		cfg.Password = l.s.opts.Password
	}
	applySessionSettings(cfg.RuntimeParams, l.s.opts.Pipeline)
	names := make([]string, len(l.s.tables))
	for i, t := range l.s.tables {
		names[i] = t.quoted()
	}
	lock := "LOCK TABLE " + strings.Join(names, ", ") + " IN ACCESS SHARE MODE"
	for i := 0; i < l.s.opts.Snapshot.Parallel; i++ {
		conn, err := pgx.ConnectConfig(ctx, cfg.Copy())
		if err != nil {
			return fmt.Errorf("postgres source: snapshot reader %d: %w", i, err)
		}
		if _, err := conn.Exec(ctx, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"); err != nil {
			closeReader(conn)
			return fmt.Errorf("postgres source: snapshot reader %d: begin: %w", i, err)
		}
		if _, err := conn.Exec(ctx, "SET TRANSACTION SNAPSHOT '"+l.name+"'"); err != nil {
			closeReader(conn)
			return fmt.Errorf("postgres source: snapshot reader %d: import snapshot %s: %w", i, l.name, err)
		}
		// Every reader takes its locks on all the tables before it reads
		// any. A reader that first locked a table mid-load would queue
		// behind an ALTER waiting for another reader's lock, which is held
		// until the whole load ends: the load would wait for itself for
		// ever. The first reader waits for its locks; the others give up
		// after a moment (an ALTER or a TRUNCATE is queued behind the
		// first) and the load goes on with fewer readers.
		if i > 0 {
			if _, err := conn.Exec(ctx, "SET LOCAL lock_timeout = '"+strconv.Itoa(readerLockWait)+"ms'"); err != nil {
				closeReader(conn)
				return fmt.Errorf("postgres source: snapshot reader %d: %w", i, err)
			}
		}
		if _, err := conn.Exec(ctx, lock); err != nil {
			closeReader(conn)
			var pgErr *pgconn.PgError
			if i > 0 && errors.As(err, &pgErr) && pgErr.Code == "55P03" { // lock_not_available
				l.s.log.Info("initial load: a schema change waits for the load's locks; going on with fewer readers",
					zap.Int("readers", i), zap.Int("configured", l.s.opts.Snapshot.Parallel))
				return nil
			}
			return fmt.Errorf("postgres source: snapshot reader %d: lock the captured tables: %w", i, err)
		}
		l.connMu.Lock()
		l.conns = append(l.conns, conn)
		l.connMu.Unlock()
	}
	return nil
}

// readerLockWait is how long, in milliseconds, a snapshot reader after the
// first waits for its table locks before the load goes on without it.
const readerLockWait = 2000

// closeConns closes the reader connections still open.
func (l *snapshotLoad) closeConns() {
	l.connMu.Lock()
	conns := l.conns
	l.conns = nil
	l.connMu.Unlock()
	for _, c := range conns {
		closeReader(c)
	}
}

func closeReader(c *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = c.Close(ctx)
}

// run plans and copies every table, then queues the stream position. It
// closes l.out when it ends; l.err says why when it failed.
func (l *snapshotLoad) run(ctx context.Context) {
	defer close(l.out)
	l.start = time.Now().UTC()
	l.connMu.Lock()
	conns := append([]*pgx.Conn(nil), l.conns...)
	l.connMu.Unlock()
	if l.s.redoLoad {
		l.s.log.Warn("redoing the initial load: the previous one was interrupted before it completed (there is no checkpoint)")
	}
	l.s.log.Info("initial load started", zap.Int("tables", len(l.s.tables)), zap.Int("readers", len(conns)),
		zap.Stringer("consistent_point", l.cp))

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	q := newJobQueue()
	stop := context.AfterFunc(ctx, q.close)
	defer stop()
	var wg sync.WaitGroup
	errs := make(chan error, len(conns))
	work := func(conn *pgx.Conn) {
		for {
			job, ok := q.pop()
			if !ok {
				return
			}
			if err := l.copyRange(ctx, conn, job); err != nil {
				errs <- err
				cancel()
				return
			}
		}
	}
	for _, c := range conns[1:] {
		wg.Add(1)
		go func() { defer wg.Done(); work(c) }()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := l.planAll(ctx, conns[0], q); err != nil {
			errs <- err
			cancel()
			return
		}
		l.planned.Store(true)
		q.close()
		work(conns[0])
	}()
	wg.Wait()
	l.closeConns() // ends the snapshot transactions
	close(errs)
	if err := <-errs; err != nil {
		l.fail(err)
		return
	}
	if ctx.Err() != nil {
		l.fail(ctx.Err())
		return
	}
	var rows int64
	for _, t := range l.progressTables() {
		rows += t.rows.Load()
	}
	// Invariant 3: the first checkpointable position is the snapshot's
	// consistent point, where the stream starts.
	select {
	case l.out <- loadItem{b: pipeline.Batch{Pos: l.s.position(l.cp)}}:
	case <-ctx.Done():
		l.fail(ctx.Err())
		return
	}
	l.done.Store(true)
	l.s.log.Info("initial load complete; streaming from the consistent point", zap.Int64("rows", rows),
		zap.Duration("took", time.Since(l.start)), zap.Stringer("lsn", l.cp))
}

func (l *snapshotLoad) fail(err error) {
	l.errMu.Lock()
	l.err = fmt.Errorf("postgres source: initial load: %w (the next start resumes it from the last checkpoint, or loads again from a new snapshot when there is none)", err)
	l.errMu.Unlock()
}

// next returns the next snapshot batch, recorded as handed over; ok is
// false once the load is over.
func (l *snapshotLoad) next(ctx context.Context) (b pipeline.Batch, ok bool, err error) {
	select {
	case it, ok := <-l.out:
		if !ok {
			l.errMu.Lock()
			defer l.errMu.Unlock()
			return pipeline.Batch{}, false, l.err
		}
		l.handedMu.Lock()
		if it.t != nil {
			it.t.handed += int64(len(it.b.Records))
			if it.barrier {
				it.t.started = true
				it.t.handed = 0
			}
		}
		if it.rng != nil {
			it.rng.Handed(it.last, it.final)
		}
		l.handedMu.Unlock()
		return it.b, true, nil
	case <-ctx.Done():
		return pipeline.Batch{}, false, ctx.Err()
	}
}

// state is the load's snapshot.LoadState as of the batches next
// returned; ok false until every table is planned, and when a table has
// no key to order chunks by.
func (l *snapshotLoad) state() (st snapshot.LoadState, ok bool) {
	if !l.planned.Load() || l.done.Load() {
		return st, false
	}
	st.Stream = l.s.position(l.cp)
	loaded := l.progressTables()
	l.handedMu.Lock()
	defer l.handedMu.Unlock()
	for _, ref := range l.s.tables {
		id := pipeline.TableID{Schema: ref.Schema, Table: ref.Name}
		i := slices.IndexFunc(loaded, func(t *loadTable) bool { return t.ref == ref })
		if i < 0 || !loaded[i].started {
			st.Tables = append(st.Tables, snapshot.LoadTable{Table: id})
			continue
		}
		t := loaded[i]
		if len(t.shape.Table.KeyIdx) == 0 {
			return st, false
		}
		lt := snapshot.LoadTable{Table: id, Started: true, Rows: t.handed, Estimate: t.total.Load()}
		lt.Ranges = snapshot.Remaining(t.ranges)
		if len(lt.Ranges) > 0 {
			st.Tables = append(st.Tables, lt)
		}
	}
	return st, true
}

func (l *snapshotLoad) finished() bool { return l.done.Load() }

func (l *snapshotLoad) progressTables() []*loadTable {
	l.tablesMu.Lock()
	defer l.tablesMu.Unlock()
	return append([]*loadTable(nil), l.tables...)
}

// progress reports rows done and the estimated total per table.
func (l *snapshotLoad) progress() []pipeline.TableStatus {
	var out []pipeline.TableStatus
	for _, t := range l.progressTables() {
		out = append(out, pipeline.TableStatus{Table: tableName(t.ref), RowsDone: t.rows.Load(),
			RowsTotal: t.total.Load(), Done: t.finished.Load()})
	}
	return out
}

// planAll reads each table's shape and key ranges in the snapshot, queues
// its truncate barrier and then its ranges.
func (l *snapshotLoad) planAll(ctx context.Context, conn *pgx.Conn, q *jobQueue) error {
	for _, ref := range l.s.tables {
		shape, err := LoadTableShape(ctx, conn, l.s.database, ref)
		if err != nil {
			return err
		}
		t := &loadTable{ref: ref, shape: shape}
		t.rowsDone, t.rowsTotal = l.s.m.snapshotGauges(tableName(ref))
		var est int64
		if err := conn.QueryRow(ctx, "SELECT greatest(reltuples, 0)::bigint FROM pg_class WHERE oid = $1", shape.RelationOID).Scan(&est); err != nil {
			return fmt.Errorf("estimate rows of %s: %w", tableName(ref), err)
		}
		if len(shape.Table.KeyIdx) == 0 {
			l.s.log.Warn("the initial load cannot resume after a crash: a table has no key to order it by, and a restart loads again",
				zap.String("table", tableName(ref)))
		}
		bounds, cursors, err := l.boundaries(ctx, conn, t)
		if err != nil {
			return fmt.Errorf("split %s into key ranges: %w", tableName(ref), err)
		}
		t.total.Store(max(est, int64(len(bounds))*int64(l.s.opts.Snapshot.ChunkRows)))
		t.rowsTotal.Set(float64(t.total.Load()))
		l.tablesMu.Lock()
		l.tables = append(l.tables, t)
		l.tablesMu.Unlock()

		barrier := pipeline.Record{Op: pipeline.OpTruncate, Table: shape.Table, EventTime: l.start,
			Version: snapshotVersion(l.s.gen, l.cp, barrierIndex), Snapshot: true}
		barrier.Size = pipeline.EstimateSize(&barrier)
		jobs := rangeJobs(t, keyList(shape), bounds, cursors)
		l.handedMu.Lock()
		for _, j := range jobs {
			t.ranges = append(t.ranges, j.rng)
		}
		l.handedMu.Unlock()
		select {
		case l.out <- loadItem{b: pipeline.Batch{Records: []pipeline.Record{barrier}}, t: t, barrier: true}:
		case <-ctx.Done():
			return ctx.Err()
		}

		t.remaining.Store(int64(len(jobs)))
		for _, j := range jobs {
			q.push(j)
		}
	}
	return nil
}

func keyList(shape *TableShape) string {
	names := make([]string, len(shape.Table.KeyIdx))
	for i, k := range shape.Table.KeyIdx {
		names[i] = quoteIdent(shape.Table.Columns[k].Name)
	}
	return strings.Join(names, ", ")
}

// boundaries walks the key index: each boundary is the key of every
// ChunkRows-th row, as SQL row literals and as ChunkReader cursors. The
// values are the database's own (their text form, compared back with the
// column types), never computed.
func (l *snapshotLoad) boundaries(ctx context.Context, conn *pgx.Conn, t *loadTable) ([]string, []snapshot.Cursor, error) {
	shape := t.shape
	if len(shape.Table.KeyIdx) == 0 {
		return nil, nil, nil
	}
	keys := keyList(shape)
	texts := make([]string, len(shape.Table.KeyIdx))
	for i, k := range shape.Table.KeyIdx {
		texts[i] = quoteIdent(shape.Table.Columns[k].Name) + "::text"
	}
	var out []string
	var cursors []snapshot.Cursor
	prev := ""
	for {
		where := ""
		if prev != "" {
			where = " WHERE (" + keys + ") > " + prev
		}
		sql := fmt.Sprintf("SELECT %s FROM %s%s ORDER BY %s LIMIT 1 OFFSET %d",
			strings.Join(texts, ", "), t.ref.quoted(), where, keys, l.s.opts.Snapshot.ChunkRows-1)
		vals := make([]string, len(texts))
		ptrs := make([]any, len(texts))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		err := conn.QueryRow(ctx, sql).Scan(ptrs...)
		if errors.Is(err, pgx.ErrNoRows) {
			return out, cursors, nil
		}
		if err != nil {
			return nil, nil, err
		}
		cur, err := json.Marshal(vals)
		if err != nil {
			return nil, nil, err
		}
		cursors = append(cursors, cur)
		lits := make([]string, len(vals))
		for i, v := range vals {
			esc, err := conn.PgConn().EscapeString(v)
			if err != nil {
				return nil, nil, err
			}
			lits[i] = "'" + esc + "'"
		}
		prev = "(" + strings.Join(lits, ", ") + ")"
		out = append(out, prev)
	}
}

// rangeJobs turns boundaries b1 < b2 < … (with their cursors) into ranges
// (-∞, b1], (b1, b2], …, (bn, +∞): each row falls in exactly one.
func rangeJobs(t *loadTable, keys string, bounds []string, cursors []snapshot.Cursor) []loadJob {
	if len(bounds) == 0 {
		return []loadJob{{t: t, rng: &snapshot.RangeProgress{}}}
	}
	jobs := make([]loadJob, 0, len(bounds)+1)
	for i := 0; i <= len(bounds); i++ {
		var conds []string
		if i > 0 {
			conds = append(conds, "("+keys+") > "+bounds[i-1])
		}
		if i < len(bounds) {
			conds = append(conds, "("+keys+") <= "+bounds[i])
		}
		rng := &snapshot.RangeProgress{}
		if i > 0 {
			rng.After = cursors[i-1]
		}
		if i < len(bounds) {
			rng.UpTo = cursors[i]
		}
		jobs = append(jobs, loadJob{t: t, where: strings.Join(conds, " AND "), rng: rng})
	}
	return jobs
}

// copyRange COPYs one range in text form and queues its rows.
func (l *snapshotLoad) copyRange(ctx context.Context, conn *pgx.Conn, job loadJob) error {
	t := job.t
	cols := make([]string, len(t.shape.Table.Columns))
	for i, c := range t.shape.Table.Columns {
		cols[i] = quoteIdent(c.Name)
	}
	sql := "COPY (SELECT " + strings.Join(cols, ", ") + " FROM " + t.ref.quoted()
	if job.where != "" {
		sql += " WHERE " + job.where
	}
	if len(t.shape.Table.KeyIdx) > 0 {
		sql += " ORDER BY " + keyList(t.shape)
	}
	sql += ") TO STDOUT"
	w := &copyWriter{ctx: ctx, l: l, t: t, rng: job.rng}
	if _, err := conn.PgConn().CopyTo(ctx, w, sql); err != nil {
		if w.err != nil {
			return w.err
		}
		return fmt.Errorf("copy %s: %w", tableName(t.ref), err)
	}
	if len(w.buf) > 0 {
		return fmt.Errorf("copy %s: output ends inside a row", tableName(t.ref))
	}
	if err := w.flush(true); err != nil {
		return err
	}
	if t.remaining.Add(-1) == 0 {
		t.finished.Store(true)
		t.total.Store(t.rows.Load())
		t.rowsTotal.Set(float64(t.rows.Load()))
		l.s.log.Info("table loaded", zap.String("table", tableName(t.ref)), zap.Int64("rows", t.rows.Load()))
	}
	return nil
}

// jobQueue is an unbounded FIFO of ranges: the planner never blocks on the
// workers, so a single reader can plan and then copy.
type jobQueue struct {
	mu     sync.Mutex
	cond   *sync.Cond
	items  []loadJob
	closed bool
}

func newJobQueue() *jobQueue {
	q := &jobQueue{}
	q.cond = sync.NewCond(&q.mu)
	return q
}

func (q *jobQueue) push(j loadJob) {
	q.mu.Lock()
	q.items = append(q.items, j)
	q.mu.Unlock()
	q.cond.Signal()
}

// close lets pop return false once the queue is drained.
func (q *jobQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.cond.Broadcast()
}

func (q *jobQueue) pop() (loadJob, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.items) == 0 && !q.closed {
		q.cond.Wait()
	}
	if len(q.items) == 0 {
		return loadJob{}, false
	}
	j := q.items[0]
	q.items = q.items[1:]
	return j, true
}
