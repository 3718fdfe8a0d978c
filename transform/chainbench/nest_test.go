package chainbench

import (
	"context"
	"fmt"
	"io"
	"math/big"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/transform/join"
)

var (
	shopCustomers = &pipeline.Table{ID: pipeline.TableID{Schema: "public", Table: "customers"},
		Columns: []pipeline.Column{{Name: "id", Type: pipeline.TypeInt64, Key: true}, {Name: "name", Type: pipeline.TypeString}},
		KeyIdx:  []int{0}}
	shopOrders = &pipeline.Table{ID: pipeline.TableID{Schema: "public", Table: "orders"},
		Columns: []pipeline.Column{{Name: "id", Type: pipeline.TypeInt64, Key: true}, {Name: "customer_id", Type: pipeline.TypeInt64},
			{Name: "note", Type: pipeline.TypeString}},
		KeyIdx: []int{0}}
	shopItems = &pipeline.Table{ID: pipeline.TableID{Schema: "public", Table: "order_items"},
		Columns: []pipeline.Column{{Name: "id", Type: pipeline.TypeInt64, Key: true}, {Name: "order_id", Type: pipeline.TypeInt64},
			{Name: "line_no", Type: pipeline.TypeInt64}, {Name: "sku", Type: pipeline.TypeString}, {Name: "qty", Type: pipeline.TypeInt64},
			{Name: "price", Type: pipeline.TypeDecimal, Precision: 10, Scale: 2}},
		KeyIdx: []int{0}}
)

// shopFeed is the nest benchmark's source: the customers and orders
// first (inserts), then n changes of order items in batches of 1,000:
// 60% inserts of a new item into a random order, 25% updates of an
// item's quantity, 10% moves of an item to another order and 5%
// deletes. Every record's Pos is its batch's, whose read time the
// latency sink looks up.
type shopFeed struct {
	n, orders, customers int
	rng                  *rand.Rand
	next                 int      // records emitted
	items                []int64  // live item ids
	itemOrder            []int64  // their orders
	lineNo               []int64  // their line numbers
	nextItem             int64    // the next new item's id
	version              uint64   // the last version given
	readAt               sync.Map // Pos → time.Time
}

func (f *shopFeed) Open(context.Context, pipeline.Position) error { return nil }
func (f *shopFeed) Ack(context.Context, pipeline.Position) error  { return nil }
func (f *shopFeed) Close(context.Context) error                   { return nil }

func (f *shopFeed) total() int { return f.customers + f.orders + f.n }

func (f *shopFeed) item(k int, order int64) []any {
	id := f.items[k]
	return []any{id, order, f.lineNo[k], fmt.Sprint("sku-", id%5000), id%7 + 1, pipeline.Decimal{Unscaled: big.NewInt(id%10000 + 99), Scale: 2}}
}

