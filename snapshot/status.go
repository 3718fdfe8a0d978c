package snapshot

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-cdc/sluice/pipeline"
)

type metrics struct {
	rows    prometheus.Counter
	chunks  *prometheus.CounterVec
	errors  prometheus.Counter
	windows prometheus.Gauge
	tables  prometheus.Gauge
	// refetches: rows of changes marked Refetch queued for a repair.
	refetches prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		rows: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_snapshot_rows_total",
			Help: "Rows the incremental snapshot emitted (chunk rows no change touched in their window)."}),
		chunks: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_snapshot_chunks_total",
			Help: "Incremental snapshot chunks by outcome: emitted, or read again (redo_visibility, redo_schema)."}, []string{"outcome"}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_snapshot_errors_total",
			Help: "Incremental snapshot chunks or plans that failed and are retried."}),
		windows: prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_snapshot_windows_open",
			Help: "Incremental snapshot windows between their low and high watermark."}),
		tables: prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_snapshot_tables_pending",
			Help: "Tables whose incremental snapshot is requested or running."}),
		refetches: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_snapshot_refetched_changes_total",
			Help: "Rows queued to be read again because their change left values out (an insert from a session writing binlog_row_image MINIMAL or NOBLOB)."}),
	}
	if reg != nil {
		reg.MustRegister(m.rows, m.chunks, m.errors, m.windows, m.tables, m.refetches)
	}
	return m
}

// finishedTable is a table whose rows were all emitted in this run; its
// status says done once a checkpoint covers them.
type finishedTable struct {
	run    string
	status pipeline.TableStatus
}

// rate is a table's rows per second over the last minute or so.
type rate struct {
	since time.Time
	rows  int
	last  float64
}

func (r *rate) add(n int) {
	now := time.Now()
	if r.since.IsZero() {
		r.since = now
	}
	r.rows += n
	if d := now.Sub(r.since); d >= 10*time.Second {
		r.last = float64(r.rows) / d.Seconds()
		r.since, r.rows = now, 0
	}
}

func (r *rate) perSecond() float64 {
	if r.last == 0 && !r.since.IsZero() {
		if d := time.Since(r.since); d > time.Second {
			return float64(r.rows) / d.Seconds()
		}
	}
	return r.last
}

// rateOf is t's rate; e.mu is held.
func (e *Engine) rateOf(t *tableProgress) *rate {
	r := e.rates[t.Run]
	if r == nil {
		r = &rate{}
		e.rates[t.Run] = r
	}
	return r
}

// Status is the source's status with every incremental snapshot's
// progress: the tables in progress, then those finished in this run.
func (e *Engine) Status() pipeline.SourceStatus {
	var st pipeline.SourceStatus
	if sr, ok := e.src.(pipeline.StatusReporter); ok {
		st = sr.Status()
	}
	for _, id := range e.Backfilling() {
		st.Backfilling = append(st.Backfilling, id.String())
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.prog == nil {
		return st
	}
	for _, t := range e.prog.Tables {
		ts := pipeline.TableStatus{Table: t.id().String(), RowsDone: t.Rows, RowsTotal: max(t.Estimate, t.Rows),
			Incremental: true, Chunks: t.Chunks, Where: t.label(), ReadingAgain: t.again}
		if r := e.rates[t.Run]; r != nil {
			ts.RowsPerSecond = r.perSecond()
			if left := ts.RowsTotal - ts.RowsDone; ts.RowsPerSecond > 0 && left > 0 {
				ts.ETASeconds = float64(left) / ts.RowsPerSecond
			}
		}
		st.Tables = append(st.Tables, ts)
	}
	for _, f := range e.finished {
		st.Tables = append(st.Tables, f.status)
	}
	switch {
	case e.lastErr != nil && len(e.prog.Tables) > 0:
		st.SnapshotError = e.lastErr.Error()
	case e.refused != nil:
		st.SnapshotError = e.refused.Error()
	}
	return st
}

// Stats counts the chunks of this run.
type Stats struct {
	Chunks    int64 // emitted
	Cut       int64 // emitted chunks that stopped at MaxChunkBytes before their row limit
	Redone    int64 // read again (visibility or schema)
	Refetched int64 // keys read again after an unchanged value in their window
	Repaired  int64 // keys of repair requests read again
	Rewrites  int64 // tables queued again after a rewrite (pipeline.OpRewrite)
	Refetches int64 // rows queued for a repair by changes marked Refetch (Invariant 13)
	Sweeps    int64 // re-read tables swept of the rows the read did not find (Invariant 14)
}

// Stats returns the counts of this run.
func (e *Engine) Stats() Stats {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.stats
}
