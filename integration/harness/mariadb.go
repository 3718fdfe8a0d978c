package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// MariaDBOptions tunes a throwaway MariaDB server.
type MariaDBOptions struct {
	// Settings override or extend the default server options, each passed
	// as --name=value. Names may be spelled with '-' or '_'. An empty value
	// removes a default: {"log_bin": ""} runs without a binary log. The
	// options datadir, port, socket, pid_file and tmpdir belong to the
	// harness and cannot be overridden.
	Settings map[string]string
}

// mariadbDefaults are the server options for CDC tests: a row-based binary
// log with full row images and metadata, GTIDs in strict mode, TCP on
// 127.0.0.1 only, and a small, fast InnoDB. A statement waits at most
// five minutes for a metadata lock (the server's default is a day): a DDL
// stuck behind a transaction a test left open fails with the statement
// named instead of hanging the package until go test's timeout.
var mariadbDefaults = map[string]string{
	"lock_wait_timeout":              "300",
	"bind_address":                   "127.0.0.1",
	"skip_networking":                "0",
	"skip_name_resolve":              "ON",
	"log_bin":                        "mysql-bin",
	"binlog_format":                  "ROW",
	"binlog_row_image":               "FULL",
	"binlog_row_metadata":            "FULL",
	"server_id":                      "1",
	"gtid_strict_mode":               "ON",
	"log_slave_updates":              "ON",
	"innodb_buffer_pool_size":        "32M",
	"innodb_flush_log_at_trx_commit": "2",
	"character_set_server":           "utf8mb4",
	"collation_server":               "utf8mb4_general_ci",
	"max_connections":                "200",
}

// mariadbFixed are the options the harness sets itself.
var mariadbFixed = map[string]bool{"datadir": true, "port": true, "socket": true, "pid_file": true, "tmpdir": true}

// MariaDB is a running throwaway MariaDB server. Its "root" account is
// reachable over TCP from 127.0.0.1 with no password.
type MariaDB struct {
	Host   string
	Port   int
	Dir    string // temp dir: data/, the socket, the log
	Socket string // Unix socket path
	Server string // path of the server binary (mariadbd or mysqld)
	Client string // path of the command-line client (mariadb or mysql)

	args []string // server arguments, without --port
	cred *syscall.Credential
	proc *process
	log  string
}

// MariaDBBinaries finds the server, database-initialisation and client
// binaries of an installed MariaDB (mariadbd, mariadb-install-db, mariadb),
// falling back to their older mysqld, mysql_install_db and mysql names.
func MariaDBBinaries() (server, installDB, client string, err error) {
	const hint = "install them: apt-get install mariadb-server mariadb-client"
	if server, err = lookBinary(hint, "mariadbd", "mysqld"); err != nil {
		return "", "", "", err
	}
	if installDB, err = lookBinary(hint, "mariadb-install-db", "mysql_install_db"); err != nil {
		return "", "", "", err
	}
	if client, err = lookBinary(hint, "mariadb", "mysql"); err != nil {
		return "", "", "", err
	}
	return server, installDB, client, nil
}

// StartMariaDB initialises a data directory in a new temp dir and starts a
// server on a random 127.0.0.1 port. When the caller is root the server runs
// as the "mysql" system user. Stop it with Stop.
func StartMariaDB(ctx context.Context, opts MariaDBOptions) (*MariaDB, error) {
	server, installDB, client, err := MariaDBBinaries()
	if err != nil {
		return nil, err
	}
	cred, uid, gid, err := serviceUser("mysql")
	if err != nil {
		return nil, err
	}
	dir, err := mkTemp("sluice-mariadb-", uid, gid)
	if err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "data")
	// "normal" root authentication creates root@localhost, root@127.0.0.1
	// and root@::1 with an empty password.
	install := exec.CommandContext(ctx, installDB, "--no-defaults", "--datadir="+data,
		"--auth-root-authentication-method=normal", "--skip-test-db", "--skip-name-resolve",
		"--tmpdir="+dir)
	install.Dir = dir
	install.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := install.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("%s: %v\n%s", filepath.Base(installDB), err, out)
	}
	m := &MariaDB{
		Host:   "127.0.0.1",
		Dir:    dir,
		Socket: filepath.Join(dir, "mariadb.sock"),
		Server: server,
		Client: client,
		cred:   cred,
		log:    filepath.Join(dir, "mariadb.log"),
	}
	m.args = mariadbArgs(data, dir, m.Socket, opts.Settings)
	for attempt := 0; ; attempt++ {
		if m.Port, err = FreePort(); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		exited, err := m.start(ctx)
		if err == nil {
			return m, nil
		}
		// Only a server that exited (its port was taken) is worth retrying.
		if attempt >= 2 || ctx.Err() != nil || !exited {
			os.RemoveAll(dir)
			return nil, err
		}
	}
}

