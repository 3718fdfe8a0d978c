package duckdb

import (
	"math/big"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"

	"github.com/sluice-cdc/sluice/pipeline"
)

// benchTable has the shape of the Postgres drain benchmark's table:
// id bigint PRIMARY KEY, qty integer, label text, amount numeric(12,2),
// created_at timestamptz, active boolean.
var benchTable = &pipeline.Table{
	ID: pipeline.TableID{Database: "bench", Schema: "public", Table: "bench_rows"},
	Columns: []pipeline.Column{
		{Name: "id", Type: pipeline.TypeInt64, Key: true, SourceType: "bigint"},
		{Name: "qty", Type: pipeline.TypeInt32, SourceType: "integer"},
		{Name: "label", Type: pipeline.TypeText, SourceType: "text"},
		{Name: "amount", Type: pipeline.TypeDecimal, Precision: 12, Scale: 2, SourceType: "numeric(12,2)"},
		{Name: "created_at", Type: pipeline.TypeTimestampTZ, SourceType: "timestamp with time zone"},
		{Name: "active", Type: pipeline.TypeBool, SourceType: "boolean"},
	},
	KeyIdx: []int{0}, Generation: 1,
}

const benchBatch = 10_000

// benchRecords returns one batch of inserts (or updates) of keys
// [first, first+benchBatch) at version {0, lsn, 0, 1+i}, with values like
// the Postgres benchmark's generate_series rows.
func benchRecords(op pipeline.Op, first int64, lsn uint64) []pipeline.Record {
	recs := make([]pipeline.Record, benchBatch)
	for i := range recs {
		g := first + int64(i)
		recs[i] = pipeline.Record{Op: op, Table: benchTable, Version: pipeline.Version{0, lsn, 0, uint64(1 + i)},
			After: []any{g, g % 100000, "customer-" + strconv.FormatInt(g, 10),
				pipeline.Decimal{Unscaled: big.NewInt(g % 10000000), Scale: 2},
				pipeline.Timestamp{Micros: 1704067200_000_000 + g*1_000_000}, g%2 == 0}}
	}
	return recs
}

func openBenchSink(b *testing.B) *Sink {
	b.Helper()
	s := New(Options{Path: filepath.Join(b.TempDir(), "bench.duckdb")}, nil)
	if err := s.Open(ctx); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close(ctx) })
	return s
}

// write writes recs as the runtime would: a write DuckDB ran out of
// memory for (pipeline.Overloaded: the sink has raised its working
// headroom) is written again.
func write(b *testing.B, s *Sink, recs []pipeline.Record) {
	b.Helper()
	for tries := 1; ; tries++ {
		err := s.Write(ctx, recs)
		if err == nil {
			return
		}
		if !pipeline.IsOverloaded(err) || tries == 5 {
			b.Fatal(err)
		}
	}
}

// runWrites times Write of every batch next(i) returns, one batch per
// iteration, and reports rows/s, ns/row and allocs/row.
func runWrites(b *testing.B, s *Sink, next func(i int) []pipeline.Record) {
	b.Helper()
	b.ReportAllocs()
	var ms0, ms1 runtime.MemStats
	var rows int
	b.ResetTimer()
	b.StopTimer()
	runtime.ReadMemStats(&ms0)
	var mallocsOutside uint64
	for i := 0; i < b.N; i++ {
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		recs := next(i)
		runtime.ReadMemStats(&m1)
		mallocsOutside += m1.Mallocs - m0.Mallocs
		b.StartTimer()
		write(b, s, recs)
		b.StopTimer()
		rows += len(recs)
	}
	runtime.ReadMemStats(&ms1)
	b.ReportMetric(float64(rows)/b.Elapsed().Seconds(), "rows/s")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(rows), "ns/row")
	b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs-mallocsOutside)/float64(rows), "allocs/row")
}

// BenchmarkWriteInserts writes batches of 10,000 fresh keys into a growing
// table, like the Postgres drain into DuckDB.
func BenchmarkWriteInserts(b *testing.B) {
	s := openBenchSink(b)
	runWrites(b, s, func(i int) []pipeline.Record {
		return benchRecords(pipeline.OpInsert, 1+int64(i)*benchBatch, uint64(i+1))
	})
}

