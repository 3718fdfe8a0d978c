package integration

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// sluiceBinary builds cmd/sluice once per test process.
func sluiceBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "sluice-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "sluice")
		cmd := exec.Command("go", "build", "-o", binPath, "../cmd/sluice")
		out, err := cmd.CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// daemonProc is a running `sluice run`.
type daemonProc struct {
	cmd    *exec.Cmd
	addr   chan string
	done   chan struct{}
	mu     sync.Mutex
	log    strings.Builder
	exit   int
	waited bool
}

var listenRe = regexp.MustCompile(`"addr":"([^"]+)"`)

// startDaemon runs the binary on cfgPath with an HTTP server on a random
// port; the log is kept for failure messages.
func startDaemon(t *testing.T, cfgPath string, extra ...string) *daemonProc {
	t.Helper()
	args := append([]string{"run", "-c", cfgPath, "--http-listen", "127.0.0.1:0"}, extra...)
	cmd := exec.Command(sluiceBinary(t), args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d := &daemonProc{cmd: cmd, addr: make(chan string, 1), done: make(chan struct{})}
	// SLUICE_DAEMON_LOGS=DIR also keeps every daemon's whole log there
	// (failure messages show a tail).
	var keep io.Writer = io.Discard
	if dir := os.Getenv("SLUICE_DAEMON_LOGS"); dir != "" {
		f, err := os.CreateTemp(dir, strings.ReplaceAll(t.Name(), "/", "_")+"-*.log")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		keep = f
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		sent := false
		for sc.Scan() {
			line := sc.Text()
			_, _ = io.WriteString(keep, line+"\n")
			d.mu.Lock()
			d.log.WriteString(line + "\n")
			d.mu.Unlock()
			if !sent && strings.Contains(line, "serving /metrics") {
				if m := listenRe.FindStringSubmatch(line); m != nil {
					d.addr <- m[1]
					sent = true
				}
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
		err := cmd.Wait()
		d.mu.Lock()
		d.exit = cmd.ProcessState.ExitCode()
		_ = err
		d.mu.Unlock()
		close(d.done)
	}()
	t.Cleanup(func() { d.kill() })
	return d
}

// waitAddr returns the daemon's HTTP address once it serves.
func (d *daemonProc) waitAddr(t *testing.T, timeout time.Duration) string {
	t.Helper()
	select {
	case a := <-d.addr:
		return a
	case <-d.done:
		t.Fatalf("daemon exited with %d before serving:\n%s", d.exitCode(), d.logs())
	case <-time.After(timeout):
		t.Fatalf("daemon not serving after %s:\n%s", timeout, d.logs())
	}
	return ""
}

func (d *daemonProc) kill() {
	_ = d.cmd.Process.Signal(syscall.SIGKILL)
	<-d.done
}

func (d *daemonProc) signal(s syscall.Signal) { _ = d.cmd.Process.Signal(s) }

// wait waits for the daemon to exit and returns its exit code.
func (d *daemonProc) wait(t *testing.T, timeout time.Duration) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	select {
	case <-d.done:
		return d.exitCode()
	case <-ctx.Done():
		t.Fatalf("daemon still running after %s:\n%s", timeout, d.logs())
	}
	return -1
}

func (d *daemonProc) exitCode() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.exit
}

// logs is the log's tail, for failure messages.
func (d *daemonProc) logs() string {
	s := d.wholeLog()
	if len(s) > 6000 {
		s = "…" + s[len(s)-6000:]
	}
	return s
}

// wholeLog is the log so far.
func (d *daemonProc) wholeLog() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.log.String()
}
