// Package chainbench measures the record transforms against an empty
// operator chain (make bench, or go test -bench . ./transform/chainbench).
package chainbench

import (
	"context"
	"flag"
	"fmt"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/transform/compute"
	"github.com/sluice-cdc/sluice/transform/filter"
	"github.com/sluice-cdc/sluice/transform/mask"
	"github.com/sluice-cdc/sluice/transform/scope"
)

var customers = &pipeline.Table{
	ID: pipeline.TableID{Schema: "public", Table: "customers"},
	Columns: []pipeline.Column{
		{Name: "id", Type: pipeline.TypeInt64, Key: true},
		{Name: "name", Type: pipeline.TypeString},
		{Name: "email", Type: pipeline.TypeString, Nullable: true},
		{Name: "country", Type: pipeline.TypeString, Nullable: true},
		{Name: "balance", Type: pipeline.TypeDecimal, Precision: 12, Scale: 2, Nullable: true},
		{Name: "created_at", Type: pipeline.TypeTimestampTZ},
		{Name: "vip", Type: pipeline.TypeBool},
	},
	KeyIdx: []int{0},
}

func records(n int) []pipeline.Record {
	out := make([]pipeline.Record, n)
	countries := []any{"DE", "FR", "XX", nil}
	for i := range out {
		bal, _ := pipeline.ParseDecimal(fmt.Sprintf("%d.%02d", i%100000, i%100))
		out[i] = pipeline.Record{Op: pipeline.OpInsert, Table: customers, Version: pipeline.Version{0, uint64(i), 0, 2},
			After: []any{int64(i), fmt.Sprintf("customer %d", i), fmt.Sprintf("User%d@Example.com", i), countries[i%4], bal,
				pipeline.Timestamp{Micros: int64(i) * 1e6}, i%5 == 0}}
	}
	return out
}

func chain(b *testing.B) []pipeline.Operator { return chainMasking(b, "sha256") }

// chainMasking is filter + compute + mask, masking the e-mail the given
// way.
func chainMasking(b *testing.B, way string) []pipeline.Operator {
	all := scope.Tables{}
	m, err := mask.New("mask", all, scope.DLQ, mask.Options{Columns: []string{"email"}, With: way})
	if err != nil {
		b.Fatal(err)
	}
	c, err := compute.New("compute", all, scope.DLQ, compute.Options{Column: "domain", Type: "string",
		Expr: `lower(split(after.email ?? "@", "@")[1])`})
	if err != nil {
		b.Fatal(err)
	}
	return []pipeline.Operator{filter.New("filter", all, `after.country != "XX"`, scope.DLQ), c, m}
}

