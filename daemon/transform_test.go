package daemon

import (
	"context"
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/sluice-cdc/sluice/config"
	"github.com/sluice-cdc/sluice/obs"
	"github.com/sluice-cdc/sluice/pipeline"
)

// buildAndCheck opens cfg's transforms and checks them against the
// tables' shapes, as the daemon does at start.
func buildAndCheck(t *testing.T, cfg *config.Config) error {
	t.Helper()
	ops, closeOps, err := buildTransforms(cfg, nil, false, nil, nil, zap.NewNop())
	defer closeOps()
	if err != nil {
		t.Fatal(err)
	}
	return checkTransforms(context.Background(), cfg, ops)
}

// Columns and types are checked against the tables' shapes when the
// pipeline starts, and every problem is a config error at its place.
func TestTransformsCheckedAgainstShapes(t *testing.T) {
	cfg, err := config.Parse("pipe.yaml", []byte(`pipeline: shop
source:
  generate: {changes: 10}
sinks:
  - duckdb: {path: ./db}
transforms:
  - filter:
      tables: [demo.orders]
      where: after.vip && after.emial != nil
  - compute: {tables: [demo.orders], column: n, type: int64, expr: 'after.status'}
  - project: {tables: [demo.events], drop: [id]}
  - cast: {tables: [demo.events], columns: [{column: data, to: date}]}
  - filter:
      tables: [demo.customers]
      where: |
        op == "c" &&
          after.balance > "10"
`), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	err = buildAndCheck(t, cfg)
	var errs *config.Errors
	if !errors.As(err, &errs) {
		t.Fatalf("check: %v", err)
	}
	// One problem per table: a table's later transforms are checked
	// against the shape the earlier ones give it.
	want := []string{
		`pipe.yaml:17:25: transforms[4].filter.where: table demo.customers: invalid operation: > (mismatched types decimal and string)`,
		`pipe.yaml:9:14: transforms[0].filter.where: table demo.orders: column "vip" of demo.orders does not exist; its columns: id,`,
		`pipe.yaml:11:44: transforms[2].project.drop: table demo.events: column id is part of the primary key`,
	}
	var got []string
	for _, e := range errs.List {
		got = append(got, e.Error())
	}
	if len(got) != len(want) {
		t.Fatalf("got %d errors:\n%s", len(got), strings.Join(got, "\n"))
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("error %d:\n got %s\nwant %s…", i, got[i], want[i])
		}
	}
}

