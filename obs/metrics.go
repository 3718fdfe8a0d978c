package obs

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Stage label values of sluice_records_total, sluice_batch_duration_seconds
// and sluice_dead_letters_total; sinks use SinkStage.
const (
	StageSource    = "source"
	StageTransform = "transform"
)

// SinkStage returns the stage label of the sink named name: "sink:<name>".
func SinkStage(name string) string { return "sink:" + name }

// Metrics holds one pipeline's metrics.
//
// Invariant 9: every condition that risks loss or delay — backpressure
// (in-flight), retries, dead letters, checkpoint age, source lag, end-to-end
// latency — has a series here. Every series carries the constant
// label pipeline=<name>, so several pipelines can share one registry. The
// runtime updates the exported collectors directly; the methods cover the
// updates that need more than one call. All are safe for concurrent use.
type Metrics struct {
	Pipeline string

	// Records counts records leaving each stage, by stage ("source",
	// "transform", "sink:<name>"): sluice_records_total.
	Records *prometheus.CounterVec
	// BatchDuration times one batch through a stage, by stage:
	// sluice_batch_duration_seconds.
	BatchDuration *prometheus.HistogramVec
	// InFlightRecords and InFlightBytes are what the in-flight cap holds
	// (Invariant 6): sluice_in_flight_records, sluice_in_flight_bytes.
	InFlightRecords prometheus.Gauge
	InFlightBytes   prometheus.Gauge
	// CheckpointCommitDuration times OffsetStore.Commit:
	// sluice_checkpoint_commit_duration_seconds.
	CheckpointCommitDuration prometheus.Histogram
	// CheckpointCommits counts successful commits:
	// sluice_checkpoint_commits_total.
	CheckpointCommits prometheus.Counter
	// SinkRetries counts retried sink writes, by sink name:
	// sluice_sink_retries_total.
	SinkRetries *prometheus.CounterVec
	// SinkBatchLimit is how many records a sink's next write may hold,
	// the lane's adaptive size, by sink: sluice_sink_batch_limit_records.
	SinkBatchLimit *prometheus.GaugeVec
	// SinkSplits counts writes split after a timeout, a too-large refusal
	// or a panic, by sink: sluice_sink_write_splits_total.
	SinkSplits *prometheus.CounterVec
	// SinkQuarantinedTables is how many tables a sink refused permanently
	// and holds in quarantine, by sink: sluice_sink_quarantined_tables.
	SinkQuarantinedTables *prometheus.GaugeVec
	// DeadLetters counts records sent to the DLQ, by stage (Invariant 7):
	// sluice_dead_letters_total.
	DeadLetters *prometheus.CounterVec
	// EndToEndLatency is the time from the source commit to durability in
	// every sink, fed by data and heartbeats alike (Invariant 8):
	// sluice_end_to_end_latency_seconds.
	EndToEndLatency prometheus.Histogram
	// SourceLagBytes and SourceLagSeconds are how far the source is behind
	// the database's log end: sluice_source_lag_bytes,
	// sluice_source_lag_seconds.
	SourceLagBytes   prometheus.Gauge
	SourceLagSeconds prometheus.Gauge

	created      time.Time
	lastCommit   atomic.Int64 // UnixNano; 0 before the first commit
	checkpointFn atomic.Pointer[func() time.Duration]
}

