package obs

import "github.com/prometheus/client_golang/prometheus"

// StateMetrics are the sizes of the stateful transforms' state files
// (the joins', the windows'), next to the caps that stop the pipeline.
type StateMetrics struct {
	size, max *prometheus.GaugeVec
}

// NewStateMetrics creates the state metrics of pipeline and registers
// them with reg (none when reg is nil).
func NewStateMetrics(reg prometheus.Registerer, pipeline string) *StateMetrics {
	cl := prometheus.Labels{"pipeline": pipeline}
	m := &StateMetrics{
		size: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sluice_operator_state_bytes",
			Help: "Size of a stateful transform's state file, after its last write.", ConstLabels: cl}, []string{"operator"}),
		max: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sluice_operator_state_max_bytes",
			Help: "The state size past which the pipeline stops (max_state_bytes; 0: no cap).", ConstLabels: cl}, []string{"operator"}),
	}
	if reg != nil {
		reg.MustRegister(m.size, m.max)
	}
	return m
}

// Operator returns what operator's state store tells its size to, and
// records its cap. A nil StateMetrics gives nil.
func (m *StateMetrics) Operator(operator string, maxBytes int64) func(int64) {
	if m == nil {
		return nil
	}
	m.max.WithLabelValues(operator).Set(float64(maxBytes))
	g := m.size.WithLabelValues(operator)
	return func(n int64) { g.Set(float64(n)) }
}
