package kafka

import (
	"fmt"
	"math"
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
