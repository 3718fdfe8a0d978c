package kafka

import (
	"fmt"
	"math"
	"math/big"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/integration/harness"
	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/schema"
	"github.com/sluice-cdc/sluice/sinks/sinktest"
)

// conformance runs the sink conformance suite with Kafka as the target:
// Read is the sink's Rows, a downstream upsert consumer that reads the
// table's topic and keeps, per key, the change with the highest version
// (ignoring older ones, honouring tombstones and truncate barriers by
// version) — which shows that the records and their version headers carry
// everything Invariant 4 needs, whatever the replays.
type conformance struct {
	k      *harness.Kafka
	reg    schema.Registry
	n      int
	server string
	cur    *Sink
}

func (h *conformance) sink(t *testing.T) pipeline.Sink {
	o := Defaults(h.k.Brokers(), h.server)
	// Compaction would refuse the keyless truncate events of the log.
	o.CreateTopics = TopicOptions{Enabled: true, Partitions: 3, ReplicationFactor: 1}
	s, err := New(o, h.reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	h.cur = s
	return s
}

func (h *conformance) Open(t *testing.T) pipeline.Sink {
	h.n++
	h.server = fmt.Sprintf("conf%d", h.n)
	return h.sink(t)
}

func (h *conformance) Reopen(t *testing.T) pipeline.Sink { return h.sink(t) }

func (h *conformance) Read(t *testing.T, table *pipeline.Table) map[string][]any {
	t.Helper()
	rows, err := h.cur.Rows(t.Context(), table)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]any{}
	for _, row := range rows {
		out[sinktest.RowKey(table, row)] = row
	}
	return out
}

func TestConformance(t *testing.T) {
	harness.SkipShort(t, "starts a Kafka broker")
	reg, _ := registryFor(t)
	sinktest.Run(t, &conformance{k: harness.KafkaT(t), reg: reg})
}

func TestMatrix(t *testing.T) {
	harness.SkipShort(t, "starts a Kafka broker")
	reg, _ := registryFor(t)
	sinktest.Matrix(t, &matrixHarness{conformance{k: harness.KafkaT(t), reg: reg}}, "Kafka sink (Avro, read back by Avro schema resolution)", "../../docs/types/kafka.md")
}

// matrixHarness names the values the Avro mapping does not carry exactly
// (the README's Avro table documents each).
type matrixHarness struct{ conformance }

func (matrixHarness) Excluded(tc sinktest.TypeCase, v any) string {
	switch x := v.(type) {
	case pipeline.Date:
		if x.Special == pipeline.Finite && (x.Days == schemaMinDate || x.Days == schemaMaxDate) {
			return "±infinity is written as this bound, so the bound reads back as ±infinity"
		}
	case pipeline.Timestamp:
		if x.Special == pipeline.Finite && (x.Micros == schemaMinMicros || x.Micros == schemaMaxMicros) {
			return "±infinity is written as this bound, so the bound reads back as ±infinity"
		}
	}
	return ""
}

func (matrixHarness) Fallback(tc sinktest.TypeCase, v any) string {
	switch x := v.(type) {
	case pipeline.Decimal:
		if !x.IsFinite() {
			return "an Avro decimal has no NaN or infinity: the field is null and the value travels in the header sluice.text.after.<column>"
		}
	case []any:
		for _, e := range x {
			if _, ok := e.([]any); ok {
				return "an Avro array has one dimension: the field is null and the value travels in the header sluice.text.after.<column>"
			}
		}
	}
	return ""
}

func (matrixHarness) MissingFallback(tc sinktest.TypeCase, v any) string {
	why := ""
	switch tc.Column.Type {
	case pipeline.TypeDate, pipeline.TypeTime, pipeline.TypeTimestamp, pipeline.TypeTimestampTZ, pipeline.TypeInterval:
		why = "no Avro default that hamba reads back for a date, time or interval union"
	case pipeline.TypeArray:
		why = "an array's items are unions, whose default can only be null"
	case pipeline.TypeDecimal:
		if tc.Column.Precision == 0 {
			why = "no Avro default that hamba reads back for a variable-scale decimal record"
		}
	}
	if f, ok := v.(float64); ok && (math.IsNaN(f) || math.IsInf(f, 0)) {
		why = "JSON, and so an Avro default, has no NaN or infinity"
	}
	if d, ok := v.(pipeline.Decimal); ok && !d.IsFinite() {
		why = "an Avro decimal, and so its default, has no NaN or infinity"
	}
	if why == "" {
		return ""
	}
	return why + ": the field's default is null and its sluice.missing property holds the value's text form, which sluice's readers apply to events written before the column"
}

var (
	schemaMinDate   = int32(time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC).Unix() / 86400)
	schemaMaxDate   = int32(time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC).Unix() / 86400)
	schemaMinMicros = time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	schemaMaxMicros = time.Date(9999, 12, 31, 23, 59, 59, 999999000, time.UTC).UnixMicro()
)

// Sweeps is false: the sink does not write a re-read's sweep
// (TestSweepIsNotWritten).
func (h *conformance) Sweeps() bool { return false }

// A re-read's sweep (a truncate marked Replaces, after the rows the read
// emitted above it) is not written: a consumer applying it as a truncate
// would drop the rows read again. The topic keeps every row, the one the
// sweep would have removed included.
func TestSweepIsNotWritten(t *testing.T) {
	harness.SkipShort(t, "starts a Kafka broker")
	reg, _ := registryFor(t)
	h := &conformance{k: harness.KafkaT(t), reg: reg}
	s := h.Open(t)
	if err := s.Open(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer s.Close(t.Context())
	row := func(op pipeline.Op, minor uint64, id int64) pipeline.Record {
		return pipeline.Record{Op: op, Table: sinktest.Accounts, Version: pipeline.Version{0, 5000, 0, minor},
			After: []any{id, fmt.Sprint("account ", id), pipeline.Decimal{Unscaled: big.NewInt(id), Scale: 2},
				pipeline.Timestamp{Micros: 1.7e15}, true, nil, []any{"a"}}, Snapshot: op == pipeline.OpRead, Replaces: op == pipeline.OpRead}
	}
	sweep := pipeline.Record{Op: pipeline.OpTruncate, Table: sinktest.Accounts, Version: pipeline.Version{0, 5000, 0, 15},
		Snapshot: true, Replaces: true}
	for _, b := range [][]pipeline.Record{
		{row(pipeline.OpInsert, 10, 1), row(pipeline.OpInsert, 10, 2)},
		{row(pipeline.OpRead, 20, 1), sweep},
	} {
		if err := s.Write(t.Context(), b); err != nil {
			t.Fatal(err)
		}
	}
	if got := h.Read(t, sinktest.Accounts); len(got) != 2 {
		t.Fatalf("after the sweep the topic holds %d rows, want both: %v", len(got), got)
	}
}
