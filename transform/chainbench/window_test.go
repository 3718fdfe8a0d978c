package chainbench

import (
	"context"
	"fmt"
	"io"
	"math/big"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/sluice-cdc/sluice/offsets"
	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/sinks/duckdb"
	"github.com/sluice-cdc/sluice/transform/window"
)

var orders = &pipeline.Table{
	ID: pipeline.TableID{Schema: "public", Table: "orders"},
	Columns: []pipeline.Column{
		{Name: "id", Type: pipeline.TypeInt64, Key: true},
		{Name: "store_id", Type: pipeline.TypeInt64},
		{Name: "amount", Type: pipeline.TypeDecimal, Precision: 12, Scale: 2},
		{Name: "created_at", Type: pipeline.TypeTimestampTZ},
	},
	KeyIdx: []int{0},
}

// orderFeed is the window benchmark's source: n changes of orders in
// batches of 1,000, in blocks of eight: six inserts, an update of the
// amount of an order inserted 100 blocks before and a delete of another
// (a quarter updates and deletes). Event times advance a second every
// 1,000 changes; an order's store is its id modulo groups.
type orderFeed struct {
	n, next, groups int
	epoch           time.Time
}

func (f *orderFeed) Open(context.Context, pipeline.Position) error { return nil }
func (f *orderFeed) Ack(context.Context, pipeline.Position) error  { return nil }
func (f *orderFeed) Close(context.Context) error                   { return nil }

// row is order id's image: inserted at change index at, the amount
// raised by bump cents.
func (f *orderFeed) row(id, bump int64) []any {
	at := (id/6)*8 + id%6
	amount := pipeline.Decimal{Unscaled: big.NewInt(id%50000 + 100 + bump), Scale: 2}
	return []any{id, id % int64(f.groups), amount, pipeline.Timestamp{Micros: f.epoch.UnixMicro() + at*1000}}
}

func (f *orderFeed) Read(context.Context) (pipeline.Batch, error) {
	if f.next >= f.n {
		return pipeline.Batch{}, io.EOF
	}
	b := pipeline.Batch{Records: make([]pipeline.Record, 1000)}
	for k := range b.Records {
		i := int64(f.next + k)
		block, slot := i/8, i%8
		r := pipeline.Record{Table: orders, Version: pipeline.Version{0, uint64(i + 1), 0, 2}, EventTime: f.epoch.Add(time.Duration(i) * time.Millisecond)}
		switch {
		case slot < 6:
			r.Op, r.After = pipeline.OpInsert, f.row(block*6+slot, 0)
		case block < 100:
			r.Op, r.After = pipeline.OpInsert, f.row(-1-i, 0) // before the first updates: more inserts
		case slot == 6:
			id := (block-100)*6 + 1
			r.Op, r.Before, r.After = pipeline.OpUpdate, []any{id, nil, nil, nil}, f.row(id, 125)
		default:
			r.Op, r.Before = pipeline.OpDelete, []any{(block - 100) * 6, nil, nil, nil}
		}
		b.Records[k] = r
	}
	f.next += 1000
	b.Pos = pipeline.Position(fmt.Sprintf(`{"n":%d}`, f.next))
	return b, nil
}

// stateSeen keeps a window's measurements: the largest state and the
// state writes' times.
type stateSeen struct {
	mu                 sync.Mutex
	maxGroups, maxRows int
	maxBytes           int64
	writes             []time.Duration
	groupsAt           []int // open groups at each write
}

func (s *stateSeen) Late(string, string, int) {}
func (s *stateSeen) Progress(_ string, _ time.Duration, _, groups, rows int, bytes int64, write time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.maxGroups, s.maxBytes = max(s.maxGroups, groups), max(s.maxBytes, bytes)
	s.maxRows = max(s.maxRows, rows)
	s.writes = append(s.writes, write)
	s.groupsAt = append(s.groupsAt, groups)
}

// meanWrite is the mean state write time over the writes made while at
// least half the largest state was held.
func (s *stateSeen) meanWrite() time.Duration {
	var sum time.Duration
	n := 0
	for i, w := range s.writes {
		if s.groupsAt[i]*2 >= s.maxGroups {
			sum += w
			n++
		}
	}
	if n == 0 {
		return 0
	}
	return sum / time.Duration(n)
}

