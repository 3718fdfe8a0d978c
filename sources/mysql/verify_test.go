package mysql

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/verify"
)

// KeyRows finds rows by composite keys of the common key types (unsigned
// above 2^63, a case-insensitive varchar, DATETIME(6), TIMESTAMP, DATE,
// DECIMAL, VARBINARY) as TableRows decodes them; absent keys return
// nothing; the position after the read covers the last commit.
func TestKeyRowsByEveryKeyType(t *testing.T) {
	m := server(t)
	c := rootConn(t, m, "")
	mustExec(t, c, "CREATE DATABASE kr", `CREATE TABLE kr.t (a BIGINT UNSIGNED, b VARCHAR(40), d DATETIME(6), ts TIMESTAMP(3), f DATE,
		e DECIMAL(12,3), g VARBINARY(16), v TEXT, PRIMARY KEY (a, b, d, ts, f, e, g))`)
	for i := 0; i < 30; i++ {
		mustExec(t, c, fmt.Sprintf(`INSERT INTO kr.t VALUES (%d, 'Key %d', '2024-02-29 23:59:59.123456' + INTERVAL %d HOUR,
			'2024-01-01 00:00:00.250' + INTERVAL %d MINUTE, '2000-01-01' + INTERVAL %d DAY, %d * 1.5, UNHEX(MD5(%d)), 'v%d')`,
			uint64(1)<<63+uint64(i), i, i, i, i, i, i, i))
	}
	opts := Options{Pipeline: "kr", Tables: []string{"kr.t"}, DSN: fmt.Sprintf("mysql://root@%s:%d", m.Host, m.Port), HeartbeatInterval: time.Second}
	table, all, err := TableRows(ctx, opts, "kr", "t")
	if err != nil {
		t.Fatal(err)
	}
	keyOf := func(row []any) []any {
		k := make([]any, len(table.KeyIdx))
		for i, idx := range table.KeyIdx {
			k[i] = row[idx]
		}
		return k
	}
	want := map[string][]any{}
	var keys [][]any
	for i, row := range all {
		if i%4 == 1 {
			keys = append(keys, keyOf(row))
			want[verify.RowKey(table, row)] = row
		}
	}
	absent := keyOf(all[0])
	absent[1] = "no such key"
	keys = append(keys, absent)
	before, err := CurrentPosition(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	got, rows, pos, err := KeyRows(ctx, opts, "kr", "t", keys)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := pos.Covers(before); err != nil || !ok {
		t.Fatalf("position after the read %s does not cover the last commit %s (%v)", pos.GTID, before.GTID, err)
	}
	have := map[string][]any{}
	for _, row := range rows {
		have[verify.RowKey(got, row)] = row
	}
	if d := verify.Compare(got, want, have); len(d) > 0 || len(rows) != len(want) {
		t.Fatalf("%d rows for %d keys; differences: %+v", len(rows), len(keys), d)
	}
	// The column's collation decides, as in the table: another case finds
	// the same row.
	upper := keyOf(all[2])
	upper[1] = "KEY 2"
	if _, rows, _, err := KeyRows(ctx, opts, "kr", "t", [][]any{upper}); err != nil || len(rows) != 1 {
		t.Fatalf("a case-insensitive key: %d rows, %v", len(rows), err)
	}
}
