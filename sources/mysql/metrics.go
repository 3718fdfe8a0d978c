package mysql

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-cdc/sluice/obs"
)

// metrics are the source's Prometheus series, labelled with the pipeline.
// Every condition that risks loss or delay is one of them (Invariant 9):
// the lag grows when the pipeline falls behind, and a purged binlog stops
// the source with an error instead of a gap.
type metrics struct {
	lagBytes      prometheus.Gauge
	lagSeconds    prometheus.Gauge
	connected     prometheus.Gauge
	transactions  prometheus.Counter
	rows          prometheus.Counter
	ddl           prometheus.Counter
	schemaChanges prometheus.Counter
	reconnects    prometheus.Counter
	snapshotDone  *prometheus.GaugeVec
	snapshotTotal *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer, pipelineName string) (*metrics, error) {
	c := obs.NewCollectors(reg, "mysql", pipelineName)
	m := &metrics{
		lagBytes:      c.Gauge("lag_bytes", "Binlog bytes between the server's current position and the last transaction the source received."),
		lagSeconds:    c.Gauge("lag_seconds", "Now minus the commit time of the last transaction handed to the pipeline."),
		connected:     c.Gauge("binlog_connected", "1 while the binlog connection is up."),
		transactions:  c.Counter("transactions_total", "Transactions handed to the pipeline."),
		rows:          c.Counter("rows_total", "Data records (stream and snapshot) handed to the pipeline."),
		ddl:           c.Counter("ddl_total", "Statements in the binlog that change tables (ALTER, CREATE, DROP, RENAME, TRUNCATE)."),
		schemaChanges: c.Counter("schema_changes_total", "New shapes of captured tables seen in the binlog."),
		reconnects:    c.Counter("reconnects_total", "Binlog connections re-established after a failure."),
		snapshotDone:  c.GaugeVec("snapshot_rows_done", "Rows copied by the initial load, per table.", "table"),
		snapshotTotal: c.GaugeVec("snapshot_rows_total", "Estimated rows of the initial load, per table.", "table"),
	}
	return m, c.Err()
}
