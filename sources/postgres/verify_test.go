package postgres

import (
	"testing"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/sluice-cdc/sluice/verify"
)

// KeyRows finds rows by keys of every common key type, composite, as
// TableRows decodes them; absent keys return nothing; the position after
// the read is at or past the last commit.
func TestKeyRowsByEveryKeyType(t *testing.T) {
	pg, ctx := testDB(t)
	exec(t, ctx, pg, "shop",
		`CREATE TABLE k (a int, b text, c uuid, d timestamptz, e numeric(12,3), f date, g bytea, h bigint, i smallint, j boolean, v text,
			PRIMARY KEY (a, b, c, d, e, f, g, h, i, j))`,
		`INSERT INTO k SELECT n, 'key ' || n || E' \'q\'', md5(n::text)::uuid, timestamptz '2024-02-29 23:59:59.123456+00' + n * interval '1 hour',
			n * 1.5, date '2000-01-01' + n, decode(md5(n::text), 'hex'), n * 10000000000, n, n % 2 = 0, 'v' || n
			FROM generate_series(1, 40) n`)
	table, all, err := TableRows(ctx, pg.DSN("shop"), "public", "k")
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
		if i%3 == 0 {
			keys = append(keys, keyOf(row))
			want[verify.RowKey(table, row)] = row
		}
	}
	absent := keyOf(all[1])
	absent[0] = int64(999)
	keys = append(keys, absent)
	before := currentLSN(t, ctx, pg)
	got, rows, lsn, err := KeyRows(ctx, pg.DSN("shop"), "public", "k", keys)
	if err != nil {
		t.Fatal(err)
	}
	if lsn < before {
		t.Fatalf("position after the read %s is before the last commit %s", lsn, before)
	}
	have := map[string][]any{}
	for _, row := range rows {
		have[verify.RowKey(got, row)] = row
	}
	if d := verify.Compare(got, want, have); len(d) > 0 || len(rows) != len(want) {
		t.Fatalf("%d rows for %d keys; differences: %+v", len(rows), len(keys), d)
	}
	// A commit under synchronous_commit = off is visible before its WAL is
	// written: the position after a read that sees it still covers it.
	c, err := pgx.Connect(ctx, pg.DSN("shop"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	var commitEnd string
	if _, err := c.Exec(ctx, "SET synchronous_commit = off"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, "UPDATE k SET v = 'async' WHERE a = 1"); err != nil {
		t.Fatal(err)
	}
	if err := c.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&commitEnd); err != nil {
		t.Fatal(err)
	}
	end, _ := pglogrepl.ParseLSN(commitEnd)
	if _, _, lsn, err := KeyRows(ctx, pg.DSN("shop"), "public", "k", keys[:1]); err != nil || lsn < end {
		t.Fatalf("position after reading an asynchronous commit: %s (%v), the commit ends at %s", lsn, err, end)
	}
	if _, rows, _, err := KeyRows(ctx, pg.DSN("shop"), "public", "k", nil); err != nil || len(rows) != 0 {
		t.Fatalf("no keys: %d rows, %v", len(rows), err)
	}
	if _, _, _, err := KeyRows(ctx, pg.DSN("shop"), "public", "k", [][]any{{int64(1)}}); err == nil {
		t.Fatal("a key with too few values was accepted")
	}
}
