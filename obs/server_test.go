package obs

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluice-cdc/sluice/pipeline"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func TestServerEndpoints(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg, "orders")
	m.ObserveBatch(SinkStage("ch"), 3, 10*time.Millisecond)
	var readyErr atomic.Pointer[error]
	notReady := errors.New("source not connected: postgres://u:hidden-pw@db/app")
	readyErr.Store(&notReady)
	status := func() any {
		return StatusReport{Pipeline: "orders", State: StateStreaming,
			Error: "last error: password=hidden-pw", Source: pipeline.SourceStatus{Connected: true, LagBytes: 42}}
	}
	ready := func() error { return *readyErr.Load() }
	s := NewServer("127.0.0.1:0", reg, status, ready, nil)
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown(context.Background())
	if err := s.Start(); err == nil {
		t.Error("second Start succeeded")
	}
	base := "http://" + s.Addr()
	if strings.HasSuffix(s.Addr(), ":0") {
		t.Fatalf("Addr %q is not the bound address", s.Addr())
	}

	if code, body := get(t, base+"/healthz"); code != 200 || body != "ok\n" {
		t.Errorf("/healthz = %d %q", code, body)
	}
	code, body := get(t, base+"/readyz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "source not connected") || strings.Contains(body, "hidden-pw") {
		t.Errorf("/readyz = %d %q", code, body)
	}
	var ok error
	readyErr.Store(&ok)
	if code, body := get(t, base+"/readyz"); code != 200 {
		t.Errorf("/readyz when ready = %d %q", code, body)
	}
	code, body = get(t, base+"/metrics")
	if code != 200 || !strings.Contains(body, `sluice_records_total{pipeline="orders",stage="sink:ch"} 3`) {
		t.Errorf("/metrics = %d\n%s", code, body)
	}
	code, body = get(t, base+"/status")
	var rep StatusReport
	if code != 200 || json.Unmarshal([]byte(body), &rep) != nil || rep.Pipeline != "orders" || rep.Source.LagBytes != 42 {
		t.Errorf("/status = %d %s", code, body)
	}
	if strings.Contains(body, "hidden-pw") || rep.Error != "last error: password=xxxxx" {
		t.Errorf("/status leaks or mangles the error: %s", body)
	}

	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := http.Get(base + "/healthz"); err == nil {
		t.Error("server still answers after Shutdown")
	}
}

func TestServerBindError(t *testing.T) {
	s := NewServer("127.0.0.1:0", nil, nil, nil, nil)
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown(context.Background())
	if err := NewServer(s.Addr(), nil, nil, nil, nil).Start(); err == nil {
		t.Fatal("two servers bound one address")
	}
	if err := NewServer("", nil, nil, nil, nil).Shutdown(context.Background()); err != nil {
		t.Fatal("Shutdown before Start:", err)
	}
}

func TestHandlerDefaults(t *testing.T) {
	h := NewServer(":0", prometheus.NewRegistry(), nil, nil, nil).Handler()
	for path, want := range map[string]string{"/status": "{}\n", "/readyz": "ready\n"} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		if rec.Code != 200 || rec.Body.String() != want {
			t.Errorf("%s = %d %q", path, rec.Code, rec.Body.String())
		}
	}
}

func TestProfilesOnlyWhenAsked(t *testing.T) {
	plain := NewServer(":0", prometheus.NewRegistry(), nil, nil, nil)
	rec := httptest.NewRecorder()
	plain.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/debug/pprof/heap", nil))
	if rec.Code != http.StatusNotFound {
		t.Errorf("/debug/pprof/heap without HandleProfiles = %d, want 404", rec.Code)
	}
	s := NewServer(":0", prometheus.NewRegistry(), nil, nil, nil)
	s.HandleProfiles()
	rec = httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/debug/pprof/heap?debug=1", nil))
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), "heap profile") {
		t.Errorf("/debug/pprof/heap = %d %.200q", rec.Code, rec.Body.String())
	}
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	a := NewMetrics(reg, "a")
	b := NewMetrics(reg, "b") // two pipelines share a registry
	a.ObserveBatch(StageSource, 10, time.Millisecond)
	a.ObserveBatch(StageTransform, 9, time.Millisecond)
	a.SinkRetries.WithLabelValues("ch").Inc()
	a.DeadLetters.WithLabelValues(SinkStage("ch")).Add(2)
	a.SetInFlight(5, 500)
	a.SetSourceLag(1024, 2*time.Second)
	a.ObserveEndToEnd(time.Now().Add(-time.Second))
	a.ObserveEndToEnd(time.Time{}) // ignored
	a.ObserveCheckpointCommit(3 * time.Millisecond)
	b.ObserveBatch(StageSource, 1, time.Millisecond)

	if got := testutil.ToFloat64(a.Records.WithLabelValues(StageSource)); got != 10 {
		t.Errorf("records source = %v", got)
	}
	if got := testutil.ToFloat64(a.CheckpointCommits); got != 1 {
		t.Errorf("commits = %v", got)
	}
	if n := testutil.CollectAndCount(a.EndToEndLatency); n != 1 {
		t.Errorf("latency series %d", n)
	}
	if a.CheckpointAge() > time.Second {
		t.Errorf("checkpoint age %v right after a commit", a.CheckpointAge())
	}
	a.SetCheckpointAgeFunc(func() time.Duration { return 90 * time.Second })
	if got := gauge(t, reg, "sluice_checkpoint_age_seconds", "a"); got != 90 {
		t.Errorf("checkpoint age gauge of a = %v, want 90", got)
	}
	if got := gauge(t, reg, "sluice_checkpoint_age_seconds", "b"); got < 0 || got > 60 {
		t.Errorf("checkpoint age gauge of b before any commit = %v, want time since NewMetrics", got)
	}
	names := []string{
		"sluice_records_total", "sluice_batch_duration_seconds", "sluice_in_flight_records", "sluice_in_flight_bytes",
		"sluice_checkpoint_commit_duration_seconds", "sluice_checkpoint_age_seconds", "sluice_checkpoint_commits_total",
		"sluice_sink_retries_total", "sluice_dead_letters_total", "sluice_end_to_end_latency_seconds",
		"sluice_source_lag_bytes", "sluice_source_lag_seconds",
	}
	for _, n := range names {
		if c, err := testutil.GatherAndCount(reg, n); err != nil || c == 0 {
			t.Errorf("%s: %d series, %v", n, c, err)
		}
	}
	if got := testutil.ToFloat64(a.SourceLagSeconds); got != 2 {
		t.Errorf("lag seconds %v", got)
	}
}

// gauge returns the value of the gauge name labelled pipeline=p.
func gauge(t *testing.T, reg *prometheus.Registry, name, p string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "pipeline" && l.GetValue() == p {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	t.Fatalf("no %s{pipeline=%q}", name, p)
	return 0
}
