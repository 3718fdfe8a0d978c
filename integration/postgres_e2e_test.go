package integration

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/integration/harness"
)

const typesSchema = `
CREATE TYPE color AS ENUM ('red', 'green', 'blue');
CREATE DOMAIN posint AS integer CHECK (VALUE > 0);
CREATE TABLE alltypes (
  id bigint PRIMARY KEY,
  i2 smallint, i4 integer, i8 bigint,
  n numeric(20,5), nu numeric, f4 real, f8 double precision,
  b boolean, t text, vc varchar(20), ch char(5),
  by bytea, u uuid, j json, jb jsonb,
  d date, tm time, ttz timetz, ts timestamp, tstz timestamptz, iv interval,
  ip inet, net cidr, mac macaddr,
  ai integer[], at text[], c color, pi posint,
  big text
);
CREATE TABLE trunc_me (id int PRIMARY KEY, v text);
INSERT INTO trunc_me SELECT g, 'v' || g FROM generate_series(1, 10) g;
INSERT INTO alltypes VALUES
 (1, -32768, -2147483648, -9223372036854775808, 123456789012345.12345, 1234567890.0123456789012345678901234567890, 1.5, -1.25e300,
  true, 'plain', 'varchar', 'ab', '\x00ff10', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{"a": [1, 2]}', '{"b": {"c": null}}',
  '1999-12-31', '23:59:59.999999', '12:00:00+05:30', '2000-02-29 12:34:56.789012', '2024-06-01 10:00:00+02', '1 year 2 mons -3 days 04:05:06.7',
  '192.168.0.1', '10.0.0.0/8', '08:00:2b:01:02:03', '{1,NULL,3}', '{"x y","q\"uote",NULL}', 'green', 7,
  (SELECT string_agg(md5(g::text || 'salt'), '') FROM generate_series(1, 600) g)),
 (2, 32767, 2147483647, 9223372036854775807, -0.00001, -99999999999999999999.999, 'NaN', 'Infinity',
  false, E'tab\there\nnewline \\ back', '', 'abcde', '\x', '00000000-0000-0000-0000-000000000000', '[]', '{}',
  'infinity', '00:00:00', '00:00:00-12', '-infinity', 'infinity', '-178000000 years',
  '::1', '2001:db8::/32', 'ff:ff:ff:ff:ff:ff', '{}', '{}', 'red', 1, 'short'),
 (3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
  NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
`