// BenchmarkWriteUpdates rewrites the keys of a 100,000-row table with
// higher versions, 10,000 keys per batch.
func BenchmarkWriteUpdates(b *testing.B) {
	s := openBenchSink(b)
	const preload = 10
	for i := range preload {
		write(b, s, benchRecords(pipeline.OpInsert, 1+int64(i)*benchBatch, uint64(i+1)))
	}
	runWrites(b, s, func(i int) []pipeline.Record {
		return benchRecords(pipeline.OpUpdate, 1+int64(i%preload)*benchBatch, uint64(preload+i+1))
	})
}

// BenchmarkWriteUpdatesUnchanged is BenchmarkWriteUpdates with the label
// Unchanged (unchanged TOAST) in every update: the full staging form that
// keeps stored values.
func BenchmarkWriteUpdatesUnchanged(b *testing.B) {
	s := openBenchSink(b)
	const preload = 10
	for i := range preload {
		write(b, s, benchRecords(pipeline.OpInsert, 1+int64(i)*benchBatch, uint64(i+1)))
	}
	runWrites(b, s, func(i int) []pipeline.Record {
		recs := benchRecords(pipeline.OpUpdate, 1+int64(i%preload)*benchBatch, uint64(preload+i+1))
		for j := range recs {
			recs[j].After[2] = pipeline.UnchangedValue
		}
		return recs
	})
}

// BenchmarkWriteSpreadUpdates writes batches of 600 updates spread over a
// 1,000,000-row table (every key far from the others, as a stream's
// updates of a large table are), each batch with 7,000 fresh keys beside
// them (the rows of an incremental snapshot's chunk). 2026-12-03, 2 cores:
// 0.55 s a batch when the updates were made in place (MERGE … UPDATE),
// 0.08 s as deletes and inserts (merge.go).
func BenchmarkWriteSpreadUpdates(b *testing.B) {
	s := openBenchSink(b)
	const preload = 100 // batches of benchBatch keys
	for i := range preload {
		write(b, s, benchRecords(pipeline.OpRead, int64(i)*benchBatch, 1))
	}
	const n = preload * benchBatch
	runWrites(b, s, func(i int) []pipeline.Record {
		fresh := benchRecords(pipeline.OpInsert, int64(n+i*benchBatch), uint64(10+i))
		recs := make([]pipeline.Record, 0, 7600)
		for j := range 600 {
			r := fresh[j]
			g := int64((i*600+j)*7919) % n
			r.Op, r.After = pipeline.OpUpdate, append([]any{g}, r.After[1:]...)
			recs = append(recs, r)
		}
		return append(recs, fresh[600:7600]...)
	})
}

// BenchmarkWriteChunks is an incremental snapshot into a 1,000,000-row
// table: per iteration one chunk of 65,536 snapshot rows of new keys
// (idle), and under load 1% of the chunk's keys written by the stream
// before the chunk's window (in the table already) and one stream batch
// of 200 updates spread over the table besides.
func BenchmarkWriteChunks(b *testing.B) {
	for _, loaded := range []bool{false, true} {
		name := "idle"
		if loaded {
			name = "loaded"
		}
		b.Run(name, func(b *testing.B) { writeChunks(b, loaded) })
	}
}

func writeChunks(b *testing.B, loaded bool) {
	s := openBenchSink(b)
	const preload = 100 // batches of benchBatch keys
	for i := range preload {
		write(b, s, benchRecords(pipeline.OpRead, int64(i)*benchBatch, 1))
	}
	n, chunk := preload*benchBatch, benchChunk
	b.ReportAllocs()
	b.ResetTimer()
	rows := 0
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		recs := make([]pipeline.Record, 0, chunk)
		for len(recs) < chunk {
			recs = append(recs, benchRecords(pipeline.OpRead, int64(n+i*chunk+len(recs)), uint64(100+2*i))...)
		}
		recs = recs[:chunk]
		var upd []pipeline.Record
		if loaded {
			for j := 0; j < chunk; j += 100 {
				recs[j].After = append([]any{int64((i*chunk+j)*7919) % int64(n)}, recs[j].After[1:]...)
			}
			upd = benchRecords(pipeline.OpUpdate, 0, uint64(101+2*i))[:200]
			for j := range upd {
				upd[j].After = append([]any{int64((i*200+j)*104729) % int64(n)}, upd[j].After[1:]...)
			}
		}
		b.StartTimer()
		write(b, s, recs)
		if len(upd) > 0 {
			write(b, s, upd)
		}
		rows += len(recs) + len(upd)
	}
	b.ReportMetric(float64(rows)/b.Elapsed().Seconds(), "rows/s")
}

var benchChunk = 65_536
