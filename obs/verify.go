package obs

import "github.com/prometheus/client_golang/prometheus"

// VerifyMetrics are continuous verification's counts (verify.Sampler's
// SampleObserver).
type VerifyMetrics struct {
	// Checked counts keys compared with a sink and found equal, by sink
	// and table: sluice_verify_checked_total.
	checked *prometheus.CounterVec
	// Mismatches counts keys that differ in a sink, by sink and table:
	// sluice_verify_mismatches_total.
	mismatches *prometheus.CounterVec
	// Inconclusive counts keys changed again during their check (checked
	// later at their newest change), by table:
	// sluice_verify_inconclusive_total.
	inconclusive *prometheus.CounterVec
	// Dropped counts samples not taken because too many keys waited:
	// sluice_verify_dropped_total.
	dropped prometheus.Counter
}

// NewVerifyMetrics creates the continuous verification metrics of
// pipeline and registers them with reg (none when reg is nil).
func NewVerifyMetrics(reg prometheus.Registerer, pipeline string) *VerifyMetrics {
	cl := prometheus.Labels{"pipeline": pipeline}
	m := &VerifyMetrics{
		checked: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_verify_checked_total", Help: "Sampled keys found equal in a sink (continuous verification).", ConstLabels: cl,
		}, []string{"sink", "table"}),
		mismatches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_verify_mismatches_total", Help: "Sampled keys that differ between the source and a sink (continuous verification).", ConstLabels: cl,
		}, []string{"sink", "table"}),
		inconclusive: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_verify_inconclusive_total", Help: "Sampled keys changed again during their check; checked later at their newest change.", ConstLabels: cl,
		}, []string{"table"}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_verify_dropped_total", Help: "Samples not taken because verify.sample.max_pending keys were waiting.", ConstLabels: cl,
		}),
	}
	if reg != nil {
		reg.MustRegister(m.checked, m.mismatches, m.inconclusive, m.dropped)
	}
	return m
}

// Checked counts n keys of table found equal in sink.
func (m *VerifyMetrics) Checked(sink, table string, n int) {
	m.checked.WithLabelValues(sink, table).Add(float64(n))
}

// Mismatch counts one key of table that differs in sink.
func (m *VerifyMetrics) Mismatch(sink, table string) {
	m.mismatches.WithLabelValues(sink, table).Inc()
}

// Inconclusive counts n keys of table changed again during their check.
func (m *VerifyMetrics) Inconclusive(table string, n int) {
	m.inconclusive.WithLabelValues(table).Add(float64(n))
}

// Dropped counts n samples not taken.
func (m *VerifyMetrics) Dropped(n int) { m.dropped.Add(float64(n)) }
