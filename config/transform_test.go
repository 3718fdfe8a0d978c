package config

import (
	"path/filepath"
	"strings"
	"testing"
)

const joinBase = `pipeline: shop
source:
  postgres:
    dsn: postgres://u@127.0.0.1:5432/shop
    tables: [orders, public.customers]
sinks:
  - bleve: {path: ./idx, tables: [public.order_docs]}
offsets: {dir: /var/lib/sluice}
transforms:
`

func TestJoinParses(t *testing.T) {
	c, errs := parseErrs(t, joinBase+`  - join:
      output: public.order_docs
      from: public.orders
      with:
        - {table: public.customers, on: [customer_id], as: customer, columns: [name]}
`, nil)
	if errs != nil {
		t.Fatal(errs)
	}
	j := c.Transforms[0].Join
	if j.StateDir != filepath.Join("/var/lib/sluice", "join", "public.order_docs") || j.With[0].On[0] != "customer_id" ||
		j.With[0].As != "customer" || j.With[0].Columns[0] != "name" {
		t.Fatalf("join: %+v", j)
	}
}

func TestJoinProblems(t *testing.T) {
	_, errs := parseErrs(t, joinBase+`  - join:
      output: public.orders
      from: public.order
      with:
        - {table: public.customer, on: [""], as: c}
        - {table: public.customers, on: [customer_id], as: c}
  - join:
      output: orders_docs
      from: public.orders
      with: []
`, nil)
	want := []string{
		`pipe.yaml:11:15: transforms[0].join.output: output public.orders is a captured table (hint: name the joined rows' table differently, e.g. public.orders_docs)`,
		`pipe.yaml:12:13: transforms[0].join.from: table public.order is not captured by the source (hint: capture it: add it to the source's tables)`,
		`pipe.yaml:14:19: transforms[0].join.with[0].table: table public.customer is not captured by the source (hint: capture it: add it to the source's tables)`,
		`pipe.yaml:14:41: transforms[0].join.with[0].on[0]: empty column name (hint: list the columns of public.order that hold the key of public.customer)`,
		`pipe.yaml:15:60: transforms[0].join.with[1].as: column c is used by another lookup or child (hint: give every lookup and child its own as)`,
		`pipe.yaml:17:15: transforms[1].join.output: invalid value "orders_docs" (hint: must match the pattern ^[^.\s]+\.[^.\s]+$)`,
		`pipe.yaml:19:13: transforms[1].join.with: must not be empty (hint: set it (a list of lookups, e.g. - {table: public.customers, on: [customer_id], as: customer}))`,
	}
	if got := strings.Join(errs, "\n"); got != strings.Join(want, "\n") {
		t.Errorf("got:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
	}
}

func TestNestParsesWithDefaults(t *testing.T) {
	c, errs := parseErrs(t, joinBase+`  - nest:
      output: public.order_docs
      parent: public.orders
      children:
        - {table: public.customers, on: [id], as: items, order_by: [name]}
`, nil)
	if errs != nil {
		t.Fatal(errs)
	}
	n := c.Transforms[0].Nest
	ch := n.Children[0]
	if n.StateDir != filepath.Join("/var/lib/sluice", "nest", "public.order_docs") || ch.MaxChildren != 1000 || ch.OnOverflow != "truncate" ||
		ch.OrderBy[0] != "name" || n.MaxStateBytes != 4<<30 || c.Transforms[0].Kind() != "nest" {
		t.Fatalf("nest: %+v", n)
	}
}

func TestNestProblems(t *testing.T) {
	_, errs := parseErrs(t, joinBase+`  - nest:
      output: public.order_docs
      parent: public.orders
      children:
        - {table: public.customers, on: [id], as: items, max_children: 0, on_overflow: drop}
`, nil)
	want := []string{
		`pipe.yaml:14:72: transforms[0].nest.children[0].max_children: must be at least 1, got 0 (hint: the default is 1000)`,
		`pipe.yaml:14:88: transforms[0].nest.children[0].on_overflow: invalid value "drop" (hint: use one of truncate, fail)`,
	}
	if got := strings.Join(errs, "\n"); got != strings.Join(want, "\n") {
		t.Errorf("got:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
	}
	_, errs = parseErrs(t, joinBase+`  - nest:
      output: public.order_docs
      parent: public.order
      children:
        - {table: public.items, on: [order_id], as: customer}
      with:
        - {table: public.customers, on: [customer_id], as: customer}
`, nil)
	want = []string{
		`pipe.yaml:12:15: transforms[0].nest.parent: table public.order is not captured by the source (hint: capture it: add it to the source's tables)`,
		`pipe.yaml:14:19: transforms[0].nest.children[0].table: table public.items is not captured by the source (hint: capture it: add it to the source's tables)`,
		`pipe.yaml:14:53: transforms[0].nest.children[0].as: column customer is used by another lookup or child (hint: give every lookup and child its own as)`,
	}
	if got := strings.Join(errs, "\n"); got != strings.Join(want, "\n") {
		t.Errorf("got:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
	}
}