// BenchmarkChain runs batches of 1,000 records through filter + compute
// + mask, and through no operator (the copy every chain starts from).
func BenchmarkChain(b *testing.B) {
	src := records(100_000)
	for _, name := range []string{"empty", "filter+compute+mask"} {
		b.Run(name, func(b *testing.B) {
			var ops []pipeline.Operator
			if name != "empty" {
				ops = chain(b)
			}
			batch := make([]pipeline.Record, 1000)
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			n := 0
			for i := 0; i < b.N; i++ {
				off := (i * 1000) % len(src)
				copy(batch, src[off:off+1000])
				recs := batch
				for _, op := range ops {
					var err error
					if recs, err = op.Process(context.Background(), recs); err != nil {
						b.Fatal(err)
					}
				}
				n += 1000
			}
			b.ReportMetric(float64(n)/time.Since(start).Seconds(), "records/s")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// feed is a bounded in-memory source: n records of customers in batches
// of 1,000, each batch checkpointable.
type feed struct {
	recs []pipeline.Record
	n    int
	next int
}

func (f *feed) Open(context.Context, pipeline.Position) error { return nil }

func (f *feed) Read(ctx context.Context) (pipeline.Batch, error) {
	if f.next >= f.n {
		return pipeline.Batch{}, io.EOF
	}
	b := pipeline.Batch{Records: make([]pipeline.Record, 1000)}
	for i := range b.Records {
		r := f.recs[(f.next+i)%len(f.recs)]
		r.Version = pipeline.Version{0, uint64(f.next + i + 1), 0, 2}
		r.After = slices.Clone(r.After)
		r.After[0] = int64(f.next + i)
		b.Records[i] = r
	}
	f.next += 1000
	b.Pos = pipeline.Position(fmt.Sprintf(`{"n":%d}`, f.next))
	return b, nil
}

func (f *feed) Ack(context.Context, pipeline.Position) error { return nil }
func (f *feed) Close(context.Context) error                  { return nil }

// BenchmarkPipeline runs 1,000,000 records (-records) from memory into a
// DuckDB file (-sink) through filter + compute + mask, through no
// operator, and through no operator with input records that already look
// like the transforms' output (the masked, computed rows: the sink's own
// cost for the wider rows, without the transforms): records per second
// and per CPU-second of the process, and allocations per record. The
// filter keeps every record, so every run writes as many rows. The mask
// takes the e-mail's SHA-256; "filter+compute+mask-email" masks it the
// email way instead (u***@example.com, no hash, a row no wider than the
// input's), which tells the hash's cost from the operators'.
func BenchmarkPipeline(b *testing.B) {
	for _, name := range []string{"empty", "filter+compute+mask", "filter+compute+mask-email", "empty-output-rows"} {
		b.Run(name, func(b *testing.B) {
			in := records(100_000)
			var ops []pipeline.Operator
			switch name {
			case "filter+compute+mask":
				ops = chainKeepingAll(b)
			case "filter+compute+mask-email":
				ops = keepingAll(chainMasking(b, "email"))
			case "empty-output-rows":
				for _, op := range chainKeepingAll(b) {
					var err error
					if in, err = op.Process(context.Background(), in); err != nil {
						b.Fatal(err)
					}
				}
			}
			for i := 0; i < b.N; i++ {
				runPipeline(b, in, ops)
			}
		})
	}
}

var (
	total    = flag.Int("records", 1_000_000, "records per pipeline run")
	sinkKind = flag.String("sink", "duckdb", "the pipeline's sink: duckdb (a file in a temp dir), opensearch (a node the benchmark starts), kafka (a broker and a registry the benchmark starts) or discard (writes nothing)")
)

// discard is a sink that writes nothing: the pipeline's own cost.
type discard struct{}

func (discard) Open(context.Context) error                     { return nil }
func (discard) Write(context.Context, []pipeline.Record) error { return nil }
func (discard) Close(context.Context) error                    { return nil }

func runPipeline(b *testing.B, in []pipeline.Record, chain []pipeline.Operator) {
	var ops []pipeline.NamedOperator
	for i, op := range chain {
		ops = append(ops, pipeline.NamedOperator{Name: fmt.Sprintf("op%d", i), Operator: op})
	}
	runFeed(b, b.TempDir(), &feed{recs: in, n: *total}, *total, ops, nil)
}

// chainKeepingAll is chain with a filter every record passes.
func chainKeepingAll(b *testing.B) []pipeline.Operator { return keepingAll(chain(b)) }

// keepingAll replaces the chain's filter by one every record passes.
func keepingAll(ops []pipeline.Operator) []pipeline.Operator {
	ops[0] = filter.New("filter", scope.Tables{}, `after.country != "ZZ"`, scope.DLQ)
	return ops
}

// BenchmarkOperator runs batches of 1,000 records through each operator
// of the chain alone.
func BenchmarkOperator(b *testing.B) {
	src := records(100_000)
	for i, name := range []string{"filter", "compute", "mask"} {
		b.Run(name, func(b *testing.B) {
			op := chain(b)[i]
			batch := make([]pipeline.Record, 1000)
			b.ReportAllocs()
			b.ResetTimer()
			for j := 0; j < b.N; j++ {
				off := (j * 1000) % len(src)
				copy(batch, src[off:off+1000])
				if _, err := op.Process(context.Background(), batch); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*1000), "ns/record")
		})
	}
}
