package search

import (
	"bytes"
	"fmt"
	"math/big"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/internal/jsontext"
	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/sinks/upsert"
)

// benchTable has the shape of the Postgres drain benchmark's table:
// id bigint PRIMARY KEY, qty integer, label text, amount numeric(12,2),
// created_at timestamptz, active boolean.
var benchTable = &pipeline.Table{
	ID: pipeline.TableID{Database: "bench", Schema: "public", Table: "bench_rows"},
	Columns: []pipeline.Column{
		{Name: "id", Type: pipeline.TypeInt64, Key: true},
		{Name: "qty", Type: pipeline.TypeInt32},
		{Name: "label", Type: pipeline.TypeText},
		{Name: "amount", Type: pipeline.TypeDecimal, Precision: 12, Scale: 2},
		{Name: "created_at", Type: pipeline.TypeTimestampTZ},
		{Name: "active", Type: pipeline.TypeBool},
	},
	KeyIdx: []int{0}, Generation: 1,
}

const benchBatch = 10_000

// benchRows is SLUICE_BENCH_ROWS (the figure is 1000000), else
// 100,000, rounded to whole batches.
func benchRows() int {
	if n, err := strconv.Atoi(os.Getenv("SLUICE_BENCH_ROWS")); err == nil && n > 0 {
		return max(n/benchBatch, 1) * benchBatch
	}
	return 100_000
}

// benchTx is SLUICE_BENCH_TX, the changes per source transaction
// (default 1). From 4095 on, a transaction's later changes take the exact
// path (see version.go).
func benchTx() uint64 {
	if n, err := strconv.Atoi(os.Getenv("SLUICE_BENCH_TX")); err == nil && n > 0 {
		return uint64(n)
	}
	return 1
}

// benchRecords makes a batch of updates of keys first…first+9999, in
// transactions of benchTx changes, all newer than those of earlier
// iterations.
func benchRecords(first int64, it int) []pipeline.Record {
	recs := make([]pipeline.Record, benchBatch)
	tx := benchTx()
	for i := range recs {
		g := first + int64(i)
		v := pipeline.Version{0, uint64(it+1)<<32 | uint64(g-1)/tx, 0, 1 + uint64(g-1)%tx}
		recs[i] = pipeline.Record{Op: pipeline.OpUpdate, Table: benchTable, Version: v,
			After: []any{g, g % 100000, "customer-" + strconv.FormatInt(g, 10),
				pipeline.Decimal{Unscaled: big.NewInt(g % 10000000), Scale: 2},
				pipeline.Timestamp{Micros: 1704067200_000_000 + g*1_000_000}, g%2 == 0}}
	}
	return recs
}

// BenchmarkUpsert writes SLUICE_BENCH_ROWS 6-column rows in batches of
// 10,000 (transactions of SLUICE_BENCH_TX changes) through the sink (versioned bulk index), and the same documents
// with the engine's own plain bulk index (no version, the bodies built
// beforehand, sent in requests of the same size with the same
// concurrency) into an index with the same mapping, on the same node in
// the same run, and reports both rates and their ratio (sink/plain).
// Each iteration upserts every key with a higher version.
func BenchmarkUpsert(b *testing.B) {
	for _, engine := range engines {
		b.Run(string(engine), func(b *testing.B) {
			n := node(b, engine)
			// Warm the node's JIT up on other indices (both paths), so
			// that neither side pays for it in the measured run.
			warm := openSink(b, target(n, Options{}))
			createPlain(b, warm, "")
			for i := 0; i < 3; i++ {
				recs := benchRecords(int64(i*benchBatch+1), 0)
				if err := warm.Write(ctx, recs); err != nil {
					b.Fatal(err)
				}
				sendPlain(b, warm, plainBodies(b, warm, recs, indexOf(warm, benchTable)+"-plain"))
			}
			s := openSink(b, target(n, Options{}))
			plain := indexOf(s, benchTable) + "-plain"
			createPlain(b, s, plain)
			rows := benchRows()
			var sinkTime, plainTime time.Duration
			b.ResetTimer()
			for it := 0; it < b.N; it++ {
				for first := 0; first < rows; first += benchBatch {
					b.StopTimer()
					recs := benchRecords(int64(first+1), it)
					chunks := plainBodies(b, s, recs, plain)
					b.StartTimer()
					// Alternate which goes first: background merges and
					// collections fall on both alike.
					for k := range 2 {
						t0 := time.Now()
						if (k == 0) == (first/benchBatch%2 == 0) {
							if err := s.Write(ctx, recs); err != nil {
								b.Fatal(err)
							}
							sinkTime += time.Since(t0)
						} else {
							sendPlain(b, s, chunks)
							plainTime += time.Since(t0)
						}
					}
				}
			}
			b.StopTimer()
			if c := countIndex(b, s, indexOf(s, benchTable)); c != rows {
				b.Fatalf("%d documents, want %d", c, rows)
			}
			total := float64(rows * b.N)
			b.ReportMetric(total/sinkTime.Seconds(), "sink-rows/s")
			b.ReportMetric(total/plainTime.Seconds(), "plain-rows/s")
			b.ReportMetric(plainTime.Seconds()/sinkTime.Seconds(), "ratio")
		})
	}
}