func (f *shopFeed) Read(context.Context) (pipeline.Batch, error) {
	if f.next >= f.total() {
		return pipeline.Batch{}, io.EOF
	}
	size := min(1000, f.total()-f.next)
	pos := pipeline.Position(fmt.Sprintf(`{"n":%d}`, f.next+size))
	b := pipeline.Batch{Records: make([]pipeline.Record, size), Pos: pos}
	for k := range b.Records {
		i := f.next + k
		f.version++
		r := pipeline.Record{Version: pipeline.Version{0, f.version, 0, 2}, Pos: pos, EventTime: time.Unix(int64(i/1000), 0)}
		switch {
		case i < f.customers:
			r.Op, r.Table, r.After = pipeline.OpInsert, shopCustomers, []any{int64(i + 1), fmt.Sprint("customer ", i+1)}
		case i < f.customers+f.orders:
			id := int64(i - f.customers + 1)
			r.Op, r.Table, r.After = pipeline.OpInsert, shopOrders, []any{id, id%int64(f.customers) + 1, "note"}
		default:
			r.Table = shopItems
			switch x := f.rng.IntN(100); {
			case x < 60 || len(f.items) < 100:
				f.nextItem++
				f.items, f.itemOrder = append(f.items, f.nextItem), append(f.itemOrder, 1+f.rng.Int64N(int64(f.orders)))
				f.lineNo = append(f.lineNo, f.rng.Int64N(20))
				last := len(f.items) - 1
				r.Op, r.After = pipeline.OpInsert, f.item(last, f.itemOrder[last])
			case x < 85:
				k := f.rng.IntN(len(f.items))
				r.Op, r.Before, r.After = pipeline.OpUpdate, []any{f.items[k], nil, nil, nil, nil, nil}, f.item(k, f.itemOrder[k])
				r.After[4] = r.After[4].(int64) + 1
			case x < 95:
				k := f.rng.IntN(len(f.items))
				f.itemOrder[k] = 1 + f.rng.Int64N(int64(f.orders))
				r.Op, r.Before, r.After = pipeline.OpUpdate, []any{f.items[k], nil, nil, nil, nil, nil}, f.item(k, f.itemOrder[k])
			default:
				k := f.rng.IntN(len(f.items))
				r.Op, r.Before = pipeline.OpDelete, []any{f.items[k], nil, nil, nil, nil, nil}
				last := len(f.items) - 1
				f.items[k], f.itemOrder[k], f.lineNo[k] = f.items[last], f.itemOrder[last], f.lineNo[last]
				f.items, f.itemOrder, f.lineNo = f.items[:last], f.itemOrder[:last], f.lineNo[:last]
			}
		}
		b.Records[k] = r
	}
	f.next += size
	f.readAt.Store(string(pos), time.Now())
	return b, nil
}

// latencies is what a sink writes records with: per record, the time
// from its batch's read to its write.
type latencies struct {
	pipeline.Sink
	feed *shopFeed
	mu   sync.Mutex
	each []time.Duration
}

func (l *latencies) Write(ctx context.Context, recs []pipeline.Record) error {
	err := l.Sink.Write(ctx, recs)
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := range recs {
		if at, ok := l.feed.readAt.Load(string(recs[i].Pos)); ok {
			l.each = append(l.each, now.Sub(at.(time.Time)))
		}
	}
	return err
}

func (l *latencies) p99() time.Duration {
	slices.Sort(l.each)
	if len(l.each) == 0 {
		return 0
	}
	return l.each[len(l.each)*99/100]
}

// BenchmarkNest runs 10,000 customers, 100,000 orders and then 1,000,000
// changes of their items (-records; shopFeed) through a nest that embeds
// each order's items (by line number) and its customer, next to the same
// changes through no operator, into -sink: records per second and per
// CPU-second, the p99 of a record's time from its batch's read to its
// write into the sink, and the nest's state bytes per order.
func BenchmarkNest(b *testing.B) {
	for _, name := range []string{"pass-through", "nest"} {
		b.Run(name, func(b *testing.B) {
			for range b.N {
				dir := b.TempDir()
				feed := &shopFeed{n: *total, orders: 100_000, customers: 10_000, rng: rand.New(rand.NewPCG(1, 2))}
				var ops []pipeline.NamedOperator
				var stateBytes int64
				if name == "nest" {
					op, err := join.Open(join.Options{Output: "public.order_docs", From: "public.orders", Dir: filepath.Join(dir, "nest"),
						With: []join.Lookup{{Table: "public.customers", On: []string{"customer_id"}, As: "customer", Columns: []string{"name"}}},
						Children: []join.Child{{Table: "public.order_items", On: []string{"order_id"}, As: "items", OrderBy: []string{"line_no"},
							Columns: []string{"line_no", "sku", "qty", "price"}, Max: 1000}},
						StateSized: func(n int64) { stateBytes = max(stateBytes, n) }})
					if err != nil {
						b.Fatal(err)
					}
					defer op.Close()
					ops = append(ops, pipeline.NamedOperator{Name: "nest", Operator: op})
				}
				var lat *latencies
				runFeed(b, dir, feed, feed.total(), ops, func(s pipeline.Sink) pipeline.Sink { lat = &latencies{Sink: s, feed: feed}; return lat })
				b.ReportMetric(float64(lat.p99().Microseconds())/1000, "p99-ms")
				if name == "nest" {
					b.ReportMetric(float64(stateBytes)/float64(feed.orders), "state-bytes/order")
				}
			}
		})
	}
}
