package kafka

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/sinks/sinktest"
	"github.com/sluice-cdc/sluice/verify"
)

// rowsCase is one run of testRows: the sink's envelope and delivery mode.
type rowsCase struct {
	envelope    string
	exactlyOnce bool
}

// testRows writes a change log of everyType (every value type) through a
// real sink on brokers — inserts, snapshot rows, updates (one leaving a
// column Unchanged), deletes with tombstones, a re-insert, a replayed
// duplicate, an older version after a newer one and an equal version with
// other values — plus a transaction
// aborted by another producer that would delete a key, then a truncate
// barrier with changes after it (Debezium envelope only) and a change in
// a later shape of the table; after each step Rows must equal the live
// rows of sinktest's model, compared through verify.Compare.
func testRows(t *testing.T, brokers []string, c rowsCase) {
	reg, _ := registryFor(t)
	s := txnSink(t, brokers, reg, func(o *Options) {
		o.ExactlyOnce, o.Envelope, o.Pipeline = c.exactlyOnce, c.envelope, serverOf(t)
		o.CreateTopics.Partitions = 3
	})
	seq := uint64(0)
	rec := func(op pipeline.Op, table *pipeline.Table, before, after []any) pipeline.Record {
		seq++
		return pipeline.Record{Op: op, Table: table, Before: before, After: after, Version: pipeline.Version{0, 100, 0, seq}}
	}
	m := sinktest.NewModel()
	write := func(b []pipeline.Record) {
		t.Helper()
		if err := s.Write(t.Context(), b); err != nil {
			t.Fatal(err)
		}
		m.Apply(b)
	}

	var inserts []pipeline.Record
	for id := int64(1); id <= 10; id++ {
		op := pipeline.OpInsert
		if id > 8 {
			op = pipeline.OpRead
		}
		inserts = append(inserts, rec(op, everyType, nil, everyRow(id, id)))
	}
	write(inserts)
	kept := everyRow(6, 106)
	kept[1] = pipeline.UnchangedValue // c_text: unchanged TOAST, keeps "txt-6"
	changes := []pipeline.Record{
		rec(pipeline.OpUpdate, everyType, everyRow(1, 1), everyRow(1, 101)),
		rec(pipeline.OpUpdate, everyType, everyRow(3, 3), everyRow(3, 103)),
		rec(pipeline.OpDelete, everyType, everyRow(2, 2), nil),
		rec(pipeline.OpDelete, everyType, everyRow(4, 4), nil),
		rec(pipeline.OpUpdate, everyType, everyRow(6, 6), kept),
		rec(pipeline.OpInsert, everyType, nil, everyRow(4, 204)),
	}
	write(changes)
	// A duplicate of a delete, an older version of key 1 after its update
	// and another change under that update's version: none counts (an
	// exactly-once sink drops them as already committed).
	same := changes[0]
	same.After = everyRow(1, 999)
	write([]pipeline.Record{changes[2], inserts[0], same})
	checkRows(t, s, everyType, m.Live(everyType), "after the changes")

	abortTombstone(t, brokers, serverOf(t)+".public.every_type")
	checkRows(t, s, everyType, m.Live(everyType), "after an aborted transaction")

	if c.envelope == EnvelopeDebezium {
		write([]pipeline.Record{
			rec(pipeline.OpTruncate, everyType, nil, nil),
			rec(pipeline.OpInsert, everyType, nil, everyRow(20, 20)),
			rec(pipeline.OpUpdate, everyType, everyRow(5, 5), everyRow(5, 105)),
		})
		checkRows(t, s, everyType, m.Live(everyType), "after a truncate")
	}

	// A column added: older events read as nil in the new shape.
	v2 := *everyType
	v2.Columns = append(append([]pipeline.Column(nil), everyType.Columns...), pipeline.Column{Name: "extra", Type: pipeline.TypeString, Nullable: true})
	v2.Generation = 2
	want := map[string][]any{}
	for k, row := range m.Live(everyType) {
		want[k] = append(append([]any(nil), row...), nil)
	}
	row := append(everyRow(7, 307), "added")
	if err := s.Write(t.Context(), []pipeline.Record{rec(pipeline.OpUpdate, &v2, nil, row)}); err != nil {
		t.Fatal(err)
	}
	want[verify.RowKey(&v2, row)] = row
	checkRows(t, s, &v2, want, "in a later shape")

	// A table never written has no topic, hence no rows, and reading it
	// creates nothing.
	never := &pipeline.Table{ID: pipeline.TableID{Database: "shop", Schema: "public", Table: "never"}, KeyIdx: []int{0},
		Columns: []pipeline.Column{{Name: "id", Type: pipeline.TypeInt64, Key: true}}}
	if rows, err := s.Rows(t.Context(), never); err != nil || len(rows) != 0 {
		t.Fatalf("rows of a missing topic: %v, %v", rows, err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	md, err := kadm.NewClient(cl).Metadata(t.Context(), serverOf(t)+".public.never")
	if err != nil {
		t.Fatal(err)
	}
	if td, ok := md.Topics[serverOf(t)+".public.never"]; ok && !errors.Is(td.Err, kerr.UnknownTopicOrPartition) {
		t.Errorf("Rows created the missing topic: %+v", td)
	}
}

// checkRows compares Rows with want, both keyed by verify.RowKey.
func checkRows(t *testing.T, s *Sink, table *pipeline.Table, want map[string][]any, when string) {
	t.Helper()
	rows, err := s.Rows(t.Context(), table)
	if err != nil {
		t.Fatalf("%s: %v", when, err)
	}
	got := map[string][]any{}
	for _, row := range rows {
		got[verify.RowKey(table, row)] = row
	}
	diffs := verify.Compare(table, want, got)
	keys := make([]string, 0, len(diffs))
	for k := range diffs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		d := diffs[k]
		var cols []string
		for _, c := range d.Columns {
			cols = append(cols, fmt.Sprintf("%s: want %s, got %s", c.Column, c.Source, c.Sink))
		}
		t.Errorf("%s: key %s %s %s", when, k, d.Kind, strings.Join(cols, "; "))
	}
	if len(rows) != len(want) || len(diffs) > 0 {
		t.Fatalf("%s: %d rows, want %d", when, len(rows), len(want))
	}
}

// abortTombstone produces, as another transactional producer, a tombstone
// with the newest version for the first keyed record of topic, and aborts
// the transaction: a read_committed reader never sees it.
func abortTombstone(t *testing.T, brokers []string, topic string) {
	t.Helper()
	recs, err := readRecords(t.Context(), brokers, topic, true)
	if err != nil {
		t.Fatal(err)
	}
	var key []byte
	for _, r := range recs {
		if r.Key != nil {
			key = r.Key
			break
		}
	}
	if key == nil {
		t.Fatalf("topic %s has no keyed record", topic)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.TransactionalID("abort-"+topic))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	v := pipeline.Version{1 << 62}
	tomb := &kgo.Record{Topic: topic, Key: key, Headers: []kgo.RecordHeader{
		{Key: headerVersion, Value: v.AppendHex(nil)}, {Key: headerOp, Value: opBytes(pipeline.OpDelete)}}}
	if err := cl.ProduceSync(t.Context(), tomb).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := cl.EndTransaction(context.WithoutCancel(t.Context()), kgo.TryAbort); err != nil {
		t.Fatal(err)
	}
}

// Rows on kfake: the Debezium and row envelopes, plain and exactly-once.
func TestKfakeRows(t *testing.T) {
	for _, c := range []rowsCase{{EnvelopeDebezium, false}, {EnvelopeRow, false}, {EnvelopeDebezium, true}} {
		t.Run(fmt.Sprintf("%s/exactly_once=%v", c.envelope, c.exactlyOnce), func(t *testing.T) {
			testRows(t, fakeCluster(t).ListenAddrs(), c)
		})
	}
}

// Tables sharing one topic (record name strategy): Rows folds only the
// table's own events, tombstones included.
func TestKfakeRowsSharedTopic(t *testing.T) {
	reg, _ := registryFor(t)
	s := txnSink(t, fakeCluster(t).ListenAddrs(), reg, func(o *Options) {
		o.ExactlyOnce, o.TopicTemplate, o.SubjectStrategy = false, "{prefix}.{schema}", StrategyRecord
	})
	other := *fakeTable
	other.ID.Table = "others"
	batch := fakeBatch(0, 5, 5)
	for i := int64(0); i < 3; i++ {
		batch = append(batch, pipeline.Record{Op: pipeline.OpInsert, Table: &other, After: []any{i, "other"},
			Version: pipeline.Version{0, 1, 0, uint64(i)}})
	}
	batch = append(batch, pipeline.Record{Op: pipeline.OpDelete, Table: &other, Before: []any{int64(1), "other"},
		Version: pipeline.Version{0, 1, 0, 9}})
	if err := s.Write(t.Context(), batch); err != nil {
		t.Fatal(err)
	}
	items, others := sinktest.NewModel(), sinktest.NewModel()
	items.Apply(batch[:5])
	others.Apply(batch[5:])
	checkRows(t, s, fakeTable, items.Live(fakeTable), "items")
	checkRows(t, s, &other, others.Live(&other), "others")
}
