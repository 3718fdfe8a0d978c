package bleve

import (
	"flag"
	"math/big"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/blevesearch/bleve/v2"
	"github.com/blevesearch/bleve/v2/analysis/analyzer/standard"
	"github.com/blevesearch/bleve/v2/document"
	"github.com/blevesearch/bleve/v2/index/scorch"

	"github.com/sluice-cdc/sluice/internal/jsontext"
	"github.com/sluice-cdc/sluice/pipeline"
)

// benchRows is the number of upserts per benchmark run; the figure
// is 1,000,000:
//
//	go test ./sinks/bleve/ -run '^$' -bench Upsert -benchtime 1x -args -bleve.rows=1000000
var benchRows = flag.Int("bleve.rows", envRows(50_000), "upserts per BenchmarkUpsert run (default: SLUICE_BENCH_ROWS, else 50,000)")

// envRows reads SLUICE_BENCH_ROWS, the row count every sink benchmark takes.
func envRows(def int) int {
	if n, err := strconv.Atoi(os.Getenv("SLUICE_BENCH_ROWS")); err == nil && n > 0 {
		return n
	}
	return def
}

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

// benchRecords returns one batch of changes of keys [first, first+n) at
// version {0, lsn, 0, 1+i}.
func benchRecords(op pipeline.Op, first int64, n int, lsn uint64) []pipeline.Record {
	recs := make([]pipeline.Record, n)
	for i := range recs {
		g := first + int64(i)
		recs[i] = pipeline.Record{Op: op, Table: benchTable, Version: pipeline.Version{0, lsn, 0, uint64(1 + i)},
			After: []any{g, g % 100000, "customer " + strconv.FormatInt(g, 10) + " order " + strconv.FormatUint(lsn, 10),
				pipeline.Decimal{Unscaled: big.NewInt(g % 10000000), Scale: 2},
				pipeline.Timestamp{Micros: 1704067200_000_000 + g*1_000_000}, g%2 == 0}}
	}
	return recs
}

// batches calls fn with the records of a run of total upserts, batch by
// batch; pass numbers the run (its version).
func batches(total, pass int, fn func([]pipeline.Record)) {
	for first := 0; first < total; first += benchBatch {
		n := min(benchBatch, total-first)
		fn(benchRecords(pipeline.OpUpdate, int64(first+1), n, uint64(pass*1_000_000+first/benchBatch+1)))
	}
}

// plainIndex indexes the same documents with bleve's own batch indexing
// and no version checks, for reference.
type plainIndex struct {
	idx  bleve.Index
	sink *Sink // for its analyzer; never opened
}

func newPlainIndex(b *testing.B) *plainIndex {
	b.Helper()
	idx, err := bleve.NewUsing(filepath.Join(b.TempDir(), "plain"), indexMapping(), scorch.Name, scorch.Name, nil)
	if err != nil {
		b.Fatal(err)
	}
	s := &Sink{text: idx.Mapping().AnalyzerNamed(standard.Name)}
	return &plainIndex{idx: idx, sink: s}
}

func (p *plainIndex) write(b *testing.B, records []pipeline.Record) {
	batch := p.idx.NewBatch()
	var row, key []byte
	now := time.Now().UnixMilli()
	for i := range records {
		r := &records[i]
		id := "public.bench_rows/" + strconv.FormatInt(r.After[0].(int64), 10)
		d := document.NewDocument(id)
		row = append(row[:0], '{')
		var text []string
		for j := range benchTable.Columns {
			c := &benchTable.Columns[j]
			if j > 0 {
				row = append(row, ',')
			}
			row = append(jsontext.AppendString(row, c.Name), ':')
			var err error
			if row, err = appendValue(row, c.Type, c.Elem, r.After[j]); err != nil {
				b.Fatal(err)
			}
			if indexValue(d, c.Name, c.Type, c.Elem, r.After[j], nil, p.sink.text) {
				text = append(text, c.Name)
			}
		}
		row = append(row, '}')
		key = strconv.AppendInt(append(key[:0], '['), r.After[0].(int64), 10)
		key = append(key, ']')
		addInternal(d, "public.bench_rows", r.Version, false, now, append([]byte(nil), key...), append([]byte(nil), row...), text)
		if err := batch.IndexAdvanced(d); err != nil {
			b.Fatal(err)
		}
	}
	if err := p.idx.Batch(batch); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkUpsert writes benchRows upserts of 6-column rows in batches of
// 10,000 through the sink, and, as a reference measured in the same run,
// indexes the same documents with bleve's plain batch indexing (no
// folding, no version lookups). It reports the sink's rows/s, the
// reference's plain-rows/s and their ratio (rows/s ÷ plain-rows/s; 1 means
// the version guard costs nothing). "inserts" writes fresh keys
// into a growing index; "updates" rewrites keys the index already holds
// (preloaded untimed) with higher versions.
func BenchmarkUpsert(b *testing.B) {
	for _, tc := range []struct {
		name    string
		preload bool
	}{{"inserts", false}, {"updates", true}} {
		b.Run(tc.name, func(b *testing.B) {
			total := *benchRows
			var sinkTime, plainTime time.Duration
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				p := newPlainIndex(b)
				s := openSink(b, Options{Path: filepath.Join(b.TempDir(), "sink")})
				if tc.preload {
					batches(total, 1, func(r []pipeline.Record) { p.write(b, r) })
					batches(total, 1, func(r []pipeline.Record) { mustWrite(b, s, r...) })
				}
				start := time.Now()
				batches(total, 2, func(r []pipeline.Record) { p.write(b, r) })
				plainTime += time.Since(start)
				p.idx.Close() // stops its merger before the sink's run
				b.StartTimer()
				start = time.Now()
				batches(total, 2, func(r []pipeline.Record) { mustWrite(b, s, r...) })
				sinkTime += time.Since(start)
				b.StopTimer()
				s.Close(ctx)
			}
			rows := float64(total * b.N)
			b.ReportMetric(rows/sinkTime.Seconds(), "rows/s")
			b.ReportMetric(rows/plainTime.Seconds(), "plain-rows/s")
			b.ReportMetric(plainTime.Seconds()/sinkTime.Seconds(), "ratio")
		})
	}
}
