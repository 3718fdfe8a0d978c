package config

import (
	"strings"
	"testing"
)

// table_template names the target tables of the Postgres and DuckDB
// sinks; a bad one is a config error at its line and column, and the
// Postgres sink's older table_prefix is an alternative to it.
func TestTableTemplate(t *testing.T) {
	const head = "pipeline: p\nsource:\n  generate: {}\nsinks:\n"
	c, errs := parseErrs(t, head+"  - postgres: {dsn: \"postgres://h/db\", table_template: \"{table}\"}\n  - duckdb: {path: x.duckdb}\n", nil)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if got := c.Sinks[0].Postgres.TableTemplate; got != "{table}" {
		t.Errorf("postgres table_template %q", got)
	}
	if got := c.Sinks[1].DuckDB.TableTemplate; got != "{schema}_{table}" {
		t.Errorf("duckdb default table_template %q", got)
	}
	for _, c := range []struct{ sink, want string }{
		{"postgres: {dsn: \"postgres://h/db\", table_template: \"{schema}\"}", "sinks[0].postgres.table_template: must contain {table}"},
		{"postgres: {dsn: \"postgres://h/db\", table_template: \"{tabel}\"}", "unknown placeholder {tabel}"},
		{"duckdb: {path: x.duckdb, table_template: \"t_{table\"}", "sinks[0].duckdb.table_template: unclosed '{'"},
		{"duckdb: {path: x.duckdb, row_group_size: 10000}", "sinks[0].duckdb.row_group_size: 10000 is not a multiple of 2048"},
		{"postgres: {dsn: \"postgres://h/db\", table_prefix: src_, table_template: \"{table}\"}",
			`table_prefix and table_template are alternatives`},
	} {
		_, errs := parseErrs(t, head+"  - "+c.sink+"\n", nil)
		msg := strings.Join(errs, "\n")
		if !strings.Contains(msg, c.want) || !strings.Contains(msg, ":5:") {
			t.Errorf("%s:\n got %q\nwant %q at line 5", c.sink, errs, c.want)
		}
	}
}
