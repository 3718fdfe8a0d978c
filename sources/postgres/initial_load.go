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
	"github.com/sluice-cdc/sluice/sources/internal/rangequeue"
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
// collations follow the index), and each range is read in key order in the
// result formats of the chunk reads (rowScanner), so snapshot values equal
// stream values. Ranges are queued as the walk finds their upper
// boundaries, so the other readers read while the first one plans.
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
// snapshot). The readers' locks last until the load ends; a session that
// waits giveWayAfter for one makes the load give way (giveway.go).
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
	q := rangequeue.New[loadJob]()
	stop := context.AfterFunc(ctx, q.Close)
	defer stop()
	var wg sync.WaitGroup
	errs := make(chan error, len(conns)+1)
	// The watcher gives way to a statement waiting for the readers' locks
	// (giveway.go); it stops once the readers are done.
	watchCtx, stopWatch := context.WithCancel(ctx)
	watched := make(chan struct{})
	pids := make([]int32, len(conns))
	for i, c := range conns {
		pids[i] = int32(c.PgConn().PID())
	}
	go func() {
		defer close(watched)
		if err := l.watchWaiters(watchCtx, pids); err != nil {
			errs <- err
			cancel()
		}
	}()
	work := func(conn *pgx.Conn) {
		for {
			job, ok := q.Pop()
			if !ok {
				return
			}
			if err := l.readRange(ctx, conn, job); err != nil {
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
		q.Close()
		work(conns[0])
	}()
	wg.Wait()
	stopWatch()
	<-watched
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
// returned; ok false once the load is done, and when a started table has
// no key to order chunks by. A table's ranges cover it whole from before
// its barrier is queued (planAll's tail), so a state taken while the key
// index is walked is complete.
func (l *snapshotLoad) state() (st snapshot.LoadState, ok bool) {
	if l.done.Load() {
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

// planAll reads each table's shape, queues its truncate barrier and then
// its ranges, each as soon as the walk of the key index finds its upper
// boundary: the other readers read the first ranges while this one walks.
// The part of the table above the last boundary found is one range whose
// lower end follows the walk (the tail), read last, so the table's ranges
// cover it whole at every moment: a checkpoint taken mid-walk never counts
// as read a row no range still holds (Invariant 1).
func (l *snapshotLoad) planAll(ctx context.Context, conn *pgx.Conn, q *rangequeue.Queue[loadJob]) error {
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
		t.total.Store(est)
		t.rowsTotal.Set(float64(est))
		tail := &snapshot.RangeProgress{}
		t.ranges = []*snapshot.RangeProgress{tail} // before the barrier: see state
		t.remaining.Store(1)                       // the tail, queued last
		l.tablesMu.Lock()
		l.tables = append(l.tables, t)
		l.tablesMu.Unlock()

		barrier := pipeline.Record{Op: pipeline.OpTruncate, Table: shape.Table, EventTime: l.start,
			Version: snapshotVersion(l.s.gen, l.cp, barrierIndex), Snapshot: true}
		barrier.Size = pipeline.EstimateSize(&barrier)
		select {
		case l.out <- loadItem{b: pipeline.Batch{Records: []pipeline.Record{barrier}}, t: t, barrier: true}:
		case <-ctx.Done():
			return ctx.Err()
		}

		// Ranges (-∞, b1], (b1, b2], …, (bn, +∞): each row falls in
		// exactly one.
		keys := keyList(shape)
		prev, bounds := "", 0
		var prevCur snapshot.Cursor
		err = l.boundaries(ctx, conn, t, func(lit string, cur snapshot.Cursor) {
			where := "(" + keys + ") <= " + lit
			if prev != "" {
				where = "(" + keys + ") > " + prev + " AND " + where
			}
			rng := &snapshot.RangeProgress{After: prevCur, UpTo: cur}
			l.handedMu.Lock()
			t.ranges = append(t.ranges, rng)
			tail.After = cur
			l.handedMu.Unlock()
			t.remaining.Add(1)
			q.Push(loadJob{t: t, where: where, rng: rng})
			prev, prevCur = lit, cur
			bounds++
		})
		if err != nil {
			return fmt.Errorf("split %s into key ranges: %w", tableName(ref), err)
		}
		where := ""
		if prev != "" {
			where = "(" + keys + ") > " + prev
		}
		t.total.Store(max(est, int64(bounds)*int64(l.s.opts.Snapshot.ChunkRows)))
		t.rowsTotal.Set(float64(t.total.Load()))
		q.Push(loadJob{t: t, where: where, rng: tail})
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

// boundaries walks the key index and calls found with the key of every
// ChunkRows-th row, as an SQL row literal and as a ChunkReader cursor, in
// key order. The values are the database's own (their text form, compared
// back with the column types), never computed.
func (l *snapshotLoad) boundaries(ctx context.Context, conn *pgx.Conn, t *loadTable, found func(lit string, cur snapshot.Cursor)) error {
	shape := t.shape
	if len(shape.Table.KeyIdx) == 0 {
		return nil
	}
	// The keys themselves are selected (printed in the text result
	// format): ORDER BY names an output column first, and a key cast to
	// text in the select list would order the walk by its text.
	keys := keyList(shape)
	prev := ""
	for {
		where := ""
		if prev != "" {
			where = " WHERE (" + keys + ") > " + prev
		}
		sql := fmt.Sprintf("SELECT %s FROM %s%s ORDER BY %s LIMIT 1 OFFSET %d",
			keys, t.ref.quoted(), where, keys, l.s.opts.Snapshot.ChunkRows-1)
		res := conn.PgConn().ExecParams(ctx, sql, nil, nil, nil, nil).Read()
		if res.Err != nil {
			return res.Err
		}
		if len(res.Rows) == 0 {
			return nil
		}
		vals := make([]string, len(res.Rows[0]))
		for i, v := range res.Rows[0] {
			vals[i] = string(v)
		}
		cur, err := json.Marshal(vals)
		if err != nil {
			return err
		}
		lits := make([]string, len(vals))
		for i, v := range vals {
			esc, err := conn.PgConn().EscapeString(v)
			if err != nil {
				return err
			}
			lits[i] = "'" + esc + "'"
		}
		prev = "(" + strings.Join(lits, ", ") + ")"
		found(prev, cur)
	}
}