// createPlain creates the bench table's index through s (a batch with
// only a truncate at version 0, below every record) and the index dst
// ("": the index's name plus "-plain") with the same mapping.
func createPlain(b *testing.B, s *Sink, dst string) {
	src := indexOf(s, benchTable)
	if dst == "" {
		dst = src + "-plain"
	}
	if err := s.Write(ctx, []pipeline.Record{{Op: pipeline.OpTruncate, Table: benchTable}}); err != nil {
		b.Fatal(err)
	}
	_, body, err := s.call(ctx, "mapping", http.MethodGet, "/"+src+"/_mapping", nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	m := bytes.TrimSuffix(bytes.TrimPrefix(body, []byte(`{"`+src+`":`)), []byte("}"))
	create := append([]byte(`{"settings":{"index":{"translog":{"durability":"request"}}},`), bytes.TrimPrefix(m, []byte("{"))...)
	if _, _, err := s.call(ctx, "create", http.MethodPut, "/"+url.PathEscape(dst), nil, create); err != nil {
		b.Fatalf("create %s: %v", dst, err)
	}
}

// plainBodies builds the bulk bodies of the same documents the sink
// writes for recs, with plain (unversioned) index actions into index.
func plainBodies(b *testing.B, s *Sink, recs []pipeline.Record, index string) [][]byte {
	batches, failed := upsert.Prepare(recs, conv{}, func(pipeline.TableID) string { return index })
	if len(failed) > 0 {
		b.Fatal(failed)
	}
	st := &indexState{name: index}
	at := formatTime(time.Now())
	var chunks [][]byte
	var cur []byte
	for _, o := range s.plan(batches[0], st) {
		line := s.appendOp(nil, o, at)
		doc := line[bytes.IndexByte(line, '\n')+1:]
		cur = jsontext.AppendString(append(cur, `{"index":{"_index":`...), index)
		cur = append(append(jsontext.AppendString(append(cur, `,"_id":`...), o.id), "}}\n"...), doc...)
		if len(cur) > s.opts.BulkMaxBytes {
			chunks, cur = append(chunks, cur), nil
		}
	}
	if len(cur) > 0 {
		chunks = append(chunks, cur)
	}
	return chunks
}

// sendPlain sends the bodies bulkWorkers at a time, as the sink does.
func sendPlain(b *testing.B, s *Sink, chunks [][]byte) {
	var wg sync.WaitGroup
	errs := make([]error, len(chunks))
	next := make(chan int)
	for range min(bulkWorkers, len(chunks)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				status, body, err := s.eng.bulk(ctx, chunks[i], false)
				if err == nil && (status != http.StatusOK || !bytes.HasPrefix(body, []byte(`{"errors":false`))) {
					err = fmt.Errorf("plain bulk: %d %.300s", status, body)
				}
				errs[i] = err
			}
		}()
	}
	for i := range chunks {
		next <- i
	}
	close(next)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
}

func countIndex(b *testing.B, s *Sink, index string) int {
	if _, _, err := s.call(ctx, "refresh", http.MethodPost, "/"+index+"/_refresh", nil, nil); err != nil {
		b.Fatal(err)
	}
	_, body, err := s.call(ctx, "count", http.MethodGet, "/"+index+"/_count", nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	i := bytes.Index(body, []byte(`"count":`))
	j := bytes.IndexByte(body[i:], ',')
	c, _ := strconv.Atoi(string(body[i+8 : i+j]))
	return c
}
