package harness

import (
	"context"
	"os"
	"strings"
	"testing"
)

func TestMariaDBStartsWithCDCSettings(t *testing.T) {
	m := MariaDBT(t)
	ctx := context.Background()
	got, err := m.Query(ctx, "", "SELECT @@binlog_format, @@binlog_row_image, @@binlog_row_metadata, @@gtid_strict_mode, @@log_bin, @@server_id, @@log_slave_updates")
	if err != nil {
		t.Fatal(err)
	}
	if want := "ROW\tFULL\tFULL\t1\t1\t1\t1"; got != want {
		t.Fatalf("CDC settings = %q, want %q", got, want)
	}
	if !strings.HasPrefix(m.DSN("shop"), "root@tcp(127.0.0.1:") || !strings.HasSuffix(m.DSN("shop"), ")/shop") {
		t.Fatalf("DSN = %q", m.DSN("shop"))
	}
	if err := m.CreateDatabase(ctx, "shop"); err != nil {
		t.Fatal(err)
	}
	err = m.Exec(ctx, "shop",
		"CREATE TABLE t (id INT PRIMARY KEY, note VARCHAR(40), n INT NOT NULL DEFAULT 0)",
		// A body with ';' inside proves statements are not split on ';'.
		`CREATE TRIGGER t_bi BEFORE INSERT ON t FOR EACH ROW BEGIN
			SET NEW.n = NEW.id * 10;
			SET NEW.note = CONCAT(NEW.note, ';');
		END`,
		"SET @x = 2",
		"INSERT INTO t (id, note) VALUES (1, 'a\tb'), (@x, NULL);",
	)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := m.Query(ctx, "shop", "SELECT id, note, n FROM t ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	if want := "1\ta\\tb;\t10\n2\tNULL\t20"; rows != want {
		t.Fatalf("rows = %q, want %q", rows, want)
	}
	status, err := m.Query(ctx, "", "SHOW MASTER STATUS")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(status, "mysql-bin.") {
		t.Fatalf("SHOW MASTER STATUS = %q, want a binlog file", status)
	}
	gtid, err := m.Query(ctx, "", "SELECT @@gtid_binlog_pos")
	if err != nil || !strings.HasPrefix(gtid, "0-1-") {
		t.Fatalf("gtid_binlog_pos = %q, %v", gtid, err)
	}

	err = m.Exec(ctx, "shop", "INSERT INTO t (id) VALUES (3)", "SELECT * FROM nope", "INSERT INTO t (id) VALUES (4)")
	if err == nil || !strings.Contains(err.Error(), "SELECT * FROM nope") || !strings.Contains(err.Error(), "1146") {
		t.Fatalf("Exec error = %v, want the failing statement and error 1146", err)
	}
	if n, err := m.Query(ctx, "shop", "SELECT COUNT(*) FROM t"); err != nil || n != "3" {
		t.Fatalf("count after failed Exec = %q, %v; want 3 (the session stops at the error)", n, err)
	}

	if err := m.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(m.Dir); !os.IsNotExist(err) {
		t.Fatalf("Stop left %s behind: %v", m.Dir, err)
	}
}

func TestMariaDBSettingsOverrideAndRestart(t *testing.T) {
	m := MariaDBT(t, MariaDBOptions{Settings: map[string]string{"binlog-format": "STATEMENT", "binlog_row_metadata": ""}})
	ctx := context.Background()
	got, err := m.Query(ctx, "", "SELECT @@binlog_format, @@binlog_row_metadata, @@binlog_row_image")
	if err != nil {
		t.Fatal(err)
	}
	if want := "STATEMENT\tNO_LOG\tFULL"; got != want {
		t.Fatalf("settings = %q, want %q", got, want)
	}
	if err := m.Exec(ctx, "", "CREATE DATABASE d", "CREATE TABLE d.t (id INT PRIMARY KEY)", "INSERT INTO d.t VALUES (7)"); err != nil {
		t.Fatal(err)
	}
	port := m.Port
	m.Kill()
	if _, err := m.Query(ctx, "", "SELECT 1"); err == nil {
		t.Fatal("query succeeded after Kill")
	}
	if err := m.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if m.Port != port {
		t.Fatalf("port changed across Restart: %d -> %d", port, m.Port)
	}
	if got, err := m.Query(ctx, "d", "SELECT id FROM t"); err != nil || got != "7" {
		t.Fatalf("after crash and restart: %q, %v", got, err)
	}
	if err := m.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(m.Dir); !os.IsNotExist(err) {
		t.Fatalf("Stop left %s behind: %v", m.Dir, err)
	}
}
