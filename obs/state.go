package obs

import "github.com/prometheus/client_golang/prometheus"

// OperatorMetrics are the stateful transforms' measurements: the size of
// each one's state file next to the cap that stops the pipeline (joins,
// windows, dedups, nests), what the dedups dropped and the documents whose
// arrays the nests truncated.
type OperatorMetrics struct {
	size, max *prometheus.GaugeVec
	dropped   *prometheus.CounterVec
	truncated *prometheus.CounterVec
}

// NewOperatorMetrics creates the operator metrics of pipeline and
// registers them with reg (none when reg is nil).
func NewOperatorMetrics(reg prometheus.Registerer, pipeline string) *OperatorMetrics {
	cl := prometheus.Labels{"pipeline": pipeline}
	m := &OperatorMetrics{
		size: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sluice_operator_state_bytes",
			Help: "Size of a stateful transform's state file, after its last write.", ConstLabels: cl}, []string{"operator"}),
		max: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sluice_operator_state_max_bytes",
			Help: "The state size past which the pipeline stops (max_state_bytes; 0: no cap).", ConstLabels: cl}, []string{"operator"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_dedup_dropped_total",
			Help: "Records a dedup transform dropped: rows carrying a key another row held, and their later changes.", ConstLabels: cl}, []string{"transform"}),
		truncated: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_nest_truncated_total",
			Help: "Documents a nest transform wrote with only the first max_children of a child table's rows (on_overflow: truncate).", ConstLabels: cl}, []string{"operator"}),
	}
	if reg != nil {
		reg.MustRegister(m.size, m.max, m.dropped, m.truncated)
	}
	return m
}

// StateSized returns what operator's state store tells its size to, and
// records its cap. A nil OperatorMetrics gives nil.
func (m *OperatorMetrics) StateSized(operator string, maxBytes int64) func(int64) {
	if m == nil {
		return nil
	}
	m.max.WithLabelValues(operator).Set(float64(maxBytes))
	g := m.size.WithLabelValues(operator)
	return func(n int64) { g.Set(float64(n)) }
}

// Dropped returns what dedup transform counts its dropped records with.
// A nil OperatorMetrics gives nil.
func (m *OperatorMetrics) Dropped(transform string) func(int) {
	if m == nil {
		return nil
	}
	c := m.dropped.WithLabelValues(transform)
	return func(n int) { c.Add(float64(n)) }
}

// Truncated returns what a nest counts the documents it truncated with.
// A nil OperatorMetrics gives nil.
func (m *OperatorMetrics) Truncated(operator string) func(int) {
	if m == nil {
		return nil
	}
	c := m.truncated.WithLabelValues(operator)
	return func(n int) { c.Add(float64(n)) }
}
