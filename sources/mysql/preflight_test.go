package mysql

import (
	"context"
	"errors"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/go-mysql-org/go-mysql/client"

	"github.com/sluice-cdc/sluice/integration/harness"
)

var ctx = context.Background()

// One throwaway server for the package.
var (
	srvOnce sync.Once
	srv     *harness.MariaDB
	srvErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if srv != nil {
		_ = srv.Stop()
	}
	os.Exit(code)
}

func server(t testing.TB) *harness.MariaDB {
	t.Helper()
	srvOnce.Do(func() { srv, srvErr = harness.StartMariaDB(ctx, harness.MariaDBOptions{}) })
	if srvErr != nil {
		harness.SkipOrFail(t, srvErr)
	}
	return srv
}

func connect(t testing.TB, m *harness.MariaDB, user, password string) *client.Conn {
	t.Helper()
	c, err := client.Connect(net.JoinHostPort(m.Host, strconv.Itoa(m.Port)), user, password, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func problems(t *testing.T, err error) []string {
	t.Helper()
	var pe *PreflightError
	if !errors.As(err, &pe) {
		t.Fatalf("want a *PreflightError, got %v", err)
	}
	return pe.Problems
}

// expect asserts that each want is a substring of one problem, in order,
// and that there are no other problems.
func expect(t *testing.T, got []string, want ...[]string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d problems, want %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
	}
	for i, parts := range want {
		for _, p := range parts {
			if !strings.Contains(got[i], p) {
				t.Errorf("problem %d lacks %q:\n%s", i+1, p, got[i])
			}
		}
	}
}

func TestPreflight(t *testing.T) {
	m := server(t)
	if err := m.Exec(ctx, "", "CREATE DATABASE pre", "CREATE TABLE pre.t (id int PRIMARY KEY, v text)",
		"CREATE TABLE pre.nopk (x int)", "CREATE USER 'weak'@'%' IDENTIFIED BY 'pw'", "GRANT SELECT ON pre.t TO 'weak'@'%'"); err != nil {
		t.Fatal(err)
	}
	root := connect(t, m, "root", "")

	t.Run("ready server", func(t *testing.T) {
		s, err := Preflight(ctx, root, PreflightOptions{Tables: []string{"pre.t"}, ServerID: 4242})
		if err != nil {
			t.Fatal(err)
		}
		if !s.MariaDB || s.Major < 10 || s.ServerID != 1 || len(s.Warnings) != 0 {
			t.Fatalf("server: %+v", s)
		}
	})

	t.Run("tables and server id", func(t *testing.T) {
		_, err := Preflight(ctx, root, PreflightOptions{Tables: []string{"pre.nopk", "pre.missing", "nodot"}, ServerID: 1})
		expect(t, problems(t, err),
			[]string{"pre.nopk has no primary key", "ALTER TABLE `pre`.`nopk` ADD PRIMARY KEY"},
			[]string{"pre.missing does not exist"},
			[]string{`"nodot" is not database.table`},
			[]string{"server_id 1", "server's own"})
	})

	t.Run("missing privileges", func(t *testing.T) {
		weak := connect(t, m, "weak", "pw")
		_, err := Preflight(ctx, weak, PreflightOptions{Tables: []string{"pre.t"}})
		expect(t, problems(t, err),
			[]string{"lacks BINLOG MONITOR", "GRANT BINLOG MONITOR ON *.* TO 'weak'@'%'"},
			[]string{"lacks REPLICATION SLAVE", "GRANT REPLICATION SLAVE ON *.* TO 'weak'@'%'"})
	})

	t.Run("wrong binlog settings", func(t *testing.T) {
		if err := m.Exec(ctx, "", "SET GLOBAL binlog_format = 'STATEMENT'", "SET GLOBAL binlog_row_image = 'MINIMAL'",
			"SET GLOBAL binlog_row_metadata = 'MINIMAL'", "SET GLOBAL gtid_strict_mode = OFF",
			"SET GLOBAL expire_logs_days = 0.5"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = m.Exec(ctx, "", "SET GLOBAL binlog_format = 'ROW'", "SET GLOBAL binlog_row_image = 'FULL'",
				"SET GLOBAL binlog_row_metadata = 'FULL'", "SET GLOBAL gtid_strict_mode = ON", "SET GLOBAL expire_logs_days = 0")
		})
		s, err := Preflight(ctx, root, PreflightOptions{Tables: []string{"pre.t"}})
		expect(t, problems(t, err),
			[]string{"binlog_format is STATEMENT", "SET GLOBAL binlog_format = 'ROW'", "binlog_format=ROW"},
			[]string{"binlog_row_image is MINIMAL", "SET GLOBAL binlog_row_image = 'FULL'"},
			[]string{"binlog_row_metadata is MINIMAL", "SET GLOBAL binlog_row_metadata = 'FULL'"})
		if len(s.Warnings) != 2 || !strings.Contains(s.Warnings[0], "SET GLOBAL gtid_strict_mode = ON") ||
			!strings.Contains(s.Warnings[1], "purged after 43200s") {
			t.Fatalf("warnings: %q", s.Warnings)
		}
	})
}

