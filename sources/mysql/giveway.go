package mysql

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"go.uber.org/zap"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/sources/internal/giveway"
)

// giveWayAfter is how long a session may wait for a metadata lock on a
// table the initial load is reading before the load gives way (a var for
// tests): as long as the load's own statements wait for one
// (lockWaitSeconds).
var giveWayAfter = lockWaitSeconds * time.Second

// waitingForMDL lists the sessions waiting for a metadata lock. Without
// the PROCESS privilege the server shows only the source user's own.
const waitingForMDL = "SELECT ID, IFNULL(INFO, '') FROM information_schema.PROCESSLIST " +
	"WHERE STATE = 'Waiting for table metadata lock' AND ID <> CONNECTION_ID()"

// GiveWayError is the initial load failing so that a statement waiting
// for its metadata locks goes on.
type GiveWayError struct {
	Waited time.Duration
	ID     uint64
	Query  string
}

func (e *GiveWayError) Error() string {
	return fmt.Sprintf("gave way to connection %d, which waited %s for a metadata lock (%q): the load's transactions hold "+
		"metadata locks on the tables they read until it ends, and every later statement on the table queues behind the waiting one; "+
		"started again, the pipeline resumes the load from its checkpoint and reads the rest in chunks",
		e.ID, e.Waited.Round(time.Second), e.Query)
}

// watchWaiters watches the sessions waiting for a metadata lock on a
// table of the load until ctx ends (package giveway), and returns a
// *GiveWayError (marked pipeline.Restart) once one has waited
// giveWayAfter; nil when ctx ends. own holds the load's connection ids:
// they wait for a schema change ahead of them in the queue, and are not
// what the load gives way to.
//
// The load's own statements give way by their lock wait (gaveWay), but a
// load that stands still (its batches not read: a sink slow or down)
// issues none, and its readers keep their locks, so an ALTER of a table
// they read would hold up the table's every statement for as long. A
// waiting statement is the load's when it names one of the load's tables
// (the server tells which lock a session waits for only through
// performance_schema, often off on MariaDB); another one costs a restart
// that resumes in chunks, never data.
func (l *snapshotLoad) watchWaiters(ctx context.Context, own map[uint64]bool) error {
	c, err := l.s.connect(ctx)
	if err != nil {
		l.s.log.Warn("initial load: cannot watch for sessions waiting for the load's locks", zap.Error(err))
		return nil
	}
	defer c.Close()
	if !seesEverySession(c) {
		l.s.log.Warn("initial load: without the PROCESS privilege the load sees only its own user's sessions, so a schema change " +
			"by another user waits for the load's metadata locks while the load stands still (a sink slow or down); " +
			"GRANT PROCESS ON *.* TO the source's user")
	}
	names := make([]*regexp.Regexp, len(l.tables))
	for i, t := range l.tables {
		names[i] = regexp.MustCompile(`(?i)(^|[^0-9a-z_$])` + regexp.QuoteMeta(t.name.table) + `($|[^0-9a-z_$])`)
	}
	warned := false
	w, waited, ok := giveway.Watch(ctx, giveWayAfter,
		func(context.Context) ([]mdlWaiter, error) {
			r, err := c.Execute(waitingForMDL)
			if err != nil {
				return nil, err
			}
			defer r.Close()
			var out []mdlWaiter
			for i := range r.Values {
				id, _ := r.GetUint(i, 0)
				query, _ := getString(r, i, 1)
				if !own[id] && namesOneOf(query, names) {
					out = append(out, mdlWaiter{id: id, query: query})
				}
			}
			return out, nil
		},
		func(w mdlWaiter) uint64 { return w.id },
		func(w mdlWaiter) {
			l.s.log.Info("initial load: a session waits for a metadata lock on a table the load reads", zap.Uint64("id", w.id),
				zap.String("query", w.query), zap.Duration("gives_way_after", giveWayAfter))
		},
		func(err error) {
			if !warned {
				l.s.log.Warn("initial load: cannot list the sessions waiting for metadata locks; retrying", zap.Error(err))
				warned = true
			}
		})
	if !ok {
		return nil
	}
	return pipeline.Restart(&GiveWayError{Waited: waited, ID: w.id, Query: w.query})
}

// mdlWaiter is a session waiting for a metadata lock.
type mdlWaiter struct {
	id    uint64
	query string
}

// seesEverySession reports whether the user holds PROCESS, which shows
// other users' sessions in the process list.
func seesEverySession(c *client.Conn) bool {
	r, err := c.Execute("SHOW GRANTS")
	if err != nil {
		return false
	}
	defer r.Close()
	for i := range r.Values {
		g, _ := getString(r, i, 0)
		g = strings.ToUpper(g)
		if strings.Contains(g, " ON *.* ") && (strings.Contains(g, "ALL PRIVILEGES") || strings.Contains(g, "PROCESS")) {
			return true
		}
	}
	return false
}

func namesOneOf(query string, names []*regexp.Regexp) bool {
	for _, re := range names {
		if re.MatchString(query) {
			return true
		}
	}
	return false
}
