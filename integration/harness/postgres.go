package harness

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// PostgresOptions tunes a throwaway PostgreSQL server.
type PostgresOptions struct {
	// WALLevel defaults to "logical".
	WALLevel string
	// Settings are extra server settings (-c name=value).
	Settings map[string]string
	// BinDir holds the server binaries of major version Version; default
	// the newest installed (PostgresBinDir). Postgres16BinDir fetches 16.
	BinDir  string
	Version int
}

// Postgres is a running throwaway PostgreSQL server. Its superuser is
// "postgres" with trust authentication on 127.0.0.1.
type Postgres struct {
	Host    string
	Port    int
	Dir     string
	BinDir  string
	Version int
	proc    *process
	log     string
	cred    *syscall.Credential
	uid     int
	gid     int
	// settings are the -c settings the server runs with (but the port).
	settings map[string]string
}

// PostgresBinDir finds the newest installed PostgreSQL server binaries.
func PostgresBinDir() (string, int, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	type cand struct {
		dir string
		v   int
	}
	var cs []cand
	for _, d := range dirs {
		v, err := strconv.Atoi(filepath.Base(filepath.Dir(d)))
		if err != nil {
			continue
		}
		if _, err := os.Stat(filepath.Join(d, "postgres")); err == nil {
			cs = append(cs, cand{d, v})
		}
	}
	if len(cs) == 0 {
		return "", 0, fmt.Errorf("no PostgreSQL server found under /usr/lib/postgresql/*/bin (install it: apt-get install postgresql)")
	}
	sort.Slice(cs, func(i, j int) bool { return cs[i].v > cs[j].v })
	return cs[0].dir, cs[0].v, nil
}

// StartPostgres runs initdb and starts a server. Stop it with Stop.
func StartPostgres(ctx context.Context, opts PostgresOptions) (*Postgres, error) {
	bin, ver := opts.BinDir, opts.Version
	if bin == "" {
		var err error
		if bin, ver, err = PostgresBinDir(); err != nil {
			return nil, err
		}
	}
	cred, uid, gid, err := serviceUser("postgres")
	if err != nil {
		return nil, err
	}
	dir, err := mkTemp("sluice-pg-", uid, gid)
	if err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "data")
	initdb := exec.CommandContext(ctx, filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres",
		"--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("initdb: %v\n%s", err, out)
	}
	walLevel := opts.WALLevel
	if walLevel == "" {
		walLevel = "logical"
	}
	settings := map[string]string{
		"listen_addresses":        "127.0.0.1",
		"unix_socket_directories": dir,
		"wal_level":               walLevel,
		"max_replication_slots":   "32",
		"max_wal_senders":         "32",
		"max_connections":         "200",
		"fsync":                   "off",
		"full_page_writes":        "off",
		"shared_buffers":          "128MB",
		"log_min_messages":        "warning",
	}
	for k, v := range opts.Settings {
		settings[k] = v
	}
	p := &Postgres{Host: "127.0.0.1", Dir: dir, BinDir: bin, Version: ver, cred: cred, uid: uid, gid: gid, settings: settings}
	if err := p.launch(ctx); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return p, nil
}

// launch starts the server of p.Dir/data on a free port with p.settings,
// and returns once it accepts connections.
func (p *Postgres) launch(ctx context.Context) error {
	data := filepath.Join(p.Dir, "data")
	settings := map[string]string{}
	for k, v := range p.settings {
		settings[k] = v
	}
	for attempt := 0; ; attempt++ {
		port, err := FreePort()
		if err != nil {
			return err
		}
		settings["port"] = strconv.Itoa(port)
		args := []string{"-D", data}
		keys := make([]string, 0, len(settings))
		for k := range settings {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			args = append(args, "-c", k+"="+settings[k])
		}
		logPath := filepath.Join(p.Dir, "postgres.log")
		lf, err := os.Create(logPath)
		if err != nil {
			return err
		}
		cmd := exec.Command(filepath.Join(p.BinDir, "postgres"), args...)
		cmd.Stdout, cmd.Stderr = lf, lf
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: p.cred}
		proc, err := startProcess(cmd)
		lf.Close()
		if err != nil {
			return fmt.Errorf("start postgres: %w", err)
		}
		p.Port, p.proc, p.log = port, proc, logPath
		err = waitFor("postgres", 60*time.Second, proc.exited, logPath, func() error {
			c, err := pgx.Connect(ctx, p.DSN("postgres"))
			if err != nil {
				return err
			}
			return c.Close(ctx)
		})
		if err == nil {
			return nil
		}
		_ = proc.stop(syscall.SIGQUIT, 5*time.Second)
		if attempt >= 2 {
			return err
		}
	}
}

// PostgresT starts a server for a test and stops it at cleanup. A missing
// PostgreSQL skips the test, except in CI where it fails.
func PostgresT(t testing.TB, opts ...PostgresOptions) *Postgres {
	t.Helper()
	return serverT(t, opts, StartPostgres)
}

// DSN is a libpq URL for the superuser on database db.
func (p *Postgres) DSN(db string) string {
	return fmt.Sprintf("postgres://postgres@%s:%d/%s?sslmode=disable", p.Host, p.Port, db)
}

// UserDSN is a URL for user:password on db.
func (p *Postgres) UserDSN(user, password, db string) string {
	return fmt.Sprintf("postgres://%s:%s@%s:%d/%s?sslmode=disable", user, password, p.Host, p.Port, db)
}

// Exec runs statements as the superuser on db.
func (p *Postgres) Exec(ctx context.Context, db string, sqls ...string) error {
	c, err := pgx.Connect(ctx, p.DSN(db))
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	for _, s := range sqls {
		if _, err := c.Exec(ctx, s); err != nil {
			return fmt.Errorf("%s: %w", s, err)
		}
	}
	return nil
}

// CreateDatabase creates database name.
func (p *Postgres) CreateDatabase(ctx context.Context, name string) error {
	return p.Exec(ctx, "postgres", "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
}

// Log returns the tail of the server log.
func (p *Postgres) Log() string { return tail(p.log, 8000) }

// Stop shuts the server down (fast mode) and removes its directory.
func (p *Postgres) Stop() error {
	err := p.proc.stop(syscall.SIGINT, 30*time.Second)
	os.RemoveAll(p.Dir)
	return err
}

// Kill stops the server with SIGKILL and keeps its directory (crash tests).
func (p *Postgres) Kill() { _ = p.proc.stop(syscall.SIGKILL, time.Second) }
