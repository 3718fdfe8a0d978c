package config

import (
	"path/filepath"
	"strings"
	"testing"
)

func TestAggregateParsesWithDefaults(t *testing.T) {
	c, errs := parseErrs(t, joinBase+`  - aggregate:
      output: analytics.customer_totals
      table: public.orders
      group_by: [customer_id]
      aggregates: [orders = count(), revenue = sum(amount), products = count_distinct(product)]
`, nil)
	if errs != nil {
		t.Fatal(errs)
	}
	g := c.Transforms[0].Aggregate
	if g.StateDir != filepath.Join("/var/lib/sluice", "aggregate", "analytics.customer_totals") || g.MaxStateBytes != 4<<30 ||
		len(g.Aggregates) != 3 || c.Transforms[0].Kind() != "aggregate" {
		t.Fatalf("aggregate: %+v", g)
	}
}

func TestAggregateProblems(t *testing.T) {
	_, errs := parseErrs(t, joinBase+`  - aggregate:
      output: public.customers
      table: public.items
      group_by: [customer_id, customer_id]
      aggregates: [customer_id = count(), f = first(amount), s = total(amount)]
`, nil)
	want := []string{
		`pipe.yaml:11:15: transforms[0].aggregate.output: output public.customers is a captured table (hint: name the groups' table differently, e.g. analytics.customer_totals)`,
		`pipe.yaml:12:14: transforms[0].aggregate.table: table public.items is not captured by the source (hint: capture it: add it to the source's tables)`,
		`pipe.yaml:13:31: transforms[0].aggregate.group_by[1]: column customer_id is listed twice (hint: list each group column once)`,
		`pipe.yaml:14:20: transforms[0].aggregate.aggregates[0]: output column customer_id is used twice (the group columns and the aggregates share one row) (hint: give it another name)`,
		`pipe.yaml:14:43: transforms[0].aggregate.aggregates[1]: first needs an event time, which an aggregate without windows does not have (hint: use a window for first; an aggregate's functions: count, sum, avg, min, max, count_distinct)`,
		`pipe.yaml:14:62: transforms[0].aggregate.aggregates[2]: unknown aggregate function total; the functions: count, sum, avg, min, max, count_distinct (hint: e.g. revenue = sum(amount); count() counts rows)`,
	}
	if got := strings.Join(errs, "\n"); got != strings.Join(want, "\n") {
		t.Errorf("got:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
	}
}
