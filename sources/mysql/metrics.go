package mysql

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
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
	labels := prometheus.Labels{"pipeline": pipelineName}
	gauge := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "sluice", Subsystem: "mysql", Name: name, Help: help, ConstLabels: labels})
	}
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Namespace: "sluice", Subsystem: "mysql", Name: name, Help: help, ConstLabels: labels})
	}
	vec := func(name, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "sluice", Subsystem: "mysql", Name: name, Help: help, ConstLabels: labels}, []string{"table"})
	}
	m := &metrics{
		lagBytes:      gauge("lag_bytes", "Binlog bytes between the server's current position and the last transaction the source received."),
		lagSeconds:    gauge("lag_seconds", "Now minus the commit time of the last transaction handed to the pipeline."),
		connected:     gauge("binlog_connected", "1 while the binlog connection is up."),
		transactions:  counter("transactions_total", "Transactions handed to the pipeline."),
		rows:          counter("rows_total", "Data records (stream and snapshot) handed to the pipeline."),
		ddl:           counter("ddl_total", "Statements in the binlog that change tables (ALTER, CREATE, DROP, RENAME, TRUNCATE)."),
		schemaChanges: counter("schema_changes_total", "New shapes of captured tables seen in the binlog."),
		reconnects:    counter("reconnects_total", "Binlog connections re-established after a failure."),
		snapshotDone:  vec("snapshot_rows_done", "Rows copied by the initial load, per table."),
		snapshotTotal: vec("snapshot_rows_total", "Estimated rows of the initial load, per table."),
	}
	if reg == nil {
		return m, nil
	}
	var err error
	register := func(c prometheus.Collector) prometheus.Collector {
		if e := reg.Register(c); e != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(e, &are) {
				return are.ExistingCollector // a restarted source keeps counting in the same series
			}
			err = errors.Join(err, e)
		}
		return c
	}
	m.lagBytes = register(m.lagBytes).(prometheus.Gauge)
	m.lagSeconds = register(m.lagSeconds).(prometheus.Gauge)
	m.connected = register(m.connected).(prometheus.Gauge)
	m.transactions = register(m.transactions).(prometheus.Counter)
	m.rows = register(m.rows).(prometheus.Counter)
	m.ddl = register(m.ddl).(prometheus.Counter)
	m.schemaChanges = register(m.schemaChanges).(prometheus.Counter)
	m.reconnects = register(m.reconnects).(prometheus.Counter)
	m.snapshotDone = register(m.snapshotDone).(*prometheus.GaugeVec)
	m.snapshotTotal = register(m.snapshotTotal).(*prometheus.GaugeVec)
	return m, err
}
