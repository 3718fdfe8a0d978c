package integration

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/integration/harness"
)

// Columns added with DEFAULTs to a MariaDB table that then sees no row
// change reach DuckDB (Invariant 11) with the rows that predate them
// holding the defaults, and sluice verify finds the sink equal to MariaDB.
func TestMariaDBColumnAddedToAnIdleTable(t *testing.T) {
	m := harness.MariaDBT(t)
	ctx := context.Background()
	addr := net.JoinHostPort(m.Host, strconv.Itoa(m.Port))
	if err := m.Exec(ctx, "", "CREATE DATABASE shape", "CREATE TABLE shape.t (id INT PRIMARY KEY, v VARCHAR(20))",
		"INSERT INTO shape.t VALUES (1, 'one'), (2, 'two'), (3, 'three')"); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg := filepath.Join(dir, "shape.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf(`pipeline: shape
source:
  mysql:
    dsn: mysql://root@%s
    tables: [shape.t]
    heartbeat_interval: 200ms
sinks:
  - duckdb: {path: ./sink.duckdb}
offsets: {dir: ./offsets}
runtime: {checkpoint_interval: 100ms}
`, addr)), 0o644)
	d := startDaemon(t, cfg)
	d.waitAddr(t, 2*time.Minute)
	waitFile(t, filepath.Join(dir, "offsets", "checkpoint.json"), d)
	if err := m.Exec(ctx, "", "UPDATE shape.t SET v = 'uno' WHERE id = 1",
		"ALTER TABLE shape.t ADD COLUMN note VARCHAR(10) DEFAULT 'n''a', ADD COLUMN amount DECIMAL(6,2) NOT NULL DEFAULT 1.5, ADD COLUMN day DATE DEFAULT '2024-02-29'"); err != nil {
		t.Fatal(err)
	}
	eoWaitLog(t, d, "table shape changed with no row change after it", time.Minute)
	// A clean stop drains what was read: the shape is in DuckDB.
	d.signal(syscall.SIGTERM)
	if code := d.wait(t, time.Minute); code != 0 {
		t.Fatalf("exit %d:\n%s", code, d.logs())
	}
	expectVerifyEqual(t, cfg)
}
