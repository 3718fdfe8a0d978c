package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// InCI reports whether the tests run in CI, where missing services fail.
func InCI() bool { return os.Getenv("CI") == "true" }

// SkipOrFail skips the test when a service is missing on a developer machine
// and fails it in CI (CI=true), where a missing service is never a skip.
func SkipOrFail(t testing.TB, err error) {
	t.Helper()
	if InCI() {
		t.Fatalf("harness (CI=true, services are required): %v", err)
	}
	t.Skipf("harness: %v (set CI=true to make this a failure)", err)
}

// SkipShort skips a heavy test under -short on a developer machine. In CI
// (CI=true) it never skips: every test runs there.
func SkipShort(t testing.TB, why string) {
	t.Helper()
	if testing.Short() && !InCI() {
		t.Skip(why + " (-short)")
	}
}

// Trials is how many times a repeated randomized test runs: n, the size
// CI runs, unless SLUICE_TRIALS sets another count (a longer hunt on a
// developer machine: SLUICE_TRIALS=500 go test -run … ).
func Trials(n int) int {
	if v, err := strconv.Atoi(os.Getenv("SLUICE_TRIALS")); err == nil && v > 0 {
		return v
	}
	return n
}

// TestJVMFlags are the JVM flags every Java server the harness (or a
// scenario of the bench package) starts inside a test binary gets: the client compiler only. A throwaway test
// node spends most of its CPU on start-up, where C2 compiles for a peak it
// never reaches; on two cores C1 alone halves an OpenSearch start (11 s of
// CPU to 6 s) and cuts a search package run by a quarter. Outside tests
// (the bench binary) servers keep the full JIT, so throughput figures
// measure the servers as users run them.
func TestJVMFlags() []string {
	if testing.Testing() {
		return []string{"-XX:TieredStopAtLevel=1"}
	}
	return nil
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// serviceUser returns the credential to run a server under when we are root
// (PostgreSQL and MariaDB refuse to run as root), or nil.
func serviceUser(name string) (*syscall.Credential, int, int, error) {
	if os.Geteuid() != 0 {
		return nil, os.Getuid(), os.Getgid(), nil
	}
	u, err := user.Lookup(name)
	if err != nil {
		return nil, 0, 0, fmt.Errorf("running as root needs the %q system user (installed with the package): %w", name, err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, uid, gid, nil
}

// binDirs are searched, after PATH, for server and client binaries: Debian
// puts daemons in /usr/sbin, which is often not on a non-root user's PATH.
var binDirs = []string{"/usr/sbin", "/usr/bin", "/usr/local/sbin", "/usr/local/bin", "/sbin", "/bin", "/usr/libexec"}

// lookBinary returns the path of the first of names found on PATH or in
// binDirs, or an error that names them all and the hint (e.g. the package).
func lookBinary(hint string, names ...string) (string, error) {
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p, nil
		}
		for _, d := range binDirs {
			p := filepath.Join(d, n)
			if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
				return p, nil
			}
		}
	}
	return "", fmt.Errorf("none of %v found on PATH or in %v (%s)", names, binDirs, hint)
}

// mkTemp makes a temp dir owned by uid:gid.
func mkTemp(prefix string, uid, gid int) (string, error) {
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return "", err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return "", err
	}
	return dir, os.Chown(dir, uid, gid)
}

// waitFor polls ready until it succeeds, the process exits or timeout passes.
func waitFor(what string, timeout time.Duration, exited <-chan struct{}, logFile string, ready func() error) error {
	return waitForCtx(context.Background(), what, timeout, exited, logFile, ready)
}

// waitForCtx is waitFor that also gives up when ctx is done.
func waitForCtx(ctx context.Context, what string, timeout time.Duration, exited <-chan struct{}, logFile string, ready func() error) error {
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		if last = ready(); last == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("%s exited during start-up: %v\n%s", what, last, tail(logFile, 4000))
		case <-ctx.Done():
			return fmt.Errorf("%s start-up: %w (last: %v)", what, ctx.Err(), last)
		case <-tick.C:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %s: %v\n%s", what, timeout, last, tail(logFile, 4000))
		}
	}
}

func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// process is a running server child.
type process struct {
	cmd    *exec.Cmd
	exited chan struct{}
	err    error
}

