package obs

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// A restarted component of the same pipeline keeps counting in the series
// already registered; a clash with a different kind of series is an error.
func TestCollectorsReuseRegisteredSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	first := NewCollectors(reg, "demo", "p").Counter("rows_total", "Rows.")
	first.Add(3)
	second := NewCollectors(reg, "demo", "p")
	again := second.Counter("rows_total", "Rows.")
	again.Inc()
	if second.Err() != nil || testutil.ToFloat64(first) != 4 {
		t.Fatalf("reuse: err %v, value %v", second.Err(), testutil.ToFloat64(first))
	}
	clash := NewCollectors(reg, "demo", "p")
	clash.Gauge("rows_total", "Rows.")
	if clash.Err() == nil {
		t.Fatal("a gauge under a counter's name registered")
	}
	if NewCollectors(nil, "demo", "p").Gauge("g", "G.") == nil {
		t.Fatal("no registry: the series is still made")
	}
}
