package integration

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func writeGenerateConfig(t *testing.T, dir, extra string) string {
	t.Helper()
	cfg := filepath.Join(dir, "pipe.yaml")
	body := `pipeline: demo
source:
  generate: {seed: 3, initial_rows: 500, changes: 0, rate: 2000, batch: 100}
sinks:
  - duckdb: {path: ./sink.duckdb}
offsets: {dir: ./offsets}
runtime: {checkpoint_interval: 50ms}
` + extra
	if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return cfg
}

func getJSON(t *testing.T, url string, into any) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if into != nil && resp.StatusCode == 200 {
		if err := json.Unmarshal(b, into); err != nil {
			t.Fatalf("%s: %v: %s", url, err, b)
		}
	}
	return resp.StatusCode
}

// The daemon serves /healthz, /readyz, /metrics and /status, `sluice status`
// renders the status, and SIGTERM drains and exits 0 with a final checkpoint.
func TestDaemonEndpointsStatusAndGracefulStop(t *testing.T) {
	dir := t.TempDir()
	d := startDaemon(t, writeGenerateConfig(t, dir, ""))
	addr := d.waitAddr(t, 60*time.Second)
	base := "http://" + addr

	if code := getJSON(t, base+"/healthz", nil); code != 200 {
		t.Fatalf("/healthz %d", code)
	}
	// Ready once the source and sinks are open; a checkpoint follows.
	var st struct {
		State           string  `json:"state"`
		CheckpointSeq   uint64  `json:"checkpoint_seq"`
		DLQDepth        int64   `json:"dlq_depth"`
		InFlightRecords int64   `json:"in_flight_records"`
		CheckpointAge   float64 `json:"checkpoint_age_seconds"`
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if getJSON(t, base+"/readyz", nil) == 200 && getJSON(t, base+"/status", &st) == 200 && st.CheckpointSeq > 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("never ready with checkpoints: %+v\n%s", st, d.logs())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if st.State != "streaming" {
		t.Fatalf("state %q", st.State)
	}
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, m := range []string{`sluice_records_total{pipeline="demo",stage="source"}`, `sluice_records_total{pipeline="demo",stage="sink:duckdb"}`,
		"sluice_in_flight_records", "sluice_in_flight_bytes", "sluice_checkpoint_commit_duration_seconds_bucket",
		"sluice_checkpoint_age_seconds", "sluice_dlq_depth", "sluice_batch_duration_seconds_bucket"} {
		if !strings.Contains(string(metrics), m) {
			t.Errorf("/metrics lacks %s", m)
		}
	}
	out, err := exec.Command(sluiceBinary(t), "status", "--addr", addr).CombinedOutput()
	if err != nil {
		t.Fatalf("sluice status: %v\n%s", err, out)
	}
	for _, want := range []string{"demo", "checkpoint", "dead letters", "in flight"} {
		if !strings.Contains(strings.ToLower(string(out)), strings.ToLower(want)) {
			t.Errorf("status output lacks %q:\n%s", want, out)
		}
	}

	d.signal(syscall.SIGTERM)
	if code := d.wait(t, 60*time.Second); code != 0 {
		t.Fatalf("exit %d after SIGTERM:\n%s", code, d.logs())
	}
	if !strings.Contains(d.logs(), "pipeline stopped") {
		t.Fatalf("no clean stop in logs:\n%s", d.logs())
	}
	// The final checkpoint is on disk and loads in the next run.
	d2 := startDaemon(t, writeGenerateConfig(t, dir, ""))
	d2.waitAddr(t, 60*time.Second)
	deadline = time.Now().Add(30 * time.Second)
	for !strings.Contains(d2.logs(), "resuming from checkpoint") {
		if time.Now().After(deadline) {
			t.Fatalf("restart did not resume:\n%s", d2.logs())
		}
		time.Sleep(10 * time.Millisecond)
	}
	d2.signal(syscall.SIGTERM)
	d2.wait(t, 60*time.Second)
}

// A signal during start-up (here: the sink cannot open because another
// process holds the DuckDB file) stops cleanly with exit 0, without a
// checkpoint.
func TestSignalDuringStartupStopsCleanly(t *testing.T) {
	dir := t.TempDir()
	cfg := writeGenerateConfig(t, dir, "")
	holder := startDaemon(t, cfg)
	holder.waitAddr(t, 60*time.Second)
	// A second daemon on the same offsets dir is refused (the checkpoint
	// lock), with the setup exit code.
	d := startDaemon(t, cfg)
	if code := d.wait(t, 60*time.Second); code != 3 {
		t.Fatalf("second daemon on the same offsets: exit %d, want 3\n%s", code, d.logs())
	}
	if !strings.Contains(d.logs(), "offsets") {
		t.Fatalf("refusal does not name the offsets dir:\n%s", d.logs())
	}
	holder.signal(syscall.SIGINT)
	if code := holder.wait(t, 60*time.Second); code != 0 {
		t.Fatalf("exit %d:\n%s", code, holder.logs())
	}
}

// A DSN password never appears in logs or errors, even when the connection
// fails and the error is printed.
func TestPasswordNeverLogged(t *testing.T) {
	dir := t.TempDir()
	const secret = "s3cr3t-Pa55word-zz"
	cfg := filepath.Join(dir, "pg.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf(`pipeline: leak
source:
  postgres:
    dsn: postgres://cdc:%s@127.0.0.1:1/shop?connect_timeout=2
    password: ${LEAK_TEST_PASSWORD}
    tables: [public.orders]
sinks:
  - duckdb: {path: ./sink.duckdb}
offsets: {dir: ./offsets}
log: {level: debug}
`, secret)), 0o644)
	cmd := exec.Command(sluiceBinary(t), "run", "-c", cfg, "--http-listen", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), "LEAK_TEST_PASSWORD=other-"+secret)
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("run against a closed port succeeded:\n%s", out)
	}
	if code := cmd.ProcessState.ExitCode(); code != 3 {
		t.Errorf("exit %d, want 3 (source refused to start)\n%s", code, out)
	}
	if strings.Contains(string(out), secret) {
		t.Fatalf("password leaked:\n%s", out)
	}
	if !strings.Contains(string(out), "127.0.0.1") {
		t.Fatalf("error does not say what failed:\n%s", out)
	}
}
