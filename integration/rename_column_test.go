package integration

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/integration/harness"
)

// A column renamed while streaming (ALTER TABLE … RENAME COLUMN v TO w)
// moves every row's value to a column DuckDB never held a value of, with
// no change event: the table is read again, and sluice verify finds the
// sink equal to the source. Before, every row that did not change after
// the rename held NULL in w.
func TestColumnRenamedWhileStreaming(t *testing.T) {
	ctx := context.Background()
	t.Run("postgres", func(t *testing.T) {
		pg := harness.PostgresT(t)
		if err := pg.CreateDatabase(ctx, "rncol"); err != nil {
			t.Fatal(err)
		}
		renameColumn(t, fmt.Sprintf("postgres: {dsn: '%s', tables: [public.t], heartbeat_interval: 200ms}", pg.DSN("rncol")),
			func(stmts ...string) error { return pg.Exec(ctx, "rncol", stmts...) }, "t")
	})
	t.Run("mariadb", func(t *testing.T) {
		m := harness.MariaDBT(t)
		addr := net.JoinHostPort(m.Host, strconv.Itoa(m.Port))
		if err := m.Exec(ctx, "", "CREATE DATABASE rncol"); err != nil {
			t.Fatal(err)
		}
		renameColumn(t, fmt.Sprintf("mysql: {dsn: 'mysql://root@%s', tables: [rncol.t], heartbeat_interval: 200ms}", addr),
			func(stmts ...string) error { return m.Exec(ctx, "", stmts...) }, "rncol.t")
	})
}

func renameColumn(t *testing.T, source string, exec func(...string) error, table string) {
	if err := exec("CREATE TABLE "+table+" (id INT PRIMARY KEY, v VARCHAR(20), n INT)",
		"INSERT INTO "+table+" VALUES (1, 'one', 1), (2, 'two', 2), (3, 'three', 3)"); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg := filepath.Join(dir, "rn.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf(`pipeline: rncol
source:
  %s
sinks:
  - duckdb: {path: ./sink.duckdb}
offsets: {dir: ./offsets}
runtime: {checkpoint_interval: 50ms}
`, source)), 0o644)
	d := startDaemon(t, cfg)
	d.waitAddr(t, 2*time.Minute)
	waitFile(t, filepath.Join(dir, "offsets", "checkpoint.json"), d)
	if err := exec("ALTER TABLE "+table+" RENAME COLUMN v TO w", "UPDATE "+table+" SET n = -n WHERE id = 1",
		"INSERT INTO "+table+" VALUES (4, 'four', 4)"); err != nil {
		t.Fatal(err)
	}
	// The read again ends after the rename was seen.
	eoWaitLog(t, d, "table rewritten without change events: reading it again", time.Minute)
	from := strings.Index(eoFullLog(d), "table rewritten without change events: reading it again")
	for deadline := time.Now().Add(time.Minute); !strings.Contains(eoFullLog(d)[from:], `"table snapshotted"`); {
		if time.Now().After(deadline) {
			t.Fatalf("the table was not read again within a minute:\n%s", d.logs())
		}
		time.Sleep(10 * time.Millisecond)
	}
	// A clean stop drains what was read.
	d.signal(syscall.SIGTERM)
	if code := d.wait(t, time.Minute); code != 0 {
		t.Fatalf("exit %d:\n%s", code, d.logs())
	}
	expectVerifyEqual(t, cfg)
}
