package kafka

import (
	"fmt"
	"testing"

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