// NewMetrics creates the metrics of pipeline and registers them with reg
// (none when reg is nil). Registering the same pipeline twice on one
// registry panics, as prometheus.MustRegister does.
//
// sluice_checkpoint_age_seconds is a function gauge: by default the time
// since the last ObserveCheckpointCommit, or since NewMetrics before the
// first commit (so a pipeline that never commits still alerts);
// SetCheckpointAgeFunc replaces it.
func NewMetrics(reg prometheus.Registerer, pipeline string) *Metrics {
	cl := prometheus.Labels{"pipeline": pipeline}
	m := &Metrics{
		Pipeline: pipeline,
		Records: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_records_total", Help: "Records leaving each stage.", ConstLabels: cl,
		}, []string{"stage"}),
		BatchDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "sluice_batch_duration_seconds", Help: "Time to process one batch in a stage.", ConstLabels: cl,
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}, []string{"stage"}),
		InFlightRecords: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_in_flight_records", Help: "Records read but not yet durable in every sink.", ConstLabels: cl,
		}),
		InFlightBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_in_flight_bytes", Help: "Estimated bytes of records read but not yet durable in every sink.", ConstLabels: cl,
		}),
		CheckpointCommitDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "sluice_checkpoint_commit_duration_seconds", Help: "Time to commit one checkpoint.", ConstLabels: cl,
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}),
		CheckpointCommits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_checkpoint_commits_total", Help: "Checkpoints committed.", ConstLabels: cl,
		}),
		SinkRetries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_sink_retries_total", Help: "Sink writes retried after an error.", ConstLabels: cl,
		}, []string{"sink"}),
		SinkBatchLimit: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_sink_batch_limit_records", Help: "Records a sink's next write may hold (adaptive).", ConstLabels: cl,
		}, []string{"sink"}),
		SinkSplits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_sink_write_splits_total", Help: "Sink writes split after a timeout, a too-large refusal or a panic.", ConstLabels: cl,
		}, []string{"sink"}),
		SinkQuarantinedTables: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_sink_quarantined_tables", Help: "Tables a sink refused permanently; their records go to the dead-letter queue.", ConstLabels: cl,
		}, []string{"sink"}),
		DeadLetters: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_dead_letters_total", Help: "Records sent to the dead-letter queue.", ConstLabels: cl,
		}, []string{"stage"}),
		EndToEndLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "sluice_end_to_end_latency_seconds", Help: "Time from the source commit to durability in every sink.", ConstLabels: cl,
			Buckets: prometheus.ExponentialBuckets(0.01, 2.5, 14),
		}),
		SourceLagBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_source_lag_bytes", Help: "Bytes of database log the source has not read yet.", ConstLabels: cl,
		}),
		SourceLagSeconds: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_source_lag_seconds", Help: "Age of the last change the source handed over.", ConstLabels: cl,
		}),
		created: time.Now(),
	}
	age := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "sluice_checkpoint_age_seconds", Help: "Time since the last checkpoint commit.", ConstLabels: cl,
	}, func() float64 { return m.CheckpointAge().Seconds() })
	if reg != nil {
		reg.MustRegister(m.Records, m.BatchDuration, m.InFlightRecords, m.InFlightBytes,
			m.CheckpointCommitDuration, m.CheckpointCommits, age, m.SinkRetries, m.SinkBatchLimit, m.SinkSplits, m.SinkQuarantinedTables, m.DeadLetters,
			m.EndToEndLatency, m.SourceLagBytes, m.SourceLagSeconds)
	}
	return m
}

// ObserveBatch counts n records leaving stage and times the batch.
func (m *Metrics) ObserveBatch(stage string, n int, d time.Duration) {
	m.Records.WithLabelValues(stage).Add(float64(n))
	m.BatchDuration.WithLabelValues(stage).Observe(d.Seconds())
}

// ObserveCheckpointCommit records a successful commit that took d and
// restarts the checkpoint age.
func (m *Metrics) ObserveCheckpointCommit(d time.Duration) {
	m.CheckpointCommitDuration.Observe(d.Seconds())
	m.CheckpointCommits.Inc()
	m.lastCommit.Store(time.Now().UnixNano())
}

// SetCheckpointAgeFunc makes sluice_checkpoint_age_seconds report fn()
// instead of the time since the last ObserveCheckpointCommit. fn must be
// cheap and safe to call from the scrape goroutine.
func (m *Metrics) SetCheckpointAgeFunc(fn func() time.Duration) {
	m.checkpointFn.Store(&fn)
}

// CheckpointAge returns what sluice_checkpoint_age_seconds reports.
func (m *Metrics) CheckpointAge() time.Duration {
	if fn := m.checkpointFn.Load(); fn != nil && *fn != nil {
		return (*fn)()
	}
	since := m.created
	if t := m.lastCommit.Load(); t != 0 {
		since = time.Unix(0, t)
	}
	return time.Since(since)
}

// ObserveEndToEnd records the latency of a record or heartbeat whose source
// commit time was sourceCommit and which just became durable in every sink.
// Zero times are ignored.
func (m *Metrics) ObserveEndToEnd(sourceCommit time.Time) {
	if sourceCommit.IsZero() {
		return
	}
	d := time.Since(sourceCommit)
	if d < 0 {
		d = 0
	}
	m.EndToEndLatency.Observe(d.Seconds())
}

// SetInFlight sets the in-flight gauges.
func (m *Metrics) SetInFlight(records, bytes int64) {
	m.InFlightRecords.Set(float64(records))
	m.InFlightBytes.Set(float64(bytes))
}

// SetSourceLag sets the source lag gauges.
func (m *Metrics) SetSourceLag(bytes int64, d time.Duration) {
	m.SourceLagBytes.Set(float64(bytes))
	m.SourceLagSeconds.Set(d.Seconds())
}
