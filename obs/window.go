package obs

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// WindowMetrics are the window transforms' measurements (Invariant 9:
// late records and a stalled watermark are metrics).
type WindowMetrics struct {
	late      *prometheus.CounterVec
	lag       *prometheus.GaugeVec
	windows   *prometheus.GaugeVec
	groups    *prometheus.GaugeVec
	rows      *prometheus.GaugeVec
	stateSize *prometheus.GaugeVec
	write     *prometheus.HistogramVec
}

// NewWindowMetrics creates the window metrics of pipeline and registers
// them with reg (none when reg is nil).
func NewWindowMetrics(reg prometheus.Registerer, pipeline string) *WindowMetrics {
	cl := prometheus.Labels{"pipeline": pipeline}
	gauge := func(name, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: cl}, []string{"window"})
	}
	m := &WindowMetrics{
		late: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_window_late_total", Help: "Changes too late for their window (its state was gone), by the window's late policy.", ConstLabels: cl,
		}, []string{"window", "policy"}),
		lag:       gauge("sluice_window_watermark_lag_seconds", "Wall clock minus the window's watermark: how far behind event time the window is (a stalled input grows it)."),
		windows:   gauge("sluice_window_open_windows", "Windows whose state is held (open, or closed within the allowed lateness)."),
		groups:    gauge("sluice_window_open_groups", "Groups held in the open windows."),
		rows:      gauge("sluice_window_rows", "Rows whose contribution the window holds (tombstones included)."),
		stateSize: gauge("sluice_window_state_bytes", "Size of the window's state file."),
		write: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "sluice_window_state_write_seconds", Help: "Time to write a batch's changes to the window's state (one transaction, synced).",
			ConstLabels: cl, Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}, []string{"window"}),
	}
	if reg != nil {
		reg.MustRegister(m.late, m.lag, m.windows, m.groups, m.rows, m.stateSize, m.write)
	}
	return m
}

// Late counts n late changes of window under policy.
func (m *WindowMetrics) Late(window, policy string, n int) {
	m.late.WithLabelValues(window, policy).Add(float64(n))
}

// Progress sets window's gauges after a batch and observes its state
// write.
func (m *WindowMetrics) Progress(window string, lag time.Duration, windows, groups, rows int, stateBytes int64, write time.Duration) {
	m.write.WithLabelValues(window).Observe(write.Seconds())
	m.lag.WithLabelValues(window).Set(lag.Seconds())
	m.windows.WithLabelValues(window).Set(float64(windows))
	m.groups.WithLabelValues(window).Set(float64(groups))
	m.rows.WithLabelValues(window).Set(float64(rows))
	m.stateSize.WithLabelValues(window).Set(float64(stateBytes))
}
