package redis

import (
	"errors"
	"math/big"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-cdc/sluice/integration/harness"
	"github.com/sluice-cdc/sluice/pipeline"
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

func benchRows() int {
	if n, err := strconv.Atoi(os.Getenv("SLUICE_BENCH_ROWS")); err == nil && n > 0 {
		return max(n/benchBatch, 1) * benchBatch
	}
	return 1_000_000
}

func benchRecords(first int64, lsn uint64) []pipeline.Record {
	recs := make([]pipeline.Record, benchBatch)
	for i := range recs {
		g := first + int64(i)
		recs[i] = pipeline.Record{Op: pipeline.OpUpdate, Table: benchTable, Version: pipeline.Version{0, lsn, 0, uint64(1 + i)},
			After: []any{g, g % 100000, "customer-" + strconv.FormatInt(g, 10),
				pipeline.Decimal{Unscaled: big.NewInt(g % 10000000), Scale: 2},
				pipeline.Timestamp{Micros: 1704067200_000_000 + g*1_000_000}, g%2 == 0}}
	}
	return recs
}

// BenchmarkUpserts writes SLUICE_BENCH_ROWS (default 1M) 6-column rows in
// batches of 10,000 through the sink, and the same keys and values with a
// plain pipelined SET per key (the values as the json format's document,
// over as many connections as the sink uses) against the same server, and reports both rates and their ratio
// (sink/SET; the target is ≥ 0.5). For the hash format it also writes the
// same fields with a plain pipelined HSET and reports the sink's ratio to
// that (the hash data structure's own cost, which SET does not pay). Each
// iteration upserts every key with a higher version.
func BenchmarkUpserts(b *testing.B) {
	for _, f := range formats {
		b.Run(f, func(b *testing.B) {
			r := harness.RedisT(b)
			s := openSink(b, r.Addr(), Options{Format: f})
			c := goredis.NewClient(&goredis.Options{Addr: r.Addr(), DB: 1, ReadTimeout: 30 * time.Second})
			defer c.Close()
			rows := benchRows()
			var sinkTime, setTime, hsetTime time.Duration
			b.ResetTimer()
			for it := 0; it < b.N; it++ {
				for first := 0; first < rows; first += benchBatch {
					b.StopTimer()
					recs := benchRecords(int64(first+1), uint64(it+1))
					b.StartTimer()
					t0 := time.Now()
					if err := s.Write(ctx, recs); err != nil {
						b.Fatal(err)
					}
					sinkTime += time.Since(t0)
					b.StopTimer()
					// The baseline: the same keys and encoded values.
					keys := make([]string, len(recs))
					vals := make([]string, len(recs))
					js := New(Options{Format: "json"}, nil)
					for i := range recs {
						k, argv, err := js.args(&recs[i])
						if err != nil {
							b.Fatal(err)
						}
						keys[i], vals[i] = k, argv[len(argv)-1].(string)
					}
					b.StartTimer()
					t0 = time.Now()
					pipelined(b, c, len(keys), func(pipe goredis.Pipeliner, i int) {
						pipe.Set(ctx, keys[i], vals[i], 0)
					})
					setTime += time.Since(t0)
					if f != "hash" {
						continue
					}
					// A second reference for the hash format: the same
					// fields written with a plain pipelined HSET (the data
					// structure's own cost, without the version check).
					b.StopTimer()
					fields := make([][]any, len(recs))
					for i := range recs {
						_, argv, err := s.args(&recs[i])
						if err != nil {
							b.Fatal(err)
						}
						fields[i] = argv[1:] // nd, then the data: no Unchanged columns here
					}
					b.StartTimer()
					t0 = time.Now()
					pipelined(b, c, len(keys), func(pipe goredis.Pipeliner, i int) {
						pipe.HSet(ctx, "h:"+keys[i], fields[i]...)
					})
					hsetTime += time.Since(t0)
				}
			}
			n := float64(rows * b.N)
			b.ReportMetric(n/sinkTime.Seconds(), "sink-rows/s")
			b.ReportMetric(n/setTime.Seconds(), "set-rows/s")
			b.ReportMetric(setTime.Seconds()/sinkTime.Seconds(), "ratio")
			if hsetTime > 0 {
				b.ReportMetric(n/hsetTime.Seconds(), "hset-rows/s")
				b.ReportMetric(hsetTime.Seconds()/sinkTime.Seconds(), "ratio-to-hset")
			}
		})
	}
}

// pipelined sends n commands, add(pipe, i) adding command i, as one
// pipeline per connection over as many connections as the sink uses, and
// returns when every reply is in.
func pipelined(b *testing.B, c *goredis.Client, n int, add func(pipe goredis.Pipeliner, i int)) {
	var wg sync.WaitGroup
	errs := make([]error, partitions)
	for p := range partitions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pipe := c.Pipeline()
			for i := p * n / partitions; i < (p+1)*n/partitions; i++ {
				add(pipe, i)
			}
			_, errs[p] = pipe.Exec(ctx)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		b.Fatal(err)
	}
}
