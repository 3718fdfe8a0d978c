package snapshot

import (
	"go.uber.org/zap"

	"github.com/sluice-cdc/sluice/pipeline"
)

// missedSource is a source that can say, once open, which captured tables
// its log may lack changes of for a while before this start: changes made
// while the pipeline was stopped that the log will never deliver
// (Postgres: a publication that left the tables, or some operations, out
// until Open put it back).
type missedSource interface {
	// Missed returns those tables. It does not block, and is called once,
	// after Open returned, before any Read.
	Missed() []pipeline.TableID
}

// readMissed queues a new snapshot of each table the source missed changes
// of, unless one of it is on its way already (a table new to the
// pipeline): the rows the sinks hold may be stale, and only a read brings
// them level. With IgnoreAdded (snapshot mode never) the log names the
// tables instead.
func (e *Engine) readMissed() {
	m, ok := e.src.(missedSource)
	if !ok {
		return
	}
	missed := m.Missed()
	if len(missed) == 0 {
		return
	}
	if e.opts.IgnoreAdded {
		e.log.Warn("changes of these tables were not sent while the pipeline was stopped; with snapshot mode never the sinks keep "+
			"them as they were: run sluice snapshot --table for each", zap.Stringers("tables", missed))
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, id := range missed {
		n := len(e.prog.Tables)
		if _, err := e.queue(id, "", false); err != nil {
			e.log.Warn("changes of a table were not sent while the pipeline was stopped, but it cannot be read again",
				zap.String("table", id.String()), zap.Error(err))
			continue
		}
		if len(e.prog.Tables) == n {
			continue // a snapshot of it is on its way (a table new to the pipeline)
		}
		e.log.Warn("changes of a table were not sent while the pipeline was stopped: reading it again", zap.String("table", id.String()))
	}
}
