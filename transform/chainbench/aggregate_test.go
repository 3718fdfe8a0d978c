package chainbench

import (
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/transform/aggregate"
	"github.com/sluice-cdc/sluice/transform/window"
)

// BenchmarkAggregate runs the nest benchmark's changes (shopFeed: 10,000
// customers, 100,000 orders, then -records changes of their items)
// through a materialized aggregate of the items per order — count(),
// sum(qty), avg(price), min(price), max(price), count_distinct(sku) —
// next to the same changes through no operator, into -sink: records per
// second and per CPU-second, the p99 of a record's time from its batch's
// read to its write, and the state's bytes per group.
func BenchmarkAggregate(b *testing.B) {
	for _, name := range []string{"pass-through", "aggregate"} {
		b.Run(name, func(b *testing.B) {
			for range b.N {
				dir := b.TempDir()
				feed := &shopFeed{n: *total, orders: 100_000, customers: 10_000, rng: rand.New(rand.NewPCG(1, 2))}
				var ops []pipeline.NamedOperator
				var stateBytes int64
				if name == "aggregate" {
					op, err := aggregate.Open(aggregate.Options{Name: "aggregate", Output: pipeline.TableID{Schema: "public", Table: "order_totals"},
						Input: shopItems.ID, GroupBy: []string{"order_id"}, Dir: filepath.Join(dir, "aggregate"),
						Aggregates: []window.AggDef{{As: "items", Func: window.CountRows}, {As: "quantity", Func: window.Sum, Column: "qty"},
							{As: "mean_price", Func: window.Avg, Column: "price"}, {As: "cheapest", Func: window.Min, Column: "price"},
							{As: "dearest", Func: window.Max, Column: "price"}, {As: "skus", Func: window.CountDistinct, Column: "sku"}},
						StateSized: func(n int64) { stateBytes = max(stateBytes, n) }})
					if err != nil {
						b.Fatal(err)
					}
					defer op.Close()
					ops = append(ops, pipeline.NamedOperator{Name: "aggregate", Operator: op})
				}
				var lat *latencies
				runFeed(b, dir, feed, feed.total(), ops, func(s pipeline.Sink) pipeline.Sink { lat = &latencies{Sink: s, feed: feed}; return lat })
				b.ReportMetric(float64(lat.p99().Microseconds())/1000, "p99-ms")
				if name == "aggregate" {
					b.ReportMetric(float64(stateBytes)/float64(feed.orders), "state-bytes/group")
				}
			}
		})
	}
}
