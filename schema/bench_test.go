package schema

import (
	"math/big"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/pipeline"
)

// benchTable is the 6-column row of the encoding target: bigint pk, int,
// text, numeric(12,2), timestamptz, bool.
func benchTable() *pipeline.Table {
	return &pipeline.Table{ID: pipeline.TableID{Database: "shop", Schema: "public", Table: "orders"}, KeyIdx: []int{0},
		Columns: []pipeline.Column{
			{Name: "id", Type: pipeline.TypeInt64, Key: true, SourceType: "bigint"},
			{Name: "qty", Type: pipeline.TypeInt32, Nullable: true, SourceType: "integer"},
			{Name: "note", Type: pipeline.TypeText, Nullable: true, SourceType: "text"},
			{Name: "amount", Type: pipeline.TypeDecimal, Precision: 12, Scale: 2, SourceType: "numeric(12,2)"},
			{Name: "created_at", Type: pipeline.TypeTimestampTZ, SourceType: "timestamp with time zone"},
			{Name: "paid", Type: pipeline.TypeBool, SourceType: "boolean"},
		}}
}

func benchRecord(tbl *pipeline.Table) *pipeline.Record {
	when := time.Date(2024, 5, 6, 7, 8, 9, 123456000, time.UTC)
	return &pipeline.Record{Op: pipeline.OpUpdate, Table: tbl,
		After: []any{int64(123456789), int64(42), "a short note about the order",
			pipeline.Decimal{Unscaled: big.NewInt(1234599), Scale: 2}, pipeline.TimestampOf(when), true},
		Version: pipeline.Version{0, 0x1a2b3c4d, 0, 7}, EventTime: when, TxID: 987654}
}

func benchSource() SourceInfo {
	lsn := int64(0x1a2b3c4d)
	return SourceInfo{Version: "0.9.0", LSN: &lsn, ProcessedAt: time.Date(2024, 5, 6, 7, 8, 10, 0, time.UTC)}
}

func benchCodec(b *testing.B) (*Codec, *pipeline.Record) {
	tbl := benchTable()
	c, err := NewCodec(tbl, Options{ConnectorName: "postgresql", ServerName: "srv"})
	if err != nil {
		b.Fatal(err)
	}
	return c, benchRecord(tbl)
}

func reportRate(b *testing.B, unit string) {
	if s := b.Elapsed().Seconds(); s > 0 {
		b.ReportMetric(float64(b.N)/s, unit)
	}
}

func BenchmarkEncodeEnvelope(b *testing.B) {
	c, r := benchCodec(b)
	src := benchSource()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.EncodeEnvelope(r, src); err != nil {
			b.Fatal(err)
		}
	}
	reportRate(b, "envelopes/s")
}

func BenchmarkEncodeValueRow(b *testing.B) {
	c, r := benchCodec(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.EncodeValue(r); err != nil {
			b.Fatal(err)
		}
	}
	reportRate(b, "values/s")
}

func BenchmarkEncodeKey(b *testing.B) {
	c, r := benchCodec(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.EncodeKey(r); err != nil {
			b.Fatal(err)
		}
	}
	reportRate(b, "keys/s")
}
