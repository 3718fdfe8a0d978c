package integration

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/client"

	"github.com/sluice-cdc/sluice/integration/harness"
	"github.com/sluice-cdc/sluice/sources/mysql"

	_ "github.com/duckdb/duckdb-go/v2"
)

// kill -9 of the binary between the BEGIN and the XID of a large
// transaction (after part of it is already in DuckDB, before the
// checkpoint passed it): after the restart the whole transaction arrives,
// each of its rows exactly once, with one version per row.
func TestKill9InsideTransactionMariaDB(t *testing.T) {
	m := harness.MariaDBT(t)
	ctx := context.Background()
	addr := net.JoinHostPort(m.Host, strconv.Itoa(m.Port))
	if err := m.Exec(ctx, "", "CREATE DATABASE k", "CREATE TABLE k.big (id INT PRIMARY KEY, v VARCHAR(200))"); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg := filepath.Join(dir, "k.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf(`pipeline: killtx
source:
  mysql:
    dsn: mysql://root@%s
    tables: [k.big]
    heartbeat_interval: 1s
sinks:
  - duckdb: {path: ./sink.duckdb}
offsets: {dir: ./offsets}
runtime: {checkpoint_interval: 100ms, batch_max_records: 2000}
`, addr)), 0o644)
	checkpoint := filepath.Join(dir, "offsets", "checkpoint.json")

	d := startDaemon(t, cfg)
	base := "http://" + d.waitAddr(t, 2*time.Minute)
	deadline := time.Now().Add(time.Minute)
	for checkpointGTID(t, checkpoint) == "" {
		if time.Now().After(deadline) {
			t.Fatalf("no checkpoint after the (empty) load:\n%s", d.logs())
		}
		time.Sleep(20 * time.Millisecond)
	}
	before := checkpointGTID(t, checkpoint)

	// One transaction of 300,000 rows.
	const rows = 300000
	c, err := client.Connect(addr, "root", "", "k")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	exec := func(q string) {
		if _, err := c.Execute(q); err != nil {
			t.Fatalf("%.60s: %v", q, err)
		}
	}
	exec("BEGIN")
	for lo := 0; lo < rows; lo += 1000 {
		var sb strings.Builder
		sb.WriteString("INSERT INTO big VALUES ")
		for i := lo; i < lo+1000; i++ {
			if i > lo {
				sb.WriteByte(',')
			}
			fmt.Fprintf(&sb, "(%d, '%d %s')", i, i, strings.Repeat("v", 100))
		}
		exec(sb.String())
	}
	exec("COMMIT")

	// Kill once rows of the transaction have left the source while the
	// checkpoint is still before it.
	deadline = time.Now().Add(2 * time.Minute)
	for metricSum(t, base, "sluice_mysql_rows_total") < 20000 {
		if time.Now().After(deadline) {
			t.Fatalf("the transaction never started to arrive:\n%s", d.logs())
		}
		time.Sleep(5 * time.Millisecond)
	}
	d.signal(syscall.SIGKILL)
	<-d.done
	if g := checkpointGTID(t, checkpoint); g != before {
		t.Fatalf("the checkpoint moved into the open transaction: %s (was %s)", g, before)
	}

	d = startDaemon(t, cfg)
	d.waitAddr(t, 2*time.Minute)
	mark, err := m.Query(ctx, "", "SELECT @@GLOBAL.gtid_binlog_pos")
	if err != nil {
		t.Fatal(err)
	}
	waitCheckpointAt(t, d, checkpoint, mark)
	d.signal(syscall.SIGTERM)
	if code := d.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("exit %d:\n%s", code, d.logs())
	}
	duck := filepath.Join(dir, "sink.duckdb")
	if n := assertSinkEqualsMySQL(t, ctx, mysql.Options{Pipeline: "verify", DSN: "mysql://root@" + addr}, duck, "k", "big"); n != rows {
		t.Fatalf("%d rows, want %d", n, rows)
	}
	expectVerifyEqual(t, cfg)
	// One transaction: one binlog offset, and every row index once.
	db, err := sql.Open("duckdb", duck+"?access_mode=read_only")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var txs, indexes int
	if err := db.QueryRow(`SELECT count(DISTINCT substr(hex(_sluice_version), 1, 48)), count(DISTINCT _sluice_version) FROM main.k_big`).
		Scan(&txs, &indexes); err != nil {
		t.Fatal(err)
	}
	if txs != 1 || indexes != rows {
		t.Fatalf("%d transaction offsets and %d distinct versions, want 1 and %d", txs, indexes, rows)
	}
}
