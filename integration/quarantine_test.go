package integration

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-cdc/sluice/integration/harness"
)

// A schema change the Postgres sink cannot apply (its role may write the
// target table but not alter it: SQLSTATE 42501) quarantines that table
// in the sink: its records go to the DLQ with the reason, the other table
// keeps flowing and stays equal to the source, /status says degraded and
// names the table; after the fix a restart applies the table's later
// changes again.
func TestUnappliableSchemaChangeQuarantinesOnlyItsTable(t *testing.T) {
	pg := harness.PostgresT(t)
	ctx := context.Background()
	for _, db := range []string{"quar", "quartarget"} {
		if err := pg.CreateDatabase(ctx, db); err != nil {
			t.Fatal(err)
		}
	}
	if err := pg.Exec(ctx, "quar",
		`CREATE TABLE a (id int PRIMARY KEY, v text)`, `CREATE TABLE b (id int PRIMARY KEY, v text)`,
		`INSERT INTO a SELECT g, 'a' || g FROM generate_series(1, 50) g`,
		`INSERT INTO b SELECT g, 'b' || g FROM generate_series(1, 50) g`); err != nil {
		t.Fatal(err)
	}
	if err := pg.Exec(ctx, "quartarget", `CREATE ROLE writer LOGIN`, `CREATE ROLE keeper`,
		`GRANT ALL ON SCHEMA public TO writer`); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg := writeConfig(t, dir, fmt.Sprintf(`pipeline: quar
source:
  postgres:
    dsn: %s
    tables: [public.a, public.b]
sinks:
  - postgres: {dsn: "postgres://writer@%s:%d/quartarget?sslmode=disable"}
offsets: {dir: ./offsets}
runtime: {checkpoint_interval: 50ms}
`, pg.DSN("quar"), pg.Host, pg.Port))
	d := startDaemon(t, cfg)
	base := "http://" + d.waitAddr(t, time.Minute)
	waitFile(t, filepath.Join(dir, "offsets", "checkpoint.json"), d)
	// The sink's role keeps its DML rights on public_b but no longer owns it.
	if err := pg.Exec(ctx, "quartarget", `ALTER TABLE public_b OWNER TO keeper`,
		`GRANT SELECT, INSERT, UPDATE, DELETE ON public_b TO writer`); err != nil {
		t.Fatal(err)
	}
	if err := pg.Exec(ctx, "quar",
		`ALTER TABLE b ADD COLUMN extra int DEFAULT 5`,
		`INSERT INTO b SELECT g, 'b' || g, g FROM generate_series(51, 60) g`,
		`INSERT INTO a SELECT g, 'a' || g FROM generate_series(51, 80) g`,
		`UPDATE a SET v = v || '+' WHERE id % 7 = 0`,
		`DELETE FROM a WHERE id % 11 = 0`); err != nil {
		t.Fatal(err)
	}
	mark := commitMarkOn(t, ctx, pg.DSN("quar"), `UPDATE a SET v = 'mark' WHERE id = 1`)
	waitSlotConfirmed(t, ctx, pg.DSN("quar"), "sluice_quar", mark, d)

	var st struct {
		State string `json:"state"`
		Sinks []struct {
			Name        string `json:"name"`
			Quarantined []struct{ Table, Reason string }
		} `json:"sinks"`
	}
	getJSON(t, base+"/status", &st)
	if st.State != "degraded" || len(st.Sinks) != 1 || len(st.Sinks[0].Quarantined) != 1 ||
		st.Sinks[0].Quarantined[0].Table != "public.b" || !strings.Contains(st.Sinks[0].Quarantined[0].Reason, "owner") {
		t.Fatalf("status: %+v", st)
	}
	if n := metricSum(t, base, "sluice_sink_quarantined_tables"); n != 1 {
		t.Fatalf("sluice_sink_quarantined_tables = %v", n)
	}
	d.signal(syscall.SIGTERM)
	if code := d.wait(t, time.Minute); code != 0 {
		t.Fatalf("exit %d:\n%s", code, d.logs())
	}
	letters := readDeadLetters(t, filepath.Join(dir, "offsets", "dlq", "quar.dlq.jsonl"))
	if len(letters) != 10 {
		t.Fatalf("%d dead letters, want the 10 inserts into b: %+v", len(letters), letters)
	}
	for _, l := range letters {
		if l.Table != "public.b" || l.Stage != "sink:postgres" || !strings.Contains(l.Error, "owner") {
			t.Fatalf("dead letter %+v", l)
		}
	}
	// verify says the same: a is equal, b lacks what went to the DLQ.
	expectVerifyEqual(t, cfg, "--table", "public.a")
	if code, out := runVerify(t, cfg, "--table", "public.b", "--settle", "10s"); code != 1 || !strings.Contains(out, "in the source, not in the sink") {
		t.Fatalf("verify of the quarantined table: exit %d\n%s", code, out)
	}
	sameRows(t, ctx, pg.DSN("quar"), `SELECT id, v FROM a`,
		"postgres://postgres@"+fmt.Sprintf("%s:%d", pg.Host, pg.Port)+"/quartarget?sslmode=disable",
		`SELECT id, v FROM public_a WHERE NOT _sluice_deleted`)

	// The fix, then a restart: the table's later changes land again.
	if err := pg.Exec(ctx, "quartarget", `ALTER TABLE public_b OWNER TO writer`); err != nil {
		t.Fatal(err)
	}
	d = startDaemon(t, cfg)
	d.waitAddr(t, time.Minute)
	mark = commitMarkOn(t, ctx, pg.DSN("quar"), `UPDATE b SET v = 'after the fix', extra = 9 WHERE id = 3`)
	waitSlotConfirmed(t, ctx, pg.DSN("quar"), "sluice_quar", mark, d)
	sameRows(t, ctx, pg.DSN("quar"), `SELECT id, v, extra FROM b WHERE id = 3`,
		pg.DSN("quartarget"), `SELECT id, v, extra FROM public_b WHERE id = 3`)
}

// sameRows fails unless two queries return the same rows (in id order).
func sameRows(t *testing.T, ctx context.Context, dsnA, queryA, dsnB, queryB string) {
	t.Helper()
	read := func(dsn, q string) []string {
		c, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(ctx)
		rows, err := c.Query(ctx, q+" ORDER BY 1")
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out []string
		for rows.Next() {
			vals, err := rows.Values()
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, fmt.Sprint(vals))
		}
		return out
	}
	a, b := read(dsnA, queryA), read(dsnB, queryB)
	if strings.Join(a, "\n") != strings.Join(b, "\n") {
		t.Fatalf("source and sink differ:\nsource %v\nsink   %v", a, b)
	}
}
