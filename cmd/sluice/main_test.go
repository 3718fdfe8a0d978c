package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
)

func runCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestValidateShippedConfigs(t *testing.T) {
	t.Setenv("PG_PASSWORD", "example")
	t.Setenv("MASK_KEY", "example")
	files, _ := filepath.Glob("../../configs/*.yaml")
	if len(files) < 2 {
		t.Fatalf("found %d config files", len(files))
	}
	for _, f := range files {
		code, out, errs := runCLI(t, "validate", "-c", f)
		if code != 0 || !strings.Contains(out, ": ok") {
			t.Errorf("%s: exit %d\n%s%s", f, code, out, errs)
		}
	}
}

// One file with an unknown key, a wrong type and a missing env var: all
// three are reported with line:col, and the exit code is 2.
func TestValidateReportsEveryProblemWithPosition(t *testing.T) {
	os.Unsetenv("SLUICE_TEST_MISSING_SECRET")
	dir := t.TempDir()
	path := filepath.Join(dir, "bad.yaml")
	os.WriteFile(path, []byte(`pipeline: shop
source:
  postgres:
    dsn: postgres://cdc@127.0.0.1:5432/shop
    password: ${SLUICE_TEST_MISSING_SECRET}
    tables: [public.orders]
sinks:
  - duckdb:
      pathh: ./x.duckdb
runtime:
  max_in_flight_records: lots
`), 0o644)
	code, _, errs := runCLI(t, "validate", "-c", path)
	if code != 2 {
		t.Fatalf("exit %d, want 2\n%s", code, errs)
	}
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`bad\.yaml:5:15: source\.postgres\.password: .*SLUICE_TEST_MISSING_SECRET`),
		regexp.MustCompile(`bad\.yaml:9:7: sinks\[0\]\.duckdb\.pathh: unknown field.*hint: .*path`),
		regexp.MustCompile(`bad\.yaml:11:26: runtime\.max_in_flight_records: .*`),
	} {
		if !want.MatchString(errs) {
			t.Errorf("missing %v in:\n%s", want, errs)
		}
	}
}

func TestRunWithBadConfigTouchesNothing(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "bad.yaml")
	os.WriteFile(path, []byte("pipeline: Bad Name\n"), 0o644)
	code, _, errs := runCLI(t, "run", "-c", path)
	if code != 2 || !strings.Contains(errs, "bad.yaml:1:11: pipeline:") {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Fatalf("run with a bad config created files: %v", entries)
	}
}

func TestVersionAndUsage(t *testing.T) {
	code, out, _ := runCLI(t, "version")
	if code != 0 || !strings.HasPrefix(out, "sluice ") {
		t.Fatalf("version: %d %q", code, out)
	}
	if code, _, _ := runCLI(t, "run"); code != 2 {
		t.Fatalf("run without -c: exit %d, want 2", code)
	}
	if code, _, _ := runCLI(t, "bogus"); code != 2 {
		t.Fatalf("unknown command: exit %d, want 2", code)
	}
}

func TestFirstSignalDrainsSecondExits130(t *testing.T) {
	sigs := make(chan os.Signal, 2)
	ctx, cancel := context.WithCancel(context.Background())
	exited := make(chan int, 1)
	go handleSignals(sigs, cancel, func(code int) { exited <- code }, t.Logf)
	sigs <- syscall.SIGTERM
	<-ctx.Done() // the first signal starts the graceful drain
	select {
	case code := <-exited:
		t.Fatalf("exited with %d on the first signal", code)
	default:
	}
	sigs <- syscall.SIGINT
	if code := <-exited; code != 130 {
		t.Fatalf("second signal: exit %d, want 130", code)
	}
}
