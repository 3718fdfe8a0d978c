package kafka

import (
	"context"
	"testing"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/schema"
	"github.com/sluice-cdc/sluice/sinks/sinktest"
	"github.com/sluice-cdc/sluice/transform/join"
)

// Issue #16, scenario 6: the join transform and an exactly-once sink after
// a crash. The join's state is durable before its outputs leave it and may
// run ahead of Kafka; a replayed input then re-emits its output rows at
// versions just above the last emitted for each row — for a row a later
// input of the same transaction touched, above that later input's own
// version. Those raised versions must not lift the high-water mark over
// changes Kafka never got: here a transaction in two chunks, the join has
// processed both when only the first chunk's Kafka transaction committed.
// Replayed, the first chunk's output for order 1 (changed again in chunk
// two) carries a version above chunk two's changes to orders 3 and 4; had
// it raised the mark, those changes (the passed-through inputs and their
// joined rows) would be dropped as already written.
func testTxnJoinReplay(t *testing.T, brokers []string, reg schema.Registry) {
	customers := &pipeline.Table{ID: pipeline.TableID{Database: "shop", Schema: "public", Table: "customers"},
		Columns: []pipeline.Column{{Name: "id", Type: pipeline.TypeInt64, Key: true}, {Name: "name", Type: pipeline.TypeString, Nullable: true}},
		KeyIdx:  []int{0}, Generation: 1}
	orders := &pipeline.Table{ID: pipeline.TableID{Database: "shop", Schema: "public", Table: "orders"},
		Columns: []pipeline.Column{{Name: "id", Type: pipeline.TypeInt64, Key: true},
			{Name: "customer_id", Type: pipeline.TypeInt64, Nullable: true}, {Name: "note", Type: pipeline.TypeString, Nullable: true}},
		KeyIdx: []int{0}, Generation: 1}
	at := func(lsn, i uint64) pipeline.Version { return pipeline.Version{0, lsn, 0, 2 + i} }
	order := func(op pipeline.Op, v pipeline.Version, id int64, note string) pipeline.Record {
		return pipeline.Record{Op: op, Table: orders, Version: v, After: []any{id, int64(1), note}}
	}
	opts := join.Options{Output: "public.order_docs", From: "public.orders", Dir: t.TempDir(),
		With: []join.Lookup{{Table: "public.customers", On: []string{"customer_id"}, As: "customer", Columns: []string{"name"}}}}
	openJoin := func(resumed bool) *join.Join {
		j, err := join.Open(opts)
		if err != nil {
			t.Fatal(err)
		}
		if err := j.Begin(context.Background(), resumed); err != nil {
			t.Fatal(err)
		}
		return j
	}
	process := func(j *join.Join, in []pipeline.Record) []pipeline.Record {
		out, err := j.Process(context.Background(), in)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	write := func(s *Sink, recs []pipeline.Record) {
		if err := s.Write(t.Context(), recs); err != nil {
			t.Fatal(err)
		}
	}

	first := []pipeline.Record{{Op: pipeline.OpInsert, Table: customers, Version: at(100, 0), After: []any{int64(1), "ada"}}}
	for id := int64(1); id <= 4; id++ {
		first = append(first, order(pipeline.OpInsert, at(100, uint64(id)), id, "new"))
	}
	chunk1 := []pipeline.Record{order(pipeline.OpUpdate, at(200, 0), 1, "one"), order(pipeline.OpUpdate, at(200, 1), 2, "two")}
	chunk2 := []pipeline.Record{order(pipeline.OpUpdate, at(200, 2), 3, "three"), order(pipeline.OpUpdate, at(200, 3), 4, "four"),
		order(pipeline.OpUpdate, at(200, 4), 1, "one again")}

	// Run 1: the checkpoint covers the first transaction; the join
	// processes both chunks, only the first reaches Kafka.
	j := openJoin(false)
	s := txnSink(t, brokers, reg, nil)
	write(s, process(j, first))
	out1 := process(j, chunk1)
	out2 := process(j, chunk2)
	write(s, out1)
	_ = j.Close()
	var outTable *pipeline.Table
	for _, r := range out2 {
		if r.Table.ID.Table == "order_docs" {
			outTable = r.Table
		}
	}

	// Run 2 replays both chunks from the checkpoint.
	j = openJoin(true)
	defer j.Close()
	s = txnSink(t, brokers, reg, nil)
	write(s, process(j, chunk1))
	write(s, process(j, chunk2))

	// Every input change of chunk two is in Kafka once.
	inputs := fakeVersions(t, brokers, serverOf(t)+".public.orders", true)
	for _, r := range chunk2 {
		if n := inputs[r.Version.String()]; n != 1 {
			t.Errorf("input %s of order %v: %d records, want 1", r.Version, r.After[0], n)
		}
	}
	// Folded by key and version, the joined rows hold chunk two's notes.
	topic, err := TopicName(DefaultTopicTemplate, serverOf(t), outTable.ID)
	if err != nil {
		t.Fatal(err)
	}
	codec, err := schema.NewCodec(outTable, schema.Options{ConnectorName: "postgresql", ServerName: serverOf(t), Unchanged: true})
	if err != nil {
		t.Fatal(err)
	}
	recs, err := readRecords(t.Context(), brokers, topic, true)
	if err != nil {
		t.Fatal(err)
	}
	type held struct {
		v    pipeline.Version
		note any
	}
	docs := map[string]held{}
	for _, m := range recs {
		if m.Value == nil {
			continue
		}
		vs, _ := header(m, headerVersion)
		v, err := pipeline.ParseVersion(vs)
		if err != nil {
			t.Fatal(err)
		}
		_, kp, err := schema.Unframe(m.Key)
		if err != nil {
			t.Fatal(err)
		}
		key, err := codec.DecodeKey(kp)
		if err != nil {
			t.Fatal(err)
		}
		_, vp, err := schema.Unframe(m.Value)
		if err != nil {
			t.Fatal(err)
		}
		env, err := codec.DecodeEnvelope(vp)
		if err != nil {
			t.Fatal(err)
		}
		k := sinktest.Key(key)
		if h, ok := docs[k]; !ok || h.v.Less(v) {
			docs[k] = held{v, env.After[2]}
		}
	}
	for id, want := range map[int64]string{1: "one again", 2: "two", 3: "three", 4: "four"} {
		if got := docs[sinktest.Key([]any{id})].note; got != want {
			t.Errorf("joined order %d holds note %v, want %q", id, got, want)
		}
	}
}
