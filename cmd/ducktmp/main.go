package main

import (
	"database/sql"
	"fmt"
	"os"

	_ "github.com/duckdb/duckdb-go/v2"
)

func must(_ any, err error) {
	if err != nil {
		panic(err)
	}
}

func main() {
	os.RemoveAll("/tmp/dt.db")
	os.RemoveAll("/tmp/dt.db.wal")
	db, err := sql.Open("duckdb", "/tmp/dt.db")
	if err != nil {
		panic(err)
	}
	db.SetMaxOpenConns(1)
	mode := os.Args[1]
	pk := "PRIMARY KEY"
	if len(os.Args) > 2 {
		pk = ""
	}
	must(db.Exec("SET threads=1"))
	must(db.Exec("CREATE TABLE t (id BIGINT " + pk + ", a VARCHAR, b BIGINT, v BLOB, d BOOLEAN)"))
	must(db.Exec("INSERT INTO t SELECT i, 'x' || i, i, '\\x01'::BLOB, false FROM range(900000) r(i)"))
	must(db.Exec("CHECKPOINT"))
	for round := 0; round < 200; round++ {
		lo := (round * 4999) % 895000
		must(db.Exec("CREATE OR REPLACE TEMP TABLE s AS SELECT i AS id, 'y' || i AS a, i+1 AS b, '\\x02'::BLOB || " + fmt.Sprint(round) + "::VARCHAR::BLOB AS v, false AS d FROM range(" + fmt.Sprint(lo) + ", " + fmt.Sprint(lo+5000) + ") r(i)"))
		switch mode {
		case "merge":
			must(db.Exec("MERGE INTO t USING s ON t.id = s.id WHEN MATCHED AND s.v > t.v THEN UPDATE SET a = s.a, b = s.b, v = s.v, d = s.d WHEN NOT MATCHED THEN INSERT VALUES (s.id, s.a, s.b, s.v, s.d)"))
		case "update":
			must(db.Exec("UPDATE t SET a = s.a, b = s.b, v = s.v, d = s.d FROM s WHERE t.id = s.id AND s.v > t.v"))
			must(db.Exec("INSERT INTO t SELECT * FROM s WHERE NOT EXISTS (SELECT 1 FROM t WHERE t.id = s.id)"))
		}
		if round%20 == 0 {
			var alloc, total int64
			db.QueryRow("SELECT coalesce(sum(memory_usage_bytes) FILTER (tag='ALLOCATOR'),0)>>20, sum(memory_usage_bytes)>>20 FROM duckdb_memory()").Scan(&alloc, &total)
			st, _ := os.ReadFile("/proc/self/status")
			var anon string
			for _, l := range splitLines(string(st)) {
				if len(l) > 7 && l[:7] == "RssAnon" {
					anon = l
				}
			}
			fmt.Println(mode, round, "alloc", alloc, "total", total, anon)
		}
	}
}

func splitLines(s string) []string {
	var out []string
	start := 0
	for i := range s {
		if s[i] == '\n' {
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return out
}
