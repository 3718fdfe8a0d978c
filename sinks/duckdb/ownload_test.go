package duckdb

import (
	"bufio"
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	duck "github.com/duckdb/duckdb-go/v2"
)

// ownLoadRows is the table each BenchmarkOwnLoad iteration loads.
const ownLoadRows = 1_000_000

// ownLoadTable is the table of the bench's incremental snapshot scenarios
// (bench.pgCreate) as the sink creates it, without its version column.
const ownLoadTable = `CREATE TABLE t (id BIGINT %s, n INTEGER, label VARCHAR, "at" TIMESTAMPTZ,
	amount DECIMAL(12,2), doc JSON)`

// BenchmarkOwnLoad is DuckDB loading the incremental snapshot bench's rows
// (pg-incremental, mariadb-incremental) by its own fastest
// means, with no sink in the way: the ceiling any DuckDB sink writes
// under on this machine (docs/performance.md, the incremental snapshot's
// target into DuckDB). Each iteration loads ownLoadRows rows into a new
// file:
//
//   - copy-csv: COPY FROM a CSV file, DuckDB's parallel reader (every
//     core);
//   - appender: the appender from values made before the clock starts, in
//     65,536-row transactions (one core, like a sink's one connection);
//
// each into a table keyed on id, as a sink's upsert target is, and
// without the key.
//
//	go test -run '^$' -bench OwnLoad -benchtime 1x ./sinks/duckdb/
func BenchmarkOwnLoad(b *testing.B) {
	csv := filepath.Join(b.TempDir(), "rows.csv")
	if err := writeOwnLoadCSV(csv); err != nil {
		b.Fatal(err)
	}
	for _, key := range []string{"PRIMARY KEY", ""} {
		name := map[bool]string{true: "keyed", false: "unkeyed"}[key != ""]
		b.Run("copy-csv/"+name, func(b *testing.B) {
			var took time.Duration
			for i := 0; i < b.N; i++ {
				db, err := sql.Open("duckdb", filepath.Join(b.TempDir(), "copy.duckdb"))
				if err != nil {
					b.Fatal(err)
				}
				if _, err := db.Exec(fmt.Sprintf(ownLoadTable, key)); err != nil {
					b.Fatal(err)
				}
				start := time.Now()
				if _, err := db.Exec("COPY t FROM '" + csv + "' (HEADER false)"); err != nil {
					b.Fatal(err)
				}
				took += time.Since(start)
				db.Close()
			}
			b.ReportMetric(float64(b.N*ownLoadRows)/took.Seconds(), "rows/s")
			b.ReportMetric(0, "ns/op")
		})
		b.Run("appender/"+name, func(b *testing.B) {
			var took time.Duration
			for i := 0; i < b.N; i++ {
				took += appendOwnLoad(b, key)
			}
			b.ReportMetric(float64(b.N*ownLoadRows)/took.Seconds(), "rows/s")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// ownLoadRow is row g of the bench's table (bench.pgInsert) as DuckDB
// driver values.
func ownLoadRow(g int64) []driver.Value {
	return []driver.Value{g, int32(g % 100000), fmt.Sprintf("customer %08d with a forty-byte label", g),
		time.UnixMicro(1704067200_000_000 + g*1_000_000).UTC(),
		duck.Decimal{Width: 12, Scale: 2, Value: big.NewInt(g % 10000000)}, fmt.Sprintf(`{"i":%d,"ok":true}`, g)}
}

func writeOwnLoadCSV(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	for g := int64(0); g < ownLoadRows; g++ {
		v := ownLoadRow(g)
		fmt.Fprintf(w, "%d,%d,%s,%s,%s,\"%s\"\n", v[0], v[1], v[2], v[3].(time.Time).Format("2006-01-02 15:04:05+00"),
			v[4].(duck.Decimal).String(), strings.ReplaceAll(v[5].(string), `"`, `""`))
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// appendOwnLoad loads ownLoadRows rows through the appender and returns
// the time the appends and commits took.
func appendOwnLoad(b *testing.B, key string) time.Duration {
	c, err := duck.NewConnector(filepath.Join(b.TempDir(), "append.duckdb"), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	conn, err := c.Connect(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	exec := func(q string) {
		if _, err := conn.(driver.ExecerContext).ExecContext(context.Background(), q, nil); err != nil {
			b.Fatal(err)
		}
	}
	exec(fmt.Sprintf(ownLoadTable, key))
	const txn = 65536
	rows := make([][]driver.Value, txn)
	var took time.Duration
	for lo := int64(0); lo < ownLoadRows; lo += txn {
		n := min(lo+txn, ownLoadRows) - lo
		for j := range n {
			rows[j] = ownLoadRow(lo + j)
		}
		start := time.Now()
		exec("BEGIN")
		a, err := duck.NewAppenderFromConn(conn, "", "t")
		if err != nil {
			b.Fatal(err)
		}
		for _, r := range rows[:n] {
			if err := a.AppendRow(r...); err != nil {
				b.Fatal(err)
			}
		}
		if err := a.Close(); err != nil {
			b.Fatal(err)
		}
		exec("COMMIT")
		took += time.Since(start)
	}
	return took
}
