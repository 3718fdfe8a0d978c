package kafka

import (
	"fmt"
	"testing"

	"github.com/sluice-cdc/sluice/integration/harness"
	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/schema"
	"github.com/sluice-cdc/sluice/schema/schematest"
	"github.com/sluice-cdc/sluice/sinks/sinktest"
)

// conformance runs the sink conformance suite with Kafka as the target:
// Read plays the part of a downstream upsert consumer that reads every
// topic of the table and keeps, per key, the change with the highest
// version (ignoring older ones, honouring tombstones and truncate
// barriers by version) — which shows that the records and their version
// headers carry everything Invariant 4 needs, whatever the replays.
type conformance struct {
	k      *harness.Kafka
	reg    schema.Registry
	srv    *schematest.Registry
	n      int
	server string
	cur    *Sink
}

// KeepsVersions: a plain topic records no generation; the exactly-once
// mark does (TestTxnKfake/NewGeneration).
func (c *conformance) KeepsVersions() bool { return false }

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

type consumed struct {
	row     []any
	version pipeline.Version
	deleted bool
}

func (h *conformance) Read(t *testing.T, table *pipeline.Table) map[string][]any {
	t.Helper()
	topic, err := TopicName(DefaultTopicTemplate, h.server, table.ID)
	if err != nil {
		t.Fatal(err)
	}
	codec, err := schema.NewCodec(table, schema.Options{ConnectorName: "postgresql", ServerName: h.server, Unchanged: true})
	if err != nil {
		t.Fatal(err)
	}
	envText, _ := schema.SchemaText(codec.EnvelopeSchema())
	state := map[string]*consumed{}
	var barrier pipeline.Version
	for _, m := range readTopic(t, h.k, topic) {
		vs, _ := header(m, headerVersion)
		v, err := pipeline.ParseVersion(vs)
		if err != nil {
			t.Fatal(err)
		}
		if v.Less(barrier) {
			continue
		}
		var env *schema.Envelope
		if m.Value != nil {
			id, payload, err := schema.Unframe(m.Value)
			if err != nil {
				t.Fatal(err)
			}
			if text, _ := h.srv.Mem.Schema(id); text != envText {
				t.Fatalf("%s: value schema id %d is not the table's envelope", topic, id)
			}
			if env, err = codec.DecodeEnvelope(payload); err != nil {
				t.Fatal(err)
			}
			if env.Op == "t" {
				barrier = v
				for k, c := range state {
					if c.version.Less(v) {
						delete(state, k)
					}
				}
				continue
			}
		}
		_, kp, err := schema.Unframe(m.Key)
		if err != nil {
			t.Fatal(err)
		}
		key, err := codec.DecodeKey(kp)
		if err != nil {
			t.Fatal(err)
		}
		kk := sinktest.Key(key)
		old := state[kk]
		if old != nil && !old.version.Less(v) {
			continue // not newer than what the consumer holds: a replay
		}
		if env == nil || env.Op == "d" {
			state[kk] = &consumed{version: v, deleted: true}
			continue
		}
		row := append([]any(nil), env.After...)
		for i, x := range row {
			if _, unchanged := x.(pipeline.Unchanged); unchanged {
				row[i] = nil
				if old != nil && !old.deleted {
					row[i] = old.row[i]
				}
			}
		}
		state[kk] = &consumed{row: row, version: v}
	}
	out := map[string][]any{}
	for k, c := range state {
		if !c.deleted {
			out[k] = c.row
		}
	}
	return out
}

func TestConformance(t *testing.T) {
	harness.SkipShort(t, "starts a Kafka broker")
	reg, srv := registryFor(t)
	sinktest.Run(t, &conformance{k: harness.KafkaT(t), reg: reg, srv: srv})
}
