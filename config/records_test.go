package config

import (
	"strings"
	"testing"
)

const recordBase = `pipeline: shop
source:
  postgres:
    dsn: postgres://u@127.0.0.1:5432/shop
    tables: [public.customers]
sinks:
  - bleve: {path: ./idx, name: search}
  - duckdb: {path: ./db}
transforms:
`

func TestRecordTransformsParse(t *testing.T) {
	c, errs := parseErrs(t, recordBase+`  - filter: {tables: [public.*], where: after.vip}
  - project: {drop: [notes]}
  - rename: {table: "crm.{table}", columns: [{from: email, to: mail}]}
  - cast: {columns: [{column: score, to: "decimal(5,1)"}]}
  - compute: {column: d, type: string, expr: 'lower(after.mail)', on_error: fail}
  - mask: {columns: [phone], with: hmac, secret_env: MASK_KEY}
  - route:
      rules: [{when: after.vip, sinks: [search]}]
      otherwise: [duckdb]
`, map[string]string{"MASK_KEY": "k"})
	if errs != nil {
		t.Fatal(errs)
	}
	var kinds []string
	for i := range c.Transforms {
		kinds = append(kinds, c.Transforms[i].Kind())
	}
	if strings.Join(kinds, " ") != "filter project rename cast compute mask route" || c.Transforms[0].Filter.OnError != "dlq" ||
		c.Transforms[4].Compute.OnError != "fail" || c.Transforms[5].Mask.Last != 4 {
		t.Fatalf("transforms: %v %+v", kinds, c.Transforms)
	}
}

// Problems found without the tables' shapes are config errors at their
// file:line:col, inside an expression too.
func TestRecordTransformProblems(t *testing.T) {
	_, errs := parseErrs(t, recordBase+`  - filter:
      where: after.vip && lowr(after.name) == "x"
  - filter:
      where: |
        op == "c" &&
          frob(after.x)
  - compute: {column: d, type: money, expr: "after.a +"}
  - project: {tables: [customers], keep: [a], drop: [b]}
  - mask: {columns: [phone], with: hmac, secret_env: MASK_KEY}
  - route:
      rules: [{when: 'after.vip', sinks: [search, nope]}]
`, nil)
	want := []string{
		`pipe.yaml:11:27: transforms[0].filter.where: unknown function lowr`,
		`pipe.yaml:15:11: transforms[1].filter.where: unknown function frob`,
		`pipe.yaml:16:32: transforms[2].compute.type: unknown type "money"`,
		`pipe.yaml:16:54: transforms[2].compute.expr: unexpected token EOF`,
		`pipe.yaml:17:14: transforms[3].project: set exactly one of keep and drop`,
		`pipe.yaml:17:24: transforms[3].project.tables[0]: pattern "customers" has 1 dot-separated parts, want 2`,
		`pipe.yaml:18:54: transforms[4].mask.secret_env: environment variable MASK_KEY is not set`,
		`pipe.yaml:20:51: transforms[5].route.rules[0].sinks[1]: no sink is named nope`,
	}
	if len(errs) != len(want) {
		t.Fatalf("got %d errors:\n%s", len(errs), strings.Join(errs, "\n"))
	}
	for i := range want {
		if !strings.HasPrefix(errs[i], want[i]) {
			t.Errorf("error %d:\n got %s\nwant %s…", i, errs[i], want[i])
		}
	}
}

// Errors found once the shapes are known point into the file too.
func TestExprErrorAt(t *testing.T) {
	cfg, errs := parseErrs(t, recordBase+`  - filter:
      where: after.a == 1
  - filter:
      where: "after.b == 2"
  - filter:
      where: >-
        op == "u" &&
          after.c == 3
  - project: {drop: [x]}
`, nil)
	if errs != nil {
		t.Fatal(errs)
	}
	for _, c := range []struct {
		path      string
		line, col int
		want      string
	}{
		{"transforms[0].filter.where", 1, 7, "pipe.yaml:11:20: transforms[0].filter.where: m"},
		{"transforms[1].filter.where", 1, 7, "pipe.yaml:13:21: transforms[1].filter.where: m"},
		{"transforms[2].filter.where", 2, 3, "pipe.yaml:17:11: transforms[2].filter.where: m"},
		{"transforms[3].project.drop", 1, 1, "pipe.yaml:18:21: transforms[3].project.drop: m"},
	} {
		if got := cfg.ExprErrorAt(c.path, c.line, c.col, "m", "").Error(); !strings.HasPrefix(got, c.want) {
			t.Errorf("%s %d:%d: %s, want %s", c.path, c.line, c.col, got, c.want)
		}
	}
}

