package postgres

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
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
	snapshotDone    *prometheus.GaugeVec
	snapshotTotal   *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer, pipelineName string) (*metrics, error) {
	labels := prometheus.Labels{"pipeline": pipelineName}
	gauge := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "sluice", Subsystem: "postgres", Name: name, Help: help, ConstLabels: labels})
	}
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Namespace: "sluice", Subsystem: "postgres", Name: name, Help: help, ConstLabels: labels})
	}
	vec := func(name, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "sluice", Subsystem: "postgres", Name: name, Help: help, ConstLabels: labels}, []string{"table"})
	}
	m := &metrics{
		retainedWAL:     gauge("slot_retained_wal_bytes", "WAL the replication slot keeps on the server: current WAL position minus the slot's restart_lsn."),
		lagBytes:        gauge("lag_bytes", "Server WAL position minus the position the source has received."),
		lagSeconds:      gauge("lag_seconds", "Now minus the commit time of the last transaction (or heartbeat) handed to the pipeline."),
		connected:       gauge("replication_connected", "1 while the replication connection is up."),
		transactions:    counter("transactions_total", "Transactions handed to the pipeline."),
		rows:            counter("rows_total", "Data records (stream and snapshot) handed to the pipeline."),
		relationChanges: counter("relation_changes_total", "Schema changes seen in the stream (a table's new shape)."),
		reconnects:      counter("reconnects_total", "Replication connections re-established after a failure."),
		heartbeatErrors: counter("heartbeat_errors_total", "Heartbeat messages that could not be written."),
		snapshotDone:    vec("snapshot_rows_done", "Rows copied by the initial load, per table."),
		snapshotTotal:   vec("snapshot_rows_total", "Estimated rows of the initial load, per table."),
	}
	if reg == nil {
		return m, nil
	}
	var err error
	register := func(c prometheus.Collector) prometheus.Collector {
		if e := reg.Register(c); e != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(e, &are) {
				// A restarted source of the same pipeline keeps counting
				// in the series already exported.
				return are.ExistingCollector
			}
			err = errors.Join(err, e)
		}
		return c
	}
	m.retainedWAL = register(m.retainedWAL).(prometheus.Gauge)
	m.lagBytes = register(m.lagBytes).(prometheus.Gauge)
	m.lagSeconds = register(m.lagSeconds).(prometheus.Gauge)
	m.connected = register(m.connected).(prometheus.Gauge)
	m.transactions = register(m.transactions).(prometheus.Counter)
	m.rows = register(m.rows).(prometheus.Counter)
	m.relationChanges = register(m.relationChanges).(prometheus.Counter)
	m.reconnects = register(m.reconnects).(prometheus.Counter)
	m.heartbeatErrors = register(m.heartbeatErrors).(prometheus.Counter)
	m.snapshotDone = register(m.snapshotDone).(*prometheus.GaugeVec)
	m.snapshotTotal = register(m.snapshotTotal).(*prometheus.GaugeVec)
	return m, err
}

// snapshotGauges returns the rows-done and rows-total gauges of a table,
// reset for a new load.
func (m *metrics) snapshotGauges(table string) (done, total prometheus.Gauge) {
	done, total = m.snapshotDone.WithLabelValues(table), m.snapshotTotal.WithLabelValues(table)
	done.Set(0)
	total.Set(0)
	return done, total
}
