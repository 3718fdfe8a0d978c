package postgres

import (
	"math/big"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

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

// benchRecords returns a batch of changes of keys [first, first+n) at
// version {0, lsn, 0, 1+i}.
func benchRecords(op pipeline.Op, first int64, n int, lsn uint64) []pipeline.Record {
	recs := make([]pipeline.Record, n)
	for i := range recs {
		g := first + int64(i)
		recs[i] = pipeline.Record{Op: op, Table: benchTable, Version: pipeline.Version{0, lsn, 0, uint64(1 + i)},
			After: []any{g, g % 100000, "customer-" + strconv.FormatInt(g, 10),
				pipeline.Decimal{Unscaled: big.NewInt(g % 10000000), Scale: 2},
				pipeline.Timestamp{Micros: 1704067200_000_000 + g*1_000_000}, g%2 == 0}}
	}
	return recs
}

// BenchmarkUpserts writes SLUICE_BENCH_ROWS rows (default 1,000,000) of
// six columns in batches of 10,000 through Write into an empty target,
// then COPYs the same rows into an empty table of the same shape (with its
// primary key) in one binary COPY, and reports the ratio of the two
// throughputs (upsert rows/s ÷ COPY rows/s). It also rewrites every row
// once with a higher version (updates) and reports that throughput.
func BenchmarkUpserts(b *testing.B) {
	total := 1_000_000
	if v := os.Getenv("SLUICE_BENCH_ROWS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			b.Fatalf("SLUICE_BENCH_ROWS=%q", v)
		}
		total = n
	}
	var upsertDur, updateDur, copyDur time.Duration
	for b.Loop() {
		s := openSink(b, Options{})
		pass := func(op pipeline.Op, lsn uint64) time.Duration {
			var d time.Duration
			for first := 0; first < total; first += benchBatch {
				recs := benchRecords(op, 1+int64(first), min(benchBatch, total-first), lsn)
				start := time.Now()
				if err := s.Write(ctx, recs); err != nil {
					b.Fatal(err)
				}
				d += time.Since(start)
			}
			return d
		}
		upsertDur += pass(pipeline.OpInsert, 1)
		updateDur += pass(pipeline.OpUpdate, 2)

		// The baseline: the same rows COPYed into an empty table.
		copyTable := s.qualified("copy_baseline")
		if _, err := s.conn.Exec(ctx, "CREATE TABLE "+copyTable+` (id bigint PRIMARY KEY, qty integer, label text,
			amount numeric(12,2), created_at timestamptz, active boolean)`); err != nil {
			b.Fatal(err)
		}
		i := 0
		start := time.Now()
		n, err := s.conn.CopyFrom(ctx, pgx.Identifier{s.opts.Schema, "copy_baseline"},
			[]string{"id", "qty", "label", "amount", "created_at", "active"},
			pgx.CopyFromFunc(func() ([]any, error) {
				if i == total {
					return nil, nil
				}
				i++
				g := int64(i)
				return []any{g, int32(g % 100000), "customer-" + strconv.FormatInt(g, 10),
					pgtype.Numeric{Int: big.NewInt(g % 10000000), Exp: -2, Valid: true},
					time.UnixMicro(1704067200_000_000 + g*1_000_000), g%2 == 0}, nil
			}))
		copyDur += time.Since(start)
		if err != nil || n != int64(total) {
			b.Fatalf("copy: %d rows, %v", n, err)
		}
		var live int64
		if err := s.conn.QueryRow(ctx, "SELECT count(*) FROM "+s.qualified("public_bench_rows")+" WHERE NOT _sluice_deleted").Scan(&live); err != nil || live != int64(total) {
			b.Fatalf("target holds %d rows, %v", live, err)
		}
		s.Close(ctx)
	}
	rows := float64(total) * float64(b.N)
	b.ReportMetric(rows/upsertDur.Seconds(), "upsert-rows/s")
	b.ReportMetric(rows/updateDur.Seconds(), "update-rows/s")
	b.ReportMetric(rows/copyDur.Seconds(), "copy-rows/s")
	b.ReportMetric(copyDur.Seconds()/upsertDur.Seconds(), "upsert/copy")
	b.ReportMetric(copyDur.Seconds()/updateDur.Seconds(), "update/copy")
}
