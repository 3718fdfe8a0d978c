package integration

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/client"

	"github.com/sluice-cdc/sluice/integration/harness"

	_ "github.com/duckdb/duckdb-go/v2"
)

// The join on a MariaDB source (tables named database.table; a key change
// arrives as a delete and an insert): DuckDB ends equal to the SQL join.
func TestJoinMariaDB(t *testing.T) {
	m := harness.MariaDBT(t)
	ctx := context.Background()
	addr := net.JoinHostPort(m.Host, strconv.Itoa(m.Port))
	if err := m.Exec(ctx, "", "CREATE DATABASE shop",
		"CREATE TABLE shop.customers (id INT UNSIGNED PRIMARY KEY, name VARCHAR(40) NOT NULL)",
		"CREATE TABLE shop.orders (id INT PRIMARY KEY, customer_id INT, item VARCHAR(40))",
		"INSERT INTO shop.customers VALUES (1, 'ada'), (2, 'bob'), (3, 'cy')",
		"INSERT INTO shop.orders VALUES (10, 1, 'a'), (11, 1, 'b'), (12, 2, 'c'), (13, NULL, 'd'), (14, 9, 'e')",
	); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg := writeConfig(t, dir, fmt.Sprintf(`pipeline: joinmy
source:
  mysql:
    dsn: mysql://root@%s
    tables: [shop.orders, shop.customers]
    heartbeat_interval: 1s
transforms:
  - join:
      output: shop.order_docs
      from: shop.orders
      with: [{table: shop.customers, on: [customer_id], as: customer}]
sinks:
  - duckdb: {path: ./sink.duckdb, tables: [shop.order_docs]}
offsets: {dir: ./offsets}
runtime: {checkpoint_interval: 50ms}
`, addr))
	checkpoint := filepath.Join(dir, "offsets", "checkpoint.json")
	d := startDaemon(t, cfg)
	d.waitAddr(t, 2*time.Minute)
	waitFile(t, checkpoint, d)
	if err := m.Exec(ctx, "shop",
		"UPDATE customers SET name = 'ada2' WHERE id = 1",
		"UPDATE orders SET id = 20 WHERE id = 10", // a key change
		"UPDATE orders SET customer_id = 3 WHERE id = 12",
		"DELETE FROM customers WHERE id = 2",
		"INSERT INTO customers VALUES (9, 'nine')",
		"DELETE FROM orders WHERE id = 11",
	); err != nil {
		t.Fatal(err)
	}
	mark, err := m.Query(ctx, "", "SELECT @@GLOBAL.gtid_binlog_pos")
	if err != nil {
		t.Fatal(err)
	}
	waitCheckpointAt(t, d, checkpoint, mark)
	d.signal(syscall.SIGTERM)
	if code := d.wait(t, time.Minute); code != 0 {
		t.Fatalf("exit %d:\n%s", code, d.logs())
	}

	c, err := client.Connect(addr, "root", "", "shop")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	res, err := c.Execute(`SELECT o.id, o.customer_id, o.item, c.name FROM orders o LEFT JOIN customers c ON c.id = o.customer_id`)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{}
	for i := range res.RowNumber() {
		row := make([]string, 4)
		for j := range row {
			s, _ := res.GetString(i, j)
			row[j] = string(append([]byte{}, s...))
		}
		want[row[0]] = row
	}
	db, err := sql.Open("duckdb", filepath.Join(dir, "sink.duckdb"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, `SELECT CAST(id AS VARCHAR), CAST(customer_id AS VARCHAR), item, CAST(customer AS VARCHAR)
		FROM main.shop_order_docs WHERE NOT _sluice_deleted`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	got := map[string][]string{}
	for rows.Next() {
		var id, cust, item, doc sql.NullString
		if err := rows.Scan(&id, &cust, &item, &doc); err != nil {
			t.Fatal(err)
		}
		name := ""
		if doc.Valid {
			var m map[string]any
			if err := json.Unmarshal([]byte(doc.String), &m); err != nil {
				t.Fatalf("customer %q: %v", doc.String, err)
			}
			name, _ = m["name"].(string)
		}
		got[id.String] = []string{id.String, cust.String, item.String, name}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if diff := diffRows(want, got); diff != "" || len(want) != 4 {
		t.Fatalf("DuckDB differs from the join (%d rows):\n%s", len(want), diff)
	}
}
