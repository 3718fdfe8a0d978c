package daemon

import (
	"time"

	"github.com/sluice-cdc/sluice/obs"
	"github.com/sluice-cdc/sluice/pipeline"
)

// metricsObserver feeds the runtime's measurements into Prometheus.
type metricsObserver struct{ m *obs.Metrics }

var _ pipeline.Observer = metricsObserver{}

func (o metricsObserver) Records(stage string, n int) {
	o.m.Records.WithLabelValues(stage).Add(float64(n))
}

func (o metricsObserver) BatchDuration(stage string, d time.Duration) {
	o.m.BatchDuration.WithLabelValues(stage).Observe(d.Seconds())
}

func (o metricsObserver) InFlight(records int, bytes int64) { o.m.SetInFlight(int64(records), bytes) }

func (o metricsObserver) CheckpointCommitted(took time.Duration, _ time.Time, _ uint64) {
	o.m.ObserveCheckpointCommit(took)
}

func (o metricsObserver) SinkRetry(sink string) { o.m.SinkRetries.WithLabelValues(sink).Inc() }

func (o metricsObserver) SinkBatchLimit(sink string, n int) {
	o.m.SinkBatchLimit.WithLabelValues(sink).Set(float64(n))
}

func (o metricsObserver) SinkSplit(sink string) { o.m.SinkSplits.WithLabelValues(sink).Inc() }

func (o metricsObserver) SinkQuarantined(sink string, tables int) {
	o.m.SinkQuarantinedTables.WithLabelValues(sink).Set(float64(tables))
}

func (o metricsObserver) DeadLetters(stage string, n int) {
	o.m.DeadLetters.WithLabelValues(stage).Add(float64(n))
}

func (o metricsObserver) EndToEnd(d time.Duration) {
	if d < 0 {
		d = 0
	}
	o.m.EndToEndLatency.Observe(d.Seconds())
}