func TestRouteTopicRules(t *testing.T) {
	_, errs := parseErrs(t, recordBase+`  - route:
      rules:
        - {when: after.vip}
        - {when: after.vip, topic: "{prefix}.vip"}
        - {when: after.vip, topic: "{prefix}.{tabel}"}
  - route:
      tables: [public.customers]
      rules: [{when: after.vip, topic: "crm.vip_customers"}]
`, nil)
	want := []string{
		`pipe.yaml:12:11: transforms[0].route.rules[0]: a rule needs sinks, a topic or both`,
		`pipe.yaml:13:36: transforms[0].route.rules[1].topic: must contain {table}`,
		`pipe.yaml:14:36: transforms[0].route.rules[2].topic: unknown placeholder`,
	}
	if len(errs) != len(want) {
		t.Fatalf("got %d errors:\n%s", len(errs), strings.Join(errs, "\n"))
	}
	for i := range want {
		if !strings.HasPrefix(errs[i], want[i]) {
			t.Errorf("error %d:\n got %s\nwant %s…", i, errs[i], want[i])
		}
	}
}

func TestWindowProblems(t *testing.T) {
	_, errs := parseErrs(t, recordBase+`  - window:
      output: public.customers
      table: public.orders
      tumbling: 1m
      hopping: {size: 5m, advance: 1m}
      aggregates: ["n = count()", "n = sum(x)", "m = median(x)", "s = sum()"]
  - window:
      output: a.sessions
      table: public.customers
      session: {gap: 30m}
      emit: early
      side_output: archive
      aggregates: ["partial = count()"]
  - window:
      output: a.b
      table: public.customers
      tumbling: 1m
      late: side_output
      side_output: archive
      aggregates: ["n = count()"]
  - window:
      output: a.c
      table: public.customers
      session: {gap: 1m}
      event_time: t
      late: correct
      aggregates: ["n = count()"]
  - window:
      output: a.d
      table: public.customers
      tumbling: 1m
      late: correct
      aggregates: ["n = count()"]
`, nil)
	want := []string{
		`pipe.yaml:11:7: transforms[0].window: set exactly one of tumbling, hopping and session`,
		`pipe.yaml:11:15: transforms[0].window.output: output public.customers is a captured table`,
		`pipe.yaml:12:14: transforms[0].window.table: table public.orders is not captured by the source`,
		`pipe.yaml:15:35: transforms[0].window.aggregates[1]: output column n is used twice`,
		`pipe.yaml:15:49: transforms[0].window.aggregates[2]: unknown aggregate function median`,
		`pipe.yaml:15:66: transforms[0].window.aggregates[3]: sum needs a column`,
		`pipe.yaml:21:20: transforms[1].window.side_output: side_output names a sink for late changes, but late is drop`,
		`pipe.yaml:22:20: transforms[1].window.aggregates[0]: output column partial is used twice`,
		`pipe.yaml:28:20: transforms[2].window.side_output: no sink is named archive (hint: the sinks: search, duckdb`,
		`pipe.yaml:35:13: transforms[3].window.late: late: correct keeps a window's aggregates without its rows, and sessions need their rows`,
		`pipe.yaml:41:13: transforms[4].window.late: late: correct needs an event_time column`,
	}
	if len(errs) != len(want) {
		t.Fatalf("got %d errors:\n%s", len(errs), strings.Join(errs, "\n"))
	}
	for i := range want {
		if !strings.HasPrefix(errs[i], want[i]) {
			t.Errorf("error %d:\n got %s\nwant %s…", i, errs[i], want[i])
		}
	}
}
