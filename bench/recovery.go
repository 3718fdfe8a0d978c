package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/sluice-cdc/sluice/integration/harness"
)

// daemonBinary builds cmd/sluice once per process.
var daemonBinary = sync.OnceValues(func() (string, error) {
	root, err := harness.ModuleRoot()
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "sluice-bench-bin-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "sluice")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/sluice")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/sluice: %w\n%s", err, out)
	}
	return bin, nil
})

// daemon is `sluice run` as its own process, so it can be killed with
// SIGKILL.
type daemon struct {
	cmd    *exec.Cmd
	addr   string // its HTTP listener
	config string
	log    *os.File
	exited chan struct{}
}

func startDaemon(config, addr, logPath string) (*daemon, error) {
	return startDaemonIn(nil, config, addr, logPath)
}

// startDaemonIn is startDaemon inside the memory cgroup cg (nil: none).
func startDaemonIn(cg *memCgroup, config, addr, logPath string) (*daemon, error) {
	bin, err := daemonBinary()
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "run", "-c", config)
	if cg != nil {
		cmd = cg.command(bin, "run", "-c", config)
	}
	d := &daemon{cmd: cmd, addr: addr, config: config, log: f, exited: make(chan struct{})}
	d.cmd.Stdout, d.cmd.Stderr = f, f
	if err := d.cmd.Start(); err != nil {
		f.Close()
		return nil, err
	}
	go func() { _ = d.cmd.Wait(); close(d.exited) }()
	return d, nil
}

// kill sends SIGKILL and waits for the process to be gone.
func (d *daemon) kill() {
	_ = d.cmd.Process.Kill()
	<-d.exited
	d.log.Close()
}

// stop asks for a clean shutdown.
func (d *daemon) stop() {
	_ = d.cmd.Process.Signal(os.Interrupt)
	select {
	case <-d.exited:
	case <-time.After(30 * time.Second):
		_ = d.cmd.Process.Kill()
		<-d.exited
	}
	d.log.Close()
}

// daemonStatus is the part of /status the recovery measure reads.
type daemonStatus struct {
	LagSeconds     float64   `json:"lag_seconds"`
	LastCheckpoint time.Time `json:"last_checkpoint"`
	Source         struct {
		LastEventTime time.Time `json:"last_event_time"`
	} `json:"source"`
}

func (d *daemon) status(ctx context.Context) (daemonStatus, error) {
	var st daemonStatus
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+d.addr+"/status", nil)
	if err != nil {
		return st, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

// ready reports whether /readyz answers 200.
func (d *daemon) ready(ctx context.Context) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+d.addr+"/readyz", nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// caughtUp reports whether the daemon has handed over a change committed
// less than a second ago and committed a checkpoint after since: the
// "lag < 1 s" of the recovery target, durable.
func (d *daemon) caughtUp(ctx context.Context, since time.Time) bool {
	st, err := d.status(ctx)
	return err == nil && !st.Source.LastEventTime.IsZero() && st.LagSeconds < 1 && st.LastCheckpoint.After(since)
}

// waitFor polls cond every 10ms until it holds, the daemon exits or
// timeout passes.
func (d *daemon) waitFor(ctx context.Context, timeout time.Duration, what string, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	for !cond() {
		select {
		case <-d.exited:
			return fmt.Errorf("sluice exited while waiting for %s; log:\n%s", what, tailFile(d.log.Name(), 4000))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no %s after %s; log:\n%s", what, timeout, tailFile(d.log.Name(), 4000))
		}
	}
	return nil
}

func tailFile(path string, n int) string {
	b, _ := os.ReadFile(path)
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// recovery measures the time from restarting sluice after a kill -9 to
// lag < 1 s, under a steady load of rate rows/s: sluice runs as a daemon
// (sourceYAML is its source block) into the broker; once it has kept up
// for 5s it is killed with SIGKILL and started again at once. Afterwards
// the load stops and the topic must hold at least every written row
// (at-least-once: the replay after the kill may add duplicates).
func recovery(ctx context.Context, o RunOptions, db latencyDB, br *broker, sourceYAML, topic string, rate, first int) ([]Figure, error) {
	dir, err := os.MkdirTemp("", "sluice-bench-recovery-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	config := filepath.Join(dir, "sluice.yaml")
	yaml := fmt.Sprintf(`pipeline: recover
source:
%s
sinks:
  - kafka:
      name: events
      brokers: [%s]
      registry:
        url: %s
offsets:
  dir: %s
http:
  listen: %s
`, sourceYAML, strings.Join(br.k.Brokers(), ", "), br.reg.URL(), filepath.Join(dir, "offsets"), addr)
	if err := os.WriteFile(config, []byte(yaml), 0o644); err != nil {
		return nil, err
	}
	logPath := filepath.Join(dir, "sluice.log")
	d, err := startDaemon(config, addr, logPath)
	if err != nil {
		return nil, err
	}
	started := time.Now()
	if err := d.waitFor(ctx, 2*time.Minute, "readiness", func() bool { return d.ready(ctx) }); err != nil {
		d.kill()
		return nil, err
	}
	stop := make(chan struct{})
	w := startWriter(ctx, db, first, rate/100, stop)
	fail := func(err error) ([]Figure, error) {
		close(stop)
		<-w.done
		d.kill()
		return nil, err
	}
	if err := d.waitFor(ctx, time.Minute, "lag < 1s under load", func() bool { return d.caughtUp(ctx, started) }); err != nil {
		return fail(err)
	}
	select { // keep up under the load for a while before the kill
	case <-time.After(5 * time.Second):
	case <-w.done:
		return fail(fmt.Errorf("writer: %v", w.err))
	}
	d.kill()
	t0 := time.Now()
	d2, err := startDaemon(config, addr, logPath)
	if err != nil {
		close(stop)
		<-w.done
		return nil, err
	}
	d = d2
	if err := d.waitFor(ctx, 2*time.Minute, "lag < 1s after the restart", func() bool { return d.caughtUp(ctx, t0) }); err != nil {
		return fail(err)
	}
	took := time.Since(t0)
	close(stop)
	<-w.done
	if w.err != nil {
		d.kill()
		return nil, w.err
	}
	var stored int64
	err = d.waitFor(ctx, 2*time.Minute, "every written row in the topic", func() bool {
		stored, _ = br.topicEnd(ctx, topic)
		return stored >= int64(w.rows)
	})
	d.stop()
	if err != nil {
		return nil, err
	}
	o.log("recovery at %d rows/s: lag < 1s %s after the restart; %d rows written, %d records in %s", rate, took.Round(time.Millisecond), w.rows, stored, topic)
	return []Figure{{Name: fmt.Sprintf("recovery after kill -9 at %dk rows/s", rate/1000), Unit: "s", Value: took.Seconds(), Target: "< 10"}}, nil
}
