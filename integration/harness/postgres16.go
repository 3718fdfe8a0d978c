package harness

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Postgres16Version is the PostgreSQL release scripts/postgres16.sh fetches
// (in step with integration/postgres16/pom.xml).
const Postgres16Version = "16.6.0"

const postgres16Timeout = 10 * time.Minute

// Postgres16BinDir returns the bin directory of PostgreSQL 16 server
// binaries: the cache ${SLUICE_CACHE:-$HOME/.cache/sluice}/postgres-<version>,
// filled first by scripts/postgres16.sh (Maven) when it is missing. Logical
// decoding on a hot standby needs 16; Debian 12 packages 15.
//
// When the tests run as root the servers run as the postgres user, who
// may not reach a cache under root's home: the binaries are then copied
// once to a directory of the system's temp dir that everyone can read.
func Postgres16BinDir(ctx context.Context) (string, error) {
	cache, err := cacheRoot()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(cache, "postgres-"+Postgres16Version)
	if !postgres16Complete(dir) {
		if err := runCacheScript(ctx, cache, "postgres16.sh", dir, "the PostgreSQL 16 binaries", postgres16Timeout); err != nil {
			return "", err
		}
		if !postgres16Complete(dir) {
			return "", fmt.Errorf("scripts/postgres16.sh left no complete binaries in %s", dir)
		}
	}
	cred, _, _, err := serviceUser("postgres")
	if err != nil || cred == nil {
		return filepath.Join(dir, "bin"), err
	}
	shared := filepath.Join(os.TempDir(), "sluice-postgres-"+Postgres16Version)
	if postgres16Complete(shared) {
		return filepath.Join(shared, "bin"), nil
	}
	tmp, err := os.MkdirTemp(os.TempDir(), "sluice-postgres-copy-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	if out, err := exec.CommandContext(ctx, "cp", "-a", dir+"/.", tmp).CombinedOutput(); err != nil {
		return "", fmt.Errorf("copy the PostgreSQL 16 binaries for the postgres user: %v: %s", err, out)
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", err
	}
	// Another test process may have made it meanwhile: either copy works.
	if err := os.Rename(tmp, shared); err != nil && !postgres16Complete(shared) {
		return "", err
	}
	return filepath.Join(shared, "bin"), nil
}

func postgres16Complete(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, ".complete"))
	st, err2 := os.Stat(filepath.Join(dir, "bin", "postgres"))
	return err == nil && err2 == nil && st.Mode()&0o111 != 0
}

// Postgres16T starts a PostgreSQL 16 server for a test (hot_standby_feedback
// on, so a standby made from it can host logical slots) and stops it at
// cleanup. Missing binaries skip the test, except in CI where they fail.
func Postgres16T(t testing.TB, opts PostgresOptions) *Postgres {
	t.Helper()
	bin, err := Postgres16BinDir(context.Background())
	if err != nil {
		SkipOrFail(t, err)
	}
	opts.BinDir, opts.Version = bin, 16
	return PostgresT(t, opts)
}

// StartStandby makes a hot standby of p from an online base backup
// (pg_backup_start, a copy of the data directory, pg_backup_stop) and
// starts it streaming from p through a physical slot, with
// hot_standby_feedback on. It returns once the standby accepts
// connections. Stop it with Stop.
func (p *Postgres) StartStandby(ctx context.Context) (*Postgres, error) {
	c, err := pgx.Connect(ctx, p.DSN("postgres"))
	if err != nil {
		return nil, err
	}
	defer c.Close(ctx)
	dir, err := mkTemp("sluice-pg-standby-", p.uid, p.gid)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*Postgres, error) {
		os.RemoveAll(dir)
		return nil, err
	}
	slot := "standby_" + strings.TrimPrefix(filepath.Base(dir), "sluice-pg-standby-")
	slot = strings.ToLower(strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return '_'
	}, slot))
	if _, err := c.Exec(ctx, "SELECT pg_create_physical_replication_slot($1, true)", slot); err != nil {
		return fail(err)
	}
	if _, err := c.Exec(ctx, "SELECT pg_backup_start('sluice standby', true)"); err != nil {
		return fail(err)
	}
	data := filepath.Join(dir, "data")
	if out, err := exec.CommandContext(ctx, "cp", "-a", filepath.Join(p.Dir, "data"), data).CombinedOutput(); err != nil {
		return fail(fmt.Errorf("copy the data directory: %v: %s", err, out))
	}
	var label string
	if err := c.QueryRow(ctx, "SELECT labelfile FROM pg_backup_stop(false)").Scan(&label); err != nil {
		return fail(err)
	}
	// What a base backup leaves out: the server's pid file and options,
	// the WAL (streamed from the slot), the primary's slots.
	for _, f := range []string{"postmaster.pid", "postmaster.opts"} {
		_ = os.Remove(filepath.Join(data, f))
	}
	for _, d := range []string{"pg_wal", "pg_replslot"} {
		entries, _ := os.ReadDir(filepath.Join(data, d))
		for _, e := range entries {
			_ = os.RemoveAll(filepath.Join(data, d, e.Name()))
		}
	}
	if err := os.MkdirAll(filepath.Join(data, "pg_wal", "archive_status"), 0o700); err != nil {
		return fail(err)
	}
	files := map[string]string{
		"backup_label":   label,
		"standby.signal": "",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(data, name), []byte(body), 0o600); err != nil {
			return fail(err)
		}
	}
	if p.cred != nil {
		if out, err := exec.CommandContext(ctx, "chown", "-R", fmt.Sprintf("%d:%d", p.uid, p.gid), dir).CombinedOutput(); err != nil {
			return fail(fmt.Errorf("chown the standby: %v: %s", err, out))
		}
	}
	settings := map[string]string{}
	for k, v := range p.settings {
		settings[k] = v
	}
	settings["unix_socket_directories"] = dir
	settings["hot_standby"] = "on"
	settings["hot_standby_feedback"] = "on"
	settings["primary_conninfo"] = fmt.Sprintf("host=%s port=%d user=postgres application_name=%s", p.Host, p.Port, slot)
	settings["primary_slot_name"] = slot
	s := &Postgres{Host: "127.0.0.1", Dir: dir, BinDir: p.BinDir, Version: p.Version, cred: p.cred, uid: p.uid, gid: p.gid, settings: settings}
	if err := s.launch(ctx); err != nil {
		return fail(err)
	}
	return s, nil
}

// StandbyT makes a hot standby of p for a test (StartStandby) and stops
// it at cleanup.
func (p *Postgres) StandbyT(t testing.TB) *Postgres {
	t.Helper()
	s, err := p.StartStandby(context.Background())
	if err != nil {
		t.Fatalf("start a standby: %v", err)
	}
	t.Cleanup(func() { _ = s.Stop() })
	return s
}

// CatchUp returns once the standby s has replayed the WAL primary had
// written when it was called.
func (s *Postgres) CatchUp(ctx context.Context, primary *Postgres) error {
	pc, err := pgx.Connect(ctx, primary.DSN("postgres"))
	if err != nil {
		return err
	}
	defer pc.Close(ctx)
	var want string
	if err := pc.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&want); err != nil {
		return err
	}
	sc, err := pgx.Connect(ctx, s.DSN("postgres"))
	if err != nil {
		return err
	}
	defer sc.Close(ctx)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var done bool
		if err := sc.QueryRow(ctx, "SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn", want).Scan(&done); err != nil {
			return err
		}
		if done {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the standby did not replay up to %s in 2 minutes:\n%s", want, s.Log())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}
