package postgres

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/sources/internal/giveway"
)

// giveWayAfter is how long another session may wait for a lock the
// initial load's transactions hold before the load gives way (a var for
// tests). The MySQL load waits as long for a metadata lock (its
// lockWaitSeconds): the two sources give way alike.
var giveWayAfter = 10 * time.Second

// blockedByLoad lists the sessions waiting for a table lock the load's
// readers hold: an ALTER TABLE, TRUNCATE, DROP, VACUUM FULL or LOCK TABLE
// (the ACCESS EXCLUSIVE statements, the only ones ACCESS SHARE conflicts
// with). pg_locks and pg_blocking_pids need no privilege; the statement
// text of another role's session reads "<insufficient privilege>" unless
// the source's role may read all statistics.
const blockedByLoad = `SELECT w.pid, w.mode, coalesce(w.relation::regclass::text, ''), coalesce(a.query, '')
FROM pg_locks w LEFT JOIN pg_stat_activity a ON a.pid = w.pid
WHERE NOT w.granted AND w.locktype = 'relation' AND pg_blocking_pids(w.pid) && $1::int[]`

// waiter is a session waiting for one of the load's locks.
type waiter struct {
	pid         int32
	mode, table string
	query       string
}

// GiveWayError is the initial load failing so that a statement waiting
// for its locks goes on.
type GiveWayError struct {
	Waited time.Duration
	PID    int32
	Mode   string
	Table  string
	Query  string
}

func (e *GiveWayError) Error() string {
	return fmt.Sprintf("gave way to session %d, which waited %s for an %s lock on %s (%q): the load's transactions hold "+
		"ACCESS SHARE locks on the captured tables until it ends, and every later statement on the table queues behind the waiting one",
		e.PID, e.Waited.Round(time.Second), e.Mode, e.Table, e.Query)
}

// watchWaiters watches the sessions blocked by the load's readers (pids)
// until ctx ends (package giveway), and returns a *GiveWayError (marked
// pipeline.Restart) once one has waited giveWayAfter; nil when ctx ends.
// Nothing else ends the readers' transactions before the whole load is
// read, and an application whose migration waits behind them has the
// table locked for as long.
func (l *snapshotLoad) watchWaiters(ctx context.Context, pids []int32) error {
	warned := false
	w, waited, ok := giveway.Watch(ctx, giveWayAfter,
		func(ctx context.Context) ([]*waiter, error) { return l.waiters(ctx, pids) },
		func(w *waiter) int32 { return w.pid },
		func(w *waiter) {
			l.s.log.Info("initial load: a session waits for the load's locks", zap.Int32("pid", w.pid),
				zap.String("mode", w.mode), zap.String("table", w.table), zap.String("query", w.query),
				zap.Duration("gives_way_after", giveWayAfter))
		},
		func(err error) {
			if !warned {
				l.s.log.Warn("initial load: cannot list the sessions waiting for the load's locks; retrying", zap.Error(err))
				warned = true
			}
		})
	if !ok {
		return nil
	}
	return pipeline.Restart(&GiveWayError{Waited: waited, PID: w.pid, Mode: w.mode, Table: w.table, Query: w.query})
}

// waiters runs blockedByLoad, one row per waiting session.
func (l *snapshotLoad) waiters(ctx context.Context, pids []int32) ([]*waiter, error) {
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	rows, err := l.s.pool.Query(qctx, blockedByLoad, pids)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	byPID := map[int32]*waiter{}
	var out []*waiter
	for rows.Next() {
		w := &waiter{}
		if err := rows.Scan(&w.pid, &w.mode, &w.table, &w.query); err != nil {
			return nil, err
		}
		if byPID[w.pid] == nil {
			byPID[w.pid] = w
			out = append(out, w)
		}
	}
	return out, rows.Err()
}
