package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A corrupt checkpoint stops the daemon with exit 4, naming the file and
// the two ways on; it is never silently replaced. Each way on works.
func TestCorruptCheckpointIsReportedAndRecoverable(t *testing.T) {
	dir := t.TempDir()
	cfg := writeGenerateConfig(t, dir, "")
	d := startDaemon(t, cfg)
	d.waitAddr(t, time.Minute)
	cp := filepath.Join(dir, "offsets", "checkpoint.json")
	prev := filepath.Join(dir, "offsets", "checkpoint.prev.json")
	waitFile(t, prev, d) // at least two commits
	d.signal(syscall.SIGTERM)
	if code := d.wait(t, time.Minute); code != 0 {
		t.Fatalf("exit %d:\n%s", code, d.logs())
	}
	data, err := os.ReadFile(cp)
	if err != nil {
		t.Fatal(err)
	}
	i := strings.Index(string(data), `"seq"`)
	data[i+7] ^= 0x01 // one flipped bit inside the checkpoint
	if err := os.WriteFile(cp, data, 0o600); err != nil {
		t.Fatal(err)
	}

	out, err := exec.Command(sluiceBinary(t), "run", "-c", cfg, "--http-listen", "127.0.0.1:0").CombinedOutput()
	if code := exitCodeOf(err); code != 4 {
		t.Fatalf("exit %d, want 4:\n%s", code, out)
	}
	for _, want := range []string{cp, "--from-previous-checkpoint", "--reset-offsets"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("message lacks %q:\n%s", want, out)
		}
	}
	if after, _ := os.ReadFile(cp); string(after) != string(data) {
		t.Fatal("the corrupt checkpoint was replaced")
	}

	// Way on 1: resume from the previous checkpoint.
	d = startDaemon(t, cfg, "--from-previous-checkpoint")
	d.waitAddr(t, time.Minute)
	waitLog(t, d, "resuming from the previous checkpoint")
	d.signal(syscall.SIGTERM)
	if code := d.wait(t, time.Minute); code != 0 {
		t.Fatalf("--from-previous-checkpoint: exit %d:\n%s", code, d.logs())
	}
	// Way on 2: start over; the old files are moved aside, not deleted.
	d = startDaemon(t, cfg, "--reset-offsets")
	d.waitAddr(t, time.Minute)
	waitLog(t, d, "offsets reset")
	d.signal(syscall.SIGTERM)
	if code := d.wait(t, time.Minute); code != 0 {
		t.Fatalf("--reset-offsets: exit %d:\n%s", code, d.logs())
	}
	aside, _ := filepath.Glob(filepath.Join(dir, "offsets", "*.reset-*"))
	if len(aside) == 0 {
		t.Fatal("--reset-offsets deleted the old checkpoint instead of moving it aside")
	}
}

func exitCodeOf(err error) int {
	if err == nil {
		return 0
	}
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	return -1
}

func waitLog(t *testing.T, d *daemonProc, text string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(d.logs(), text) {
		if time.Now().After(deadline) {
			t.Fatalf("log never said %q:\n%s", text, d.logs())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
