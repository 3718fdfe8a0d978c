package duckdb

import (
	"database/sql"
	"runtime"
	"testing"

	"github.com/sluice-cdc/sluice/internal/memtrim"
)

// The daemon drops its binary's clean pages every few seconds (memtrim).
// This test binary links DuckDB the way the daemon does, C++ library,
// relocated tables and all: DuckDB keeps working across trims, including
// the calls it makes through the relocated tables into the C++ runtime.
func TestDuckDBRunsAcrossTrims(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("memtrim trims on Linux only")
	}
	if memtrim.Trim() <= 0 {
		t.Fatal("no executable mapping was trimmed: the daemon's trim would do nothing either")
	}
	db, err := sql.Open("duckdb", "")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec("CREATE TABLE t AS SELECT range AS id, 'v' || range AS v FROM range(100000)"); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		memtrim.Trim()
		var n, sum int64
		if err := db.QueryRow("SELECT count(*), sum(length(v)) FROM t WHERE id % 7 = $1", i).Scan(&n, &sum); err != nil {
			t.Fatal(err)
		}
		if n != 14286 || sum == 0 {
			t.Fatalf("round %d: %d rows, %d chars", i, n, sum)
		}
		// A failing statement throws and catches a C++ exception.
		if _, err := db.Exec("SELECT * FROM missing_table"); err == nil {
			t.Fatal("a missing table was found")
		}
	}
}
