package postgres

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-cdc/sluice/obs"
)

// metrics are the source's Prometheus series, labelled with the pipeline.
// Every condition that risks loss or delay is one of them (Invariant 9):
// retained WAL and lag grow when the pipeline falls behind or stops acking.
type metrics struct {
	retainedWAL     prometheus.Gauge
	lagBytes        prometheus.Gauge
	lagSeconds      prometheus.Gauge
	connected       prometheus.Gauge
	transactions    prometheus.Counter
	rows            prometheus.Counter
	relationChanges prometheus.Counter
	reconnects      prometheus.Counter
	heartbeatErrors prometheus.Counter
	leftOut         prometheus.Counter
	tablesGone      prometheus.Gauge
	snapshotDone    *prometheus.GaugeVec
	snapshotTotal   *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer, pipelineName string) (*metrics, error) {
	c := obs.NewCollectors(reg, "postgres", pipelineName)
	m := &metrics{
		retainedWAL:     c.Gauge("slot_retained_wal_bytes", "WAL the replication slot keeps on the server: current WAL position minus the slot's restart_lsn."),
		lagBytes:        c.Gauge("lag_bytes", "Server WAL position minus the position the source has received."),
		lagSeconds:      c.Gauge("lag_seconds", "Now minus the commit time of the last transaction (or heartbeat) handed to the pipeline."),
		connected:       c.Gauge("replication_connected", "1 while the replication connection is up."),
		transactions:    c.Counter("transactions_total", "Transactions handed to the pipeline."),
		rows:            c.Counter("rows_total", "Data records (stream and snapshot) handed to the pipeline."),
		relationChanges: c.Counter("relation_changes_total", "Schema changes seen in the stream (a table's new shape)."),
		reconnects:      c.Counter("reconnects_total", "Replication connections re-established after a failure."),
		heartbeatErrors: c.Counter("heartbeat_errors_total", "Heartbeat messages that could not be written."),
		leftOut: c.Counter("uncaptured_changes_total", "Changes the publication sent of tables the pipeline does not capture "+
			"(a captured table renamed, a table added to the publication by hand), left out."),
		tablesGone: c.Gauge("captured_tables_gone", "Captured tables that no longer exist (dropped, or renamed away): "+
			"a table created again under the name is read."),
		snapshotDone:  c.GaugeVec("snapshot_rows_done", "Rows copied by the initial load, per table.", "table"),
		snapshotTotal: c.GaugeVec("snapshot_rows_total", "Estimated rows of the initial load, per table.", "table"),
	}
	return m, c.Err()
}

// snapshotGauges returns the rows-done and rows-total gauges of a table,
// reset for a new load.
func (m *metrics) snapshotGauges(table string) (done, total prometheus.Gauge) {
	done, total = m.snapshotDone.WithLabelValues(table), m.snapshotTotal.WithLabelValues(table)
	done.Set(0)
	total.Set(0)
	return done, total
}