// Every supported type goes through the initial load and the stream into
// DuckDB and comes out equal to what PostgreSQL returns for the same row;
// so do updates (including one that leaves a TOASTed value unchanged),
// deletes, a TRUNCATE, ADD/DROP COLUMN mid-stream, and a column added at
// the end with no change after it.
func TestPostgresTypesEndToEnd(t *testing.T) {
	pg := harness.PostgresT(t)
	ctx := context.Background()
	if err := pg.CreateDatabase(ctx, "types"); err != nil {
		t.Fatal(err)
	}
	if err := pg.Exec(ctx, "types", typesSchema); err != nil {
		t.Fatal(err)
	}
	dsn := pg.DSN("types")
	dir := t.TempDir()
	cfg := filepath.Join(dir, "pg.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf(`pipeline: types
source:
  postgres:
    dsn: %s
    tables: [public.alltypes, public.trunc_me]
    heartbeat_interval: 500ms
sinks:
  - duckdb: {path: ./sink.duckdb}
offsets: {dir: ./offsets}
runtime: {checkpoint_interval: 50ms}
`, dsn)), 0o644)
	d := startDaemon(t, cfg)
	addr := d.waitAddr(t, time.Minute)
	waitFile(t, filepath.Join(dir, "offsets", "checkpoint.json"), d)
	// Ready once streaming with a live replication connection.
	for deadline := time.Now().Add(time.Minute); getJSON(t, "http://"+addr+"/readyz", nil) != 200; {
		if time.Now().After(deadline) {
			t.Fatalf("/readyz never 200:\n%s", d.logs())
		}
		time.Sleep(10 * time.Millisecond)
	}

	steps := []string{
		// stream inserts of the same kinds of values
		`INSERT INTO alltypes SELECT id + 10, i2, i4, i8, n, nu, f4, f8, b, t, vc, ch, by, u, j, jb, d, tm, ttz, ts, tstz, iv, ip, net, mac, ai, at, c, pi, big FROM alltypes`,
		// updates; row 1's big value is TOASTed and not touched: pgoutput sends it as unchanged
		`UPDATE alltypes SET i4 = i4 / 2, t = 'updated', at = array_append(at, 'more'), iv = iv / 2 WHERE id IN (1, 2)`,
		`UPDATE alltypes SET n = n + 1, jb = jb || '{"k": 1}', tstz = tstz + interval '1 day' WHERE id = 11`,
		`DELETE FROM alltypes WHERE id IN (3, 13)`,
		// a primary-key update
		`UPDATE alltypes SET id = 100 WHERE id = 12`,
		// truncate between inserts
		`INSERT INTO trunc_me SELECT g, 'w' || g FROM generate_series(11, 20) g`,
		`TRUNCATE trunc_me`,
		`INSERT INTO trunc_me VALUES (21, 'after'), (22, 'truncate')`,
		// schema changes mid-stream
		`ALTER TABLE alltypes ADD COLUMN extra numeric(6,2) DEFAULT 1.5`,
		`INSERT INTO alltypes (id, t, extra, c) VALUES (200, 'with extra', 42.42, 'blue')`,
		`UPDATE alltypes SET extra = 7.25 WHERE id = 1`,
		`ALTER TABLE alltypes DROP COLUMN vc`,
		`INSERT INTO alltypes (id, t, extra) VALUES (201, 'after drop', 3.5)`,
		`UPDATE alltypes SET ch = 'zz' WHERE id = 11`,
	}
	for _, s := range steps {
		if err := pg.Exec(ctx, "types", s); err != nil {
			t.Fatal(err)
		}
	}
	mark := commitMarkOn(t, ctx, dsn, `UPDATE trunc_me SET v = 'mark' WHERE id = 21`)
	waitSlotConfirmed(t, ctx, dsn, "sluice_types", mark, d)
	// A column added to a table that then sees no change (Invariant 11):
	// only a heartbeat brings it. Two heartbeats confirmed after the
	// ALTER: the second one's statement began after the first had
	// returned, so its catalog snapshot holds the column.
	if err := pg.Exec(ctx, "types", `ALTER TABLE alltypes ADD COLUMN idle_col text DEFAULT 'added while idle'`); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		waitSlotConfirmed(t, ctx, dsn, "sluice_types", commitMarkOn(t, ctx, dsn, "SELECT 1"), d)
	}

	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, m := range []string{"sluice_postgres_slot_retained_wal_bytes", "sluice_postgres_lag_bytes", "sluice_postgres_lag_seconds",
		"sluice_postgres_transactions_total", "sluice_postgres_rows_total", "sluice_postgres_relation_changes_total",
		`sluice_postgres_snapshot_rows_done{pipeline="types",table="public.alltypes"} 3`, "sluice_end_to_end_latency_seconds_count"} {
		if !strings.Contains(string(metrics), m) {
			t.Errorf("/metrics lacks %s", m)
		}
	}
	d.signal(syscall.SIGTERM)
	if code := d.wait(t, time.Minute); code != 0 {
		t.Fatalf("exit %d:\n%s", code, d.logs())
	}
	duck := filepath.Join(dir, "sink.duckdb")
	if n := assertSinkEqualsSource(t, ctx, dsn, "types", duck, "public", "alltypes"); n != 6 {
		t.Fatalf("alltypes: %d rows compared, want 6", n)
	}
	if n := assertSinkEqualsSource(t, ctx, dsn, "types", duck, "public", "trunc_me"); n != 2 {
		t.Fatalf("trunc_me: %d rows compared, want 2", n)
	}
	expectVerifyEqual(t, cfg)
}
