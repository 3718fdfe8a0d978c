package harness

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// RedisOptions tunes a throwaway Redis server.
type RedisOptions struct {
	// Settings override or extend the default configuration, each passed as
	// --name value; an empty value is passed as "" (as in save ""). The
	// options port, bind, dir and daemonize belong to the harness and
	// cannot be overridden.
	Settings map[string]string
}

// redisDefaults keep every acknowledged write: no RDB snapshots, an
// append-only file fsynced on every write.
var redisDefaults = map[string]string{
	"save":           "",
	"appendonly":     "yes",
	"appendfsync":    "always",
	"protected-mode": "no",
	"logfile":        "",
	"loglevel":       "notice",
}

// redisFixed are the options the harness sets itself.
var redisFixed = map[string]bool{"port": true, "bind": true, "dir": true, "daemonize": true}

// Redis is a running throwaway Redis server without authentication.
type Redis struct {
	Host   string
	Port   int
	Dir    string // working dir: the append-only file and the log
	Server string // path of redis-server

	args []string // server arguments, without --port
	proc *process
	log  string
}

// StartRedis starts redis-server in a new temp dir on a random 127.0.0.1
// port. Stop it with Stop.
func StartRedis(ctx context.Context, opts RedisOptions) (*Redis, error) {
	server, err := lookBinary("install it: apt-get install redis-server", "redis-server")
	if err != nil {
		return nil, err
	}
	dir, err := mkTemp("sluice-redis-", os.Getuid(), os.Getgid())
	if err != nil {
		return nil, err
	}
	r := &Redis{Host: "127.0.0.1", Dir: dir, Server: server, log: filepath.Join(dir, "redis.log")}
	r.args = redisArgs(r.Host, dir, opts.Settings)
	for attempt := 0; ; attempt++ {
		if r.Port, err = FreePort(); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		exited, err := r.start(ctx)
		if err == nil {
			return r, nil
		}
		// Only a server that exited (its port was taken) is worth retrying.
		if attempt >= 2 || ctx.Err() != nil || !exited {
			os.RemoveAll(dir)
			return nil, err
		}
	}
}

func redisArgs(host, dir string, overrides map[string]string) []string {
	settings := map[string]string{}
	for k, v := range redisDefaults {
		settings[k] = v
	}
	for k, v := range overrides {
		k = strings.ToLower(strings.TrimLeft(k, "-"))
		if !redisFixed[k] {
			settings[k] = v
		}
	}
	keys := make([]string, 0, len(settings))
	for k := range settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	args := []string{"--bind", host, "--dir", dir, "--daemonize", "no"}
	for _, k := range keys {
		args = append(args, "--"+k, settings[k])
	}
	return args
}

// start runs the server on r.Port and waits until it answers PING.
// exited reports a server that quit by itself during start-up.
func (r *Redis) start(ctx context.Context) (exited bool, err error) {
	lf, err := os.OpenFile(r.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return false, err
	}
	args := append(append([]string{}, r.args...), "--port", strconv.Itoa(r.Port))
	cmd := exec.Command(r.Server, args...)
	cmd.Dir = r.Dir
	cmd.Stdout, cmd.Stderr = lf, lf
	proc, err := startProcess(cmd)
	lf.Close()
	if err != nil {
		return false, fmt.Errorf("start redis-server: %w", err)
	}
	r.proc = proc
	err = waitForCtx(ctx, "redis", 30*time.Second, proc.exited, r.log, func() error {
		return redisPing(ctx, r.Addr())
	})
	if err != nil {
		select {
		case <-proc.exited:
			exited = true
		default:
		}
		_ = proc.stop(syscall.SIGKILL, 5*time.Second)
	}
	return exited, err
}

// redisPing sends PING in the Redis protocol and expects +PONG; a server
// still loading its append-only file answers -LOADING instead.
func redisPing(ctx context.Context, addr string) error {
	d := net.Dialer{Timeout: time.Second}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" {
		return fmt.Errorf("PING answered %q", strings.TrimSpace(line))
	}
	return nil
}

// RedisT starts a server for a test and stops it at cleanup. A missing
// redis-server skips the test, except in CI where it fails.
func RedisT(t testing.TB, opts ...RedisOptions) *Redis {
	t.Helper()
	return serverT(t, opts, StartRedis)
}

// Addr is the server's host:port, e.g. for go-redis Options.Addr.
func (r *Redis) Addr() string { return net.JoinHostPort(r.Host, strconv.Itoa(r.Port)) }

// URL is a redis:// URL for database db.
func (r *Redis) URL(db int) string { return fmt.Sprintf("redis://%s/%d", r.Addr(), db) }

// Log returns the tail of the server log.
func (r *Redis) Log() string { return tail(r.log, 8000) }

// Restart starts the server again on the same directory and port, so it
// reloads the append-only file: after a Kill (crash test) or on a running
// server (which is stopped cleanly first).
func (r *Redis) Restart(ctx context.Context) error {
	// A server that had to be killed is stopped all the same.
	_ = r.proc.stop(syscall.SIGTERM, 30*time.Second)
	_, err := r.start(ctx)
	return err
}

// Stop shuts the server down cleanly (SIGTERM, then SIGKILL after 30s) and
// removes its directory. Stopping twice is harmless.
func (r *Redis) Stop() error {
	err := r.proc.stop(syscall.SIGTERM, 30*time.Second)
	os.RemoveAll(r.Dir)
	return err
}

// Kill stops the server with SIGKILL and keeps its directory (crash tests;
// see Restart). Stop still removes the directory afterwards.
func (r *Redis) Kill() { _ = r.proc.stop(syscall.SIGKILL, time.Second) }