// mariadbArgs builds the server command line; --no-defaults must come first
// so that /etc/mysql and ~/.my.cnf are not read.
func mariadbArgs(data, dir, socket string, overrides map[string]string) []string {
	settings := map[string]string{}
	for k, v := range mariadbDefaults {
		settings[k] = v
	}
	for k, v := range overrides {
		k = strings.ReplaceAll(strings.TrimLeft(k, "-"), "-", "_")
		if mariadbFixed[k] {
			continue
		}
		if v == "" {
			delete(settings, k)
			continue
		}
		settings[k] = v
	}
	keys := make([]string, 0, len(settings))
	for k := range settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	args := []string{"--no-defaults"}
	for _, k := range keys {
		args = append(args, "--"+k+"="+settings[k])
	}
	return append(args, "--datadir="+data, "--socket="+socket,
		"--pid-file="+filepath.Join(dir, "mariadb.pid"), "--tmpdir="+dir)
}

// start runs the server on m.Port and waits until the client can connect.
// exited reports a server that quit by itself during start-up.
func (m *MariaDB) start(ctx context.Context) (exited bool, err error) {
	lf, err := os.OpenFile(m.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return false, err
	}
	args := append(append([]string{}, m.args...), "--port="+strconv.Itoa(m.Port))
	cmd := exec.Command(m.Server, args...)
	cmd.Dir = m.Dir
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: m.cred}
	proc, err := startProcess(cmd)
	lf.Close()
	if err != nil {
		return false, fmt.Errorf("start %s: %w", filepath.Base(m.Server), err)
	}
	m.proc = proc
	err = waitForCtx(ctx, "mariadb", 60*time.Second, proc.exited, m.log, func() error {
		// The socket appears with the TCP listener; checking it first saves
		// starting a client (and a log line per refused probe) every tick.
		if _, err := os.Stat(m.Socket); err != nil {
			return err
		}
		_, err := m.Query(ctx, "", "SELECT 1")
		return err
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

// MariaDBT starts a server for a test and stops it at cleanup. A missing
// MariaDB skips the test, except in CI where it fails.
func MariaDBT(t testing.TB, opts ...MariaDBOptions) *MariaDB {
	t.Helper()
	return serverT(t, opts, StartMariaDB)
}

// DSN is a go-sql-driver/mysql style data source name for root on database
// db (which may be empty): "root@tcp(127.0.0.1:PORT)/db".
func (m *MariaDB) DSN(db string) string {
	return fmt.Sprintf("root@tcp(%s)/%s", net.JoinHostPort(m.Host, strconv.Itoa(m.Port)), db)
}

// UserDSN is a go-sql-driver/mysql style data source name for user:password
// on db: "user:password@tcp(127.0.0.1:PORT)/db".
func (m *MariaDB) UserDSN(user, password, db string) string {
	return fmt.Sprintf("%s:%s@tcp(%s)/%s", user, password, net.JoinHostPort(m.Host, strconv.Itoa(m.Port)), db)
}

// Exec runs statements as root on database db (empty for none) in one client
// session, so session settings carry over from one statement to the next.
// A statement may contain ';' (trigger and procedure bodies); it must not
// end with a DELIMITER of its own. The first failing statement stops the
// session and is named in the error.
func (m *MariaDB) Exec(ctx context.Context, db string, sqls ...string) error {
	_, err := m.run(ctx, db, false, sqls)
	return err
}

// Query runs one statement as root on db (empty for none) and returns the
// client's batch output without column names (-N -B): one line per row,
// columns separated by tabs, NULL as "NULL", and tab, newline and backslash
// inside values escaped as \t, \n and \\. The final newline is removed.
func (m *MariaDB) Query(ctx context.Context, db, sql string) (string, error) {
	out, err := m.run(ctx, db, true, []string{sql})
	return strings.TrimSuffix(out, "\n"), err
}

// CreateDatabase creates database name.
func (m *MariaDB) CreateDatabase(ctx context.Context, name string) error {
	return m.Exec(ctx, "", "CREATE DATABASE "+mariadbIdent(name))
}

// mariadbIdent quotes an identifier with backticks.
func mariadbIdent(s string) string { return "`" + strings.ReplaceAll(s, "`", "``") + "`" }

// mariadbDelimiter ends each statement fed to the client, so that ';' inside
// a statement does not split it.
const mariadbDelimiter = "//sluice//"

var mariadbErrLine = regexp.MustCompile(`at line (\d+)`)

// run feeds statements to the command-line client over TCP and returns its
// standard output.
func (m *MariaDB) run(ctx context.Context, db string, query bool, sqls []string) (string, error) {
	var script strings.Builder
	script.WriteString("DELIMITER " + mariadbDelimiter + "\n")
	line := 2
	starts := make([]int, len(sqls))
	for i, s := range sqls {
		s = strings.TrimSpace(s)
		s = strings.TrimSpace(strings.TrimSuffix(s, ";"))
		starts[i] = line
		script.WriteString(s + "\n" + mariadbDelimiter + "\n")
		line += strings.Count(s, "\n") + 2
	}
	args := []string{"--no-defaults", "--protocol=TCP", "-h", m.Host, "-P", strconv.Itoa(m.Port),
		"-u", "root", "--default-character-set=utf8mb4", "--connect-timeout=5", "--batch"}
	if query {
		args = append(args, "--skip-column-names")
	}
	if db != "" {
		args = append(args, "--database="+db)
	}
	cmd := exec.CommandContext(ctx, m.Client, args...)
	cmd.Stdin = strings.NewReader(script.String())
	cmd.Env = mariadbClientEnv()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err == nil {
		return stdout.String(), nil
	}
	msg := strings.TrimSpace(stderr.String())
	if msg == "" {
		msg = err.Error()
	}
	if g := mariadbErrLine.FindStringSubmatch(msg); g != nil {
		n, _ := strconv.Atoi(g[1])
		for i := len(starts) - 1; i >= 0; i-- {
			if starts[i] <= n {
				return stdout.String(), fmt.Errorf("%s: %s", strings.TrimSpace(sqls[i]), msg)
			}
		}
	}
	if ctx.Err() != nil {
		return stdout.String(), fmt.Errorf("%s: %w", msg, ctx.Err())
	}
	return stdout.String(), errors.New(msg)
}

// mariadbClientEnv is the environment without the MYSQL_* and MARIADB_*
// variables, which would point or authenticate the client elsewhere.
func mariadbClientEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "MYSQL_") || strings.HasPrefix(kv, "MARIADB_") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// Log returns the tail of the server log.
func (m *MariaDB) Log() string { return tail(m.log, 8000) }

// Restart starts the server again on the same directory and port, after a
// Kill (crash recovery) or on a running server (which is stopped cleanly
// first).
func (m *MariaDB) Restart(ctx context.Context) error {
	// A server that had to be killed is stopped all the same.
	_ = m.proc.stop(syscall.SIGTERM, 30*time.Second)
	_, err := m.start(ctx)
	return err
}

// Stop shuts the server down cleanly (SIGTERM, then SIGKILL after 30s) and
// removes its directory. Stopping twice is harmless.
func (m *MariaDB) Stop() error {
	err := m.proc.stop(syscall.SIGTERM, 30*time.Second)
	os.RemoveAll(m.Dir)
	return err
}

// Kill stops the server with SIGKILL and keeps its directory (crash tests;
// see Restart). Stop still removes the directory afterwards.
func (m *MariaDB) Kill() { _ = m.proc.stop(syscall.SIGKILL, time.Second) }