// BenchmarkWindow runs 1,000,000 changes of orders (-records; a quarter
// updates and deletes) through a tumbling one-minute window with 10,000
// groups (count, sum, avg and max of the amount per store), next to the
// same changes through no operator, into -sink: records per second and
// per CPU-second. The window runs twice, keeping its closed windows'
// state 0 s and 10 min (allowed lateness): the state's bytes per open
// group at its largest, and the mean time of a batch's state write (one
// synced bbolt transaction) while the state is at least half its
// largest, which stays flat when the state grows tenfold: a write costs
// what the batch changed.
func BenchmarkWindow(b *testing.B) {
	for _, name := range []string{"empty", "tumbling-1m", "tumbling-1m-lateness-10m"} {
		b.Run(name, func(b *testing.B) {
			for range b.N {
				dir := b.TempDir()
				var ops []pipeline.NamedOperator
				seen := &stateSeen{}
				if name != "empty" {
					o := window.Options{Name: "window", Output: pipeline.TableID{Schema: "analytics", Table: "revenue"}, Input: orders.ID,
						EventTime: "created_at", Spec: window.Tumbling(time.Minute), OutOfOrder: 5 * time.Second, Late: window.LateDrop,
						GroupBy: []string{"store_id"}, Dir: filepath.Join(dir, "window"), Observer: seen,
						Aggregates: []window.AggDef{{As: "orders", Func: window.CountRows}, {As: "revenue", Func: window.Sum, Column: "amount"},
							{As: "mean", Func: window.Avg, Column: "amount"}, {As: "biggest", Func: window.Max, Column: "amount"}}}
					if name == "tumbling-1m-lateness-10m" {
						o.Lateness = 10 * time.Minute
					}
					op, err := window.Open(o)
					if err != nil {
						b.Fatal(err)
					}
					defer op.Close()
					ops = append(ops, pipeline.NamedOperator{Name: "window", Operator: op})
				}
				runFeed(b, dir, &orderFeed{n: *total, groups: 10_000, epoch: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}, *total, ops, nil)
				if name != "empty" {
					b.ReportMetric(float64(seen.maxBytes)/float64(seen.maxGroups), "state-bytes/group")
					b.ReportMetric(float64(seen.maxGroups), "max-groups")
					b.ReportMetric(float64(seen.maxRows), "max-rows")
					b.ReportMetric(float64(seen.meanWrite().Microseconds())/1000, "ms/state-write")
				}
			}
		})
	}
}

// runFeed runs source (n records) through ops into -sink, wrapped by wrap
// when set, and reports records per second and per CPU-second (of the
// process) and allocations per record.
func runFeed(b *testing.B, dir string, source pipeline.Source, n int, ops []pipeline.NamedOperator, wrap func(pipeline.Sink) pipeline.Sink) {
	store, err := offsets.OpenDir(filepath.Join(dir, "offsets"), "bench")
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	var sink pipeline.Sink = discard{}
	switch *sinkKind {
	case "duckdb":
		sink = duckdb.New(duckdb.Options{Name: "duckdb", Path: filepath.Join(dir, "bench.duckdb")}, zap.NewNop())
	case "opensearch":
		sink = searchSink(b)
	case "kafka":
		sink = kafkaSink(b)
	}
	if wrap != nil {
		sink = wrap(sink)
	}
	rt, err := pipeline.New(pipeline.Config{Pipeline: "bench"}, source,
		[]pipeline.NamedSink{{Name: "duckdb", Sink: sink}}, store, pipeline.Options{Operators: ops, Log: zap.NewNop()})
	if err != nil {
		b.Fatal(err)
	}
	var before, after syscall.Rusage
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &before)
	start := time.Now()
	if err := rt.Run(context.Background()); err != nil {
		b.Fatal(err)
	}
	took := time.Since(start)
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &after)
	runtime.ReadMemStats(&m1)
	cpu := time.Duration(after.Utime.Nano()+after.Stime.Nano()-before.Utime.Nano()-before.Stime.Nano()) * time.Nanosecond
	b.ReportMetric(float64(n)/took.Seconds(), "records/s")
	b.ReportMetric(float64(n)/cpu.Seconds(), "records/cpu-s")
	b.ReportMetric(float64(m1.Mallocs-m0.Mallocs)/float64(n), "allocs/record")
	b.ReportMetric(0, "ns/op")
}