// A server whose binlog filters leave a captured table's database out
// would never log a change of it: refused, naming the filter.
func TestPreflightBinlogFilters(t *testing.T) {
	m := harness.MariaDBT(t, harness.MariaDBOptions{Settings: map[string]string{"binlog_ignore_db": "quiet"}})
	if err := m.Exec(ctx, "", "CREATE DATABASE quiet", "CREATE TABLE quiet.t (id int PRIMARY KEY)",
		"CREATE DATABASE loud", "CREATE TABLE loud.t (id int PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	root := connect(t, m, "root", "")
	_, err := Preflight(ctx, root, PreflightOptions{Tables: []string{"quiet.t", "loud.t"}})
	expect(t, problems(t, err), []string{"leaves out database quiet", `binlog_ignore_db "quiet"`, "binlog_do_db"})
}

// A captured child of a cascading foreign key would keep in its sinks
// every row a cascade deletes or changes (the binlog carries none):
// refused with the trigger to use instead, unless listed in
// cascade_tables. A RESTRICT key, and a child that is not captured, pass.
func TestPreflightCascadingForeignKeys(t *testing.T) {
	m := server(t)
	if err := m.Exec(ctx, "", "CREATE DATABASE casc", "CREATE TABLE casc.p (id int PRIMARY KEY)",
		"CREATE TABLE casc.c (id int PRIMARY KEY, p int, CONSTRAINT c_p FOREIGN KEY (p) REFERENCES casc.p (id) ON DELETE CASCADE)",
		"CREATE TABLE casc.r (id int PRIMARY KEY, p int, FOREIGN KEY (p) REFERENCES casc.p (id))",
		"CREATE TABLE casc.n (id int PRIMARY KEY, p int, CONSTRAINT n_p FOREIGN KEY (p) REFERENCES casc.p (id) ON UPDATE SET NULL)"); err != nil {
		t.Fatal(err)
	}
	root := connect(t, m, "root", "")
	_, err := Preflight(ctx, root, PreflightOptions{Tables: []string{"casc.p", "casc.c", "casc.r", "casc.n"}})
	expect(t, problems(t, err),
		[]string{"casc.c is the child of foreign key c_p on casc.p (ON DELETE CASCADE)", "BEFORE DELETE ON casc.p", "cascade_tables"},
		[]string{"casc.n is the child of foreign key n_p on casc.p (ON UPDATE SET NULL)"})
	if _, err := Preflight(ctx, root, PreflightOptions{Tables: []string{"casc.p", "casc.c", "casc.r", "casc.n"},
		CascadeTables: []string{"casc.c", "casc.n"}}); err != nil {
		t.Fatalf("accepted cascades: %v", err)
	}
	if _, err := Preflight(ctx, root, PreflightOptions{Tables: []string{"casc.p", "casc.r"}}); err != nil {
		t.Fatalf("no captured child of a cascade: %v", err)
	}
}
