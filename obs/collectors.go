package obs

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Collectors makes the Prometheus series of one component (a source's
// subsystem) labelled with the pipeline, and registers each as it is
// made. A series already registered (a restarted source of the same
// pipeline) is reused, so it keeps counting where it was.
type Collectors struct {
	reg       prometheus.Registerer // nil: series are made but not registered
	subsystem string
	labels    prometheus.Labels
	err       error
}

// NewCollectors returns a maker of sluice_<subsystem>_* series for the
// pipeline, registered on reg (none when reg is nil).
func NewCollectors(reg prometheus.Registerer, subsystem, pipeline string) *Collectors {
	return &Collectors{reg: reg, subsystem: subsystem, labels: prometheus.Labels{"pipeline": pipeline}}
}

// Err is the joined registration errors (other than reuse).
func (c *Collectors) Err() error { return c.err }

// Gauge makes and registers a gauge.
func (c *Collectors) Gauge(name, help string) prometheus.Gauge {
	return register(c, prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "sluice", Subsystem: c.subsystem, Name: name,
		Help: help, ConstLabels: c.labels}))
}

// Counter makes and registers a counter.
func (c *Collectors) Counter(name, help string) prometheus.Counter {
	return register(c, prometheus.NewCounter(prometheus.CounterOpts{Namespace: "sluice", Subsystem: c.subsystem, Name: name,
		Help: help, ConstLabels: c.labels}))
}

// GaugeVec makes and registers a gauge vector over labels.
func (c *Collectors) GaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	return register(c, prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "sluice", Subsystem: c.subsystem, Name: name,
		Help: help, ConstLabels: c.labels}, labels))
}

func register[T prometheus.Collector](c *Collectors, col T) T {
	if c.reg == nil {
		return col
	}
	if err := c.reg.Register(col); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(T); ok {
				return existing
			}
		}
		c.err = errors.Join(c.err, err)
	}
	return col
}