func startProcess(cmd *exec.Cmd) (*process, error) {
	// Own process group, so a test's Ctrl-C does not reach the server first.
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	if err := spawn(cmd); err != nil {
		return nil, err
	}
	p := &process{cmd: cmd, exited: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.exited) }()
	return p, nil
}

// Pdeathsig fires when the OS thread that started the child exits, not
// the process, and the Go runtime may retire the thread a goroutine ran
// on: a server started from an ordinary goroutine can be SIGKILLed at a
// random later moment. Every server is therefore started from one
// goroutine locked to its thread for the life of the test binary.
var (
	spawnOnce sync.Once
	spawnReqs chan spawnReq
)

type spawnReq struct {
	cmd  *exec.Cmd
	done chan error
}

// Spawn starts cmd from the harness's thread-locked goroutine, so a
// Pdeathsig set on cmd fires only when the binary exits.
func Spawn(cmd *exec.Cmd) error { return spawn(cmd) }

func spawn(cmd *exec.Cmd) error {
	spawnOnce.Do(func() {
		spawnReqs = make(chan spawnReq)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread lives as long as the binary
			for r := range spawnReqs {
				r.done <- r.cmd.Start()
			}
		}()
	})
	done := make(chan error, 1)
	spawnReqs <- spawnReq{cmd: cmd, done: done}
	return <-done
}

// stop sends sig and waits up to grace, then kills.
func (p *process) stop(sig syscall.Signal, grace time.Duration) error {
	select {
	case <-p.exited:
		return nil
	default:
	}
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.exited:
		return nil
	case <-time.After(grace):
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.exited
	return errors.New("server did not stop in time and was killed")
}

// serverT starts a server with the first of opts (or the zero options) for
// a test and stops it at cleanup; a server that cannot start skips the test,
// except in CI where it fails it.
func serverT[S interface{ Stop() error }, O any](t testing.TB, opts []O, start func(context.Context, O) (S, error)) S {
	t.Helper()
	var o O
	if len(opts) > 0 {
		o = opts[0]
	}
	s, err := start(context.Background(), o)
	if err != nil {
		SkipOrFail(t, err)
	}
	t.Cleanup(func() { _ = s.Stop() })
	return s
}

// portClash reports whether a start-up error (which carries the server's
// log tail) says a port was taken: the JVM's bind error, or Quarkus's own
// "Port N seems to be in use" report.
func portClash(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "Address already in use") || strings.Contains(msg, "seems to be in use")
}

// retryPortClash runs once up to three times while it fails because a port
// was taken between FreePort and the bind; anything else is not worth
// another try, and neither is a cancelled ctx. On failure dir is removed.
func retryPortClash[S any](ctx context.Context, dir string, once func() (S, error)) (S, error) {
	for attempt := 0; ; attempt++ {
		s, err := once()
		if err == nil {
			return s, nil
		}
		if attempt >= 2 || ctx.Err() != nil || !portClash(err) {
			os.RemoveAll(dir)
			return s, err
		}
	}
}

// cacheRoot is ${SLUICE_CACHE:-$HOME/.cache/sluice}, where fetched jars and
// builds are kept across runs (never in the repository).
func cacheRoot() (string, error) {
	if c := os.Getenv("SLUICE_CACHE"); c != "" {
		return c, nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("no SLUICE_CACHE and no home dir: %w", err)
	}
	return filepath.Join(home, ".cache", "sluice"), nil
}

// runCacheScript runs scripts/<script> from the module root (Maven fills
// the cache) and checks that the path it prints last is want.
func runCacheScript(ctx context.Context, cache, script, want, what string, timeout time.Duration) error {
	root, err := ModuleRoot()
	if err != nil {
		return err
	}
	path := filepath.Join(root, "scripts", script)
	if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("%s missing in %s and no scripts/%s: %w", what, cache, script, err)
	}
	if _, err := exec.LookPath("mvn"); err != nil {
		return fmt.Errorf("%s missing in %s and Maven is not installed to make it (apt-get install maven, then run scripts/%s)", what, cache, script)
	}
	sctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(sctx, "bash", path)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "SLUICE_CACHE="+cache)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("scripts/%s: %v\n%s", script, err, tailBytes(stderr.Bytes(), 4000))
	}
	if got := strings.TrimSpace(lastLine(string(out))); got != "" && got != want {
		return fmt.Errorf("scripts/%s made %s, expected %s (is the version in step with its POM?)", script, got, want)
	}
	return nil
}