// A dedup's key is checked against the tables' shapes at start.
func TestDedupKeyCheckedAgainstShapes(t *testing.T) {
	dir := t.TempDir()
	cfg, err := config.Parse(filepath.Join(dir, "pipe.yaml"), []byte(`pipeline: shop
source:
  generate: {changes: 10}
sinks:
  - duckdb: {path: ./db}
transforms:
  - dedup:
      tables: [demo.orders]
      key: after.event_idd
      ttl: 1h
`), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	err = buildAndCheck(t, cfg)
	var errs *config.Errors
	if !errors.As(err, &errs) || len(errs.List) != 1 ||
		!strings.Contains(errs.Error(), `pipe.yaml:9:12: transforms[0].dedup.key: table demo.orders: column "event_idd" of demo.orders does not exist`) {
		t.Fatalf("check: %v", err)
	}
}

// A window's columns are checked against the table's shape at start too.
func TestWindowCheckedAgainstShapes(t *testing.T) {
	dir := t.TempDir()
	cfg, err := config.Parse(filepath.Join(dir, "pipe.yaml"), []byte(`pipeline: shop
source:
  generate: {changes: 10}
sinks:
  - duckdb: {path: ./db}
transforms:
  - window:
      output: analytics.per_day
      table: demo.orders
      event_time: placed_onn
      tumbling: 24h
      aggregates: ["n = count()"]
  - window:
      output: analytics.by_status
      table: demo.customers
      tumbling: 1h
      group_by: [vip]
      aggregates: ["total = sum(name)"]
`), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	err = buildAndCheck(t, cfg)
	var errs *config.Errors
	if !errors.As(err, &errs) || len(errs.List) != 2 {
		t.Fatalf("check: %v", err)
	}
	got := errs.Error()
	for _, want := range []string{
		`pipe.yaml:10:19: transforms[0].window.event_time: table demo.orders: column "placed_onn" of demo.orders does not exist`,
		`pipe.yaml:18:19: transforms[1].window.aggregates: table demo.customers: sum(name): column name is string, not a number`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %s in\n%s", want, got)
		}
	}
}

// An aggregate's columns are checked against the table's shape at start.
func TestAggregateCheckedAgainstShapes(t *testing.T) {
	dir := t.TempDir()
	cfg, err := config.Parse(filepath.Join(dir, "pipe.yaml"), []byte(`pipeline: shop
source:
  generate: {changes: 10}
sinks:
  - duckdb: {path: ./db}
transforms:
  - aggregate:
      output: analytics.per_customer
      table: demo.orders
      group_by: [customer_idd]
      aggregates: ["n = count()"]
  - aggregate:
      output: analytics.by_vip
      table: demo.customers
      group_by: [vip]
      aggregates: ["total = sum(name)"]
`), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	err = buildAndCheck(t, cfg)
	var errs *config.Errors
	if !errors.As(err, &errs) || len(errs.List) != 2 {
		t.Fatalf("check: %v", err)
	}
	got := errs.Error()
	for _, want := range []string{
		`pipe.yaml:10:17: transforms[0].aggregate.group_by: table demo.orders: column "customer_idd" of demo.orders does not exist; its columns: id, customer_id,`,
		`pipe.yaml:16:19: transforms[1].aggregate.aggregates: table demo.customers: total = sum(name): column name is string, not a number`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %s in\n%s", want, got)
		}
	}
}

// Each stateful transform's state cap comes from its max_state_bytes
// (default 4GiB) and is exported next to its size.
func TestStateCapsReachTheOperatorsAndMetrics(t *testing.T) {
	dir := t.TempDir()
	cfg, err := config.Parse(filepath.Join(dir, "pipe.yaml"), []byte(`pipeline: shop
source:
  generate: {changes: 10}
sinks:
  - duckdb: {path: ./db}
transforms:
  - window:
      output: analytics.per_day
      table: demo.orders
      tumbling: 24h
      aggregates: ["n = count()"]
      max_state_bytes: 64MiB
  - join:
      output: demo.order_docs
      from: demo.orders
      with: [{table: demo.customers, on: [customer_id], as: customer}]
  - dedup: {tables: [demo.events], key: after.id, ttl: 1h}
  - aggregate: {output: analytics.per_status, table: demo.orders, group_by: [status], aggregates: ["n = count()"], max_state_bytes: 1GiB}
`), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	_, closeOps, err := buildTransforms(cfg, nil, false, nil, obs.NewOperatorMetrics(reg, "shop"), zap.NewNop())
	defer closeOps()
	if err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	caps := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "sluice_operator_state_max_bytes" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "operator" {
					caps[l.GetValue()] = m.GetGauge().GetValue()
				}
			}
		}
	}
	if want := map[string]float64{"transforms[0].window": 64 << 20, "join:demo.order_docs": 4 << 30, "transforms[2].dedup": 4 << 30,
		"transforms[3].aggregate": 1 << 30}; !reflect.DeepEqual(caps, want) {
		t.Fatalf("caps %v, want %v", caps, want)
	}
}

// In the verify chain a dedup's tables reach no comparison (their sinks
// lack the duplicates it dropped); other tables pass it unchanged.
func TestVerifyLeavesDedupedTablesOut(t *testing.T) {
	cfg, err := config.Parse(filepath.Join(t.TempDir(), "pipe.yaml"), []byte(`pipeline: shop
source:
  generate: {changes: 10}
sinks:
  - duckdb: {path: ./db}
transforms:
  - dedup: {tables: [demo.events], key: after.id, ttl: 1h}
`), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	c, err := recordChain(cfg)
	if err != nil || c == nil {
		t.Fatalf("chain %v, %v", c, err)
	}
	events := &pipeline.Table{ID: pipeline.TableID{Schema: "demo", Table: "events"}}
	orders := &pipeline.Table{ID: pipeline.TableID{Schema: "demo", Table: "orders"}}
	if got, err := c.Shape(events); got != nil || err != nil {
		t.Fatalf("demo.events: %v, %v", got, err)
	}
	if got, err := c.Shape(orders); got != orders || err != nil {
		t.Fatalf("demo.orders: %v, %v", got, err)
	}
}
