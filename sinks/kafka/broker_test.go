package kafka

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/integration/harness"
	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/schema"
	"github.com/sluice-cdc/sluice/sinks/sinktest"
)

// TestKafkaSink runs against one throwaway broker.
func TestKafkaSink(t *testing.T) {
	harness.SkipShort(t, "starts a Kafka broker")
	k := harness.KafkaT(t)
	t.Run("EveryType", func(t *testing.T) {
		reg, srv := registryFor(t)
		testEveryType(t, k, reg, memView{srv})
	})
	t.Run("RowEnvelope", func(t *testing.T) { testRowEnvelope(t, k) })
	t.Run("Evolution", func(t *testing.T) { testEvolution(t, k) })
	t.Run("Unencodable", func(t *testing.T) { testUnencodable(t, k) })
	t.Run("Refusals", func(t *testing.T) { testBrokerRefusals(t, k) })
	t.Run("RowsExactlyOnce", func(t *testing.T) { testRows(t, k.Brokers(), rowsCase{EnvelopeDebezium, true}) })
	t.Run("RouteTopics", func(t *testing.T) { testRouteTopics(t, k) })
}

// everyTypeLog is a change log of everyType: inserts, snapshot reads,
// updates, deletes and a truncate, with increasing versions.
func everyTypeLog() [][]pipeline.Record {
	seq := uint64(0)
	rec := func(op pipeline.Op, before, after []any) pipeline.Record {
		seq++
		return pipeline.Record{Op: op, Table: everyType, Before: before, After: after, Version: pipeline.Version{0, 100, 0, seq},
			EventTime: time.UnixMilli(1_700_000_000_000 + int64(seq)), TxID: 500 + seq}
	}
	var b1, b2 []pipeline.Record
	for id := int64(1); id <= 24; id++ {
		op := pipeline.OpInsert
		if id%3 == 0 {
			op = pipeline.OpRead
		}
		b1 = append(b1, rec(op, nil, everyRow(id, id)))
	}
	for id := int64(1); id <= 24; id += 2 {
		b2 = append(b2, rec(pipeline.OpUpdate, everyRow(id, id), everyRow(id, id+100)))
	}
	for id := int64(2); id <= 24; id += 5 {
		b2 = append(b2, rec(pipeline.OpDelete, everyRow(id, id), nil))
	}
	b2 = append(b2, rec(pipeline.OpUpdate, everyRow(1, 101), everyRow(1, 202)))
	b2 = append(b2, pipeline.Record{Op: pipeline.OpHeartbeat, Version: pipeline.Version{0, 100, 0, 999}})
	b2 = append(b2, rec(pipeline.OpTruncate, nil, nil))
	return [][]pipeline.Record{b1, b2}
}

func sameImage(t *testing.T, what string, want, got []any) {
	t.Helper()
	if len(want) != len(got) {
		t.Errorf("%s: %d values, want %d", what, len(got), len(want))
		return
	}
	for i := range want {
		if !sinktest.Equal(want[i], got[i]) {
			t.Errorf("%s column %s: got %s, want %s", what, everyType.Columns[i].Name, sinktest.Canon(got[i]), sinktest.Canon(want[i]))
		}
	}
}

// Every type round-trips through Kafka and the registry; deletes are
// followed by tombstones; per-key order holds and the partition is the
// Java client's murmur2 partition; every record carries its version; the
// registry (inspected through view) holds exactly the codec's schemas, and
// a replay, also by a restarted sink, registers nothing new.
func testEveryType(t *testing.T, k *harness.Kafka, reg schema.Registry, view registryView) {
	s := openSink(t, k, reg, func(o *Options) {
		o.CreateTopics = TopicOptions{Enabled: true, Partitions: 3, ReplicationFactor: 1, Compact: false}
		o.Version = "1.2.3"
	})
	log := everyTypeLog()
	for _, b := range log {
		if err := s.Write(t.Context(), b); err != nil {
			t.Fatal(err)
		}
	}
	const topic = "srv.public.every_type"
	byVersion := map[string]*pipeline.Record{}
	perKey := map[string][]string{}
	for _, b := range log {
		for i := range b {
			r := &b[i]
			if !r.Op.IsData() {
				continue
			}
			byVersion[r.Version.String()] = r
			if r.Op != pipeline.OpTruncate {
				kk := sinktest.Key(r.Key())
				perKey[kk] = append(perKey[kk], r.Version.String())
			}
		}
	}
	codec, err := schema.NewCodec(everyType, schema.Options{ConnectorName: "postgresql", ServerName: "srv", Unchanged: true})
	if err != nil {
		t.Fatal(err)
	}
	keyText, _ := schema.SchemaText(codec.KeySchema())
	envText, _ := schema.SchemaText(codec.EnvelopeSchema())
	texts := map[int]string{}
	lookup := func(id int) string {
		if s, ok := texts[id]; ok {
			return s
		}
		texts[id] = view.schema(t, id)
		return texts[id]
	}

	got := readTopic(t, k, topic)
	seen := map[string][]string{}
	events, tombstones, truncates := 0, 0, 0
	for i, m := range got {
		ver, ok := header(m, headerVersion)
		if !ok {
			t.Fatalf("record %d has no %s header", i, headerVersion)
		}
		in := byVersion[ver]
		if in == nil {
			t.Fatalf("record with unknown version %s", ver)
		}
		if op, _ := header(m, headerOp); op != in.Op.String() {
			t.Errorf("op header %q, want %s", op, in.Op)
		}
		if in.Op == pipeline.OpTruncate {
			truncates++
			if m.Key != nil {
				t.Errorf("truncate with a key")
			}
		} else {
			id, payload, err := schema.Unframe(m.Key)
			if err != nil {
				t.Fatal(err)
			}
			if !view.same(lookup(id), keyText) {
				t.Fatalf("key schema id %d is not the key schema: %s", id, lookup(id))
			}
			key, err := codec.DecodeKey(payload)
			if err != nil {
				t.Fatal(err)
			}
			kk := sinktest.Key(key)
			if kk != sinktest.Key(in.Key()) {
				t.Errorf("key %s, want %s", kk, sinktest.Key(in.Key()))
			}
			if want := javaPartition(m.Key, 3); int(m.Partition) != want {
				t.Errorf("key %s in partition %d, murmur2 says %d", kk, m.Partition, want)
			}
			if m.Value == nil {
				tombstones++
				if in.Op != pipeline.OpDelete || i == 0 || got[i-1].Partition != m.Partition || string(got[i-1].Key) != string(m.Key) {
					t.Errorf("tombstone of %s does not directly follow its delete event", kk)
				} else if v, _ := header(got[i-1], headerVersion); v != ver {
					t.Errorf("tombstone version %s follows %s", ver, v)
				}
				continue
			}
			seen[kk] = append(seen[kk], ver)
		}
		events++
		id, payload, err := schema.Unframe(m.Value)
		if err != nil {
			t.Fatal(err)
		}
		text := lookup(id)
		if !view.same(text, envText) {
			t.Fatalf("value schema id %d is not the envelope schema: %s", id, text)
		}
		// The registry's text alone decodes the payload.
		parsed, err := schema.ParseSchemaText(text)
		if err != nil {
			t.Fatal(err)
		}
		var generic map[string]any
		if err := codec.API().Unmarshal(parsed, payload, &generic); err != nil || generic["op"] != in.Op.String() {
			t.Fatalf("generic decode with the registry's schema: %v %v", generic["op"], err)
		}
		env, err := codec.DecodeEnvelope(payload)
		if err != nil {
			t.Fatal(err)
		}
		what := fmt.Sprintf("%s %s", in.Op, ver)
		if env.Op != in.Op.String() {
			t.Errorf("%s: op %q", what, env.Op)
		}
		sameImage(t, what+" before", in.Before, env.Before)
		sameImage(t, what+" after", in.After, env.After)
		src := env.Source
		wantSnap := "false"
		if in.Op == pipeline.OpRead {
			wantSnap = "true"
		}
		if src.Connector != "postgresql" || src.Name != "srv" || src.DB != "shop" || src.Schema != "public" ||
			src.Table != "every_type" || src.Version != "1.2.3" || src.Snapshot != wantSnap ||
			src.TsMs != in.EventTime.UnixMilli() || src.TxID == nil || uint64(*src.TxID) != in.TxID {
			t.Errorf("%s: source %+v", what, src)
		}
	}
	t.Logf("%d records: %d events, %d tombstones, %d truncates; %d keys", len(got), events, tombstones, truncates, len(seen))
	if want := len(byVersion); events != want {
		t.Errorf("%d events, want %d", events, want)
	}
	if tombstones != 5 || truncates != 1 {
		t.Errorf("%d tombstones (want 5), %d truncates (want 1)", tombstones, truncates)
	}
	for kk, want := range perKey {
		if strings.Join(seen[kk], ",") != strings.Join(want, ",") {
			t.Errorf("key %s: versions %v, want %v", kk, seen[kk], want)
		}
	}
	if subj := view.subjects(t, topic); strings.Join(subj, ",") != topic+"-key,"+topic+"-value" {
		t.Errorf("subjects %v", subj)
	}
	for _, subj := range []string{topic + "-key", topic + "-value"} {
		if ids := view.versionIDs(t, subj); len(ids) != 1 {
			t.Errorf("%s: versions %v, want 1", subj, ids)
		}
		if lvl := view.level(t, subj); lvl != schema.CompatBackward {
			t.Errorf("%s: level %q", subj, lvl)
		}
	}
	// A replay of the first batch is accepted again (at-least-once), by a
	// new sink too (a restarted process: nothing cached).
	if err := s.Write(t.Context(), log[0]); err != nil {
		t.Fatal(err)
	}
	s2 := openSink(t, k, view.client(), func(o *Options) {
		o.CreateTopics = TopicOptions{Enabled: true, Partitions: 3, ReplicationFactor: 1, Compact: false}
	})
	if err := s2.Write(t.Context(), log[0]); err != nil {
		t.Fatal(err)
	}
	if ids := view.versionIDs(t, topic+"-value"); len(ids) != 1 {
		t.Errorf("value versions %v after the replays, want 1", ids)
	}
}

// The row envelope: flattened values with metadata, a tombstone after each
// delete, record-name subjects, and truncates dead-lettered (no row form).
func testRowEnvelope(t *testing.T, k *harness.Kafka) {
	reg, srv := registryFor(t)
	tbl := &pipeline.Table{ID: pipeline.TableID{Database: "shop", Schema: "public", Table: "rows"}, KeyIdx: []int{0}, Generation: 1,
		Columns: []pipeline.Column{{Name: "id", Type: pipeline.TypeInt64, Key: true}, {Name: "n", Type: pipeline.TypeInt64}}}
	s := openSink(t, k, reg, func(o *Options) {
		o.Envelope, o.SubjectStrategy, o.Unchanged = EnvelopeRow, StrategyRecord, false
	})
	v := func(n uint64) pipeline.Version { return pipeline.Version{0, 7, 0, n} }
	batch := []pipeline.Record{
		{Op: pipeline.OpInsert, Table: tbl, After: []any{int64(1), int64(10)}, Version: v(1)},
		{Op: pipeline.OpUpdate, Table: tbl, Before: []any{int64(1), int64(10)}, After: []any{int64(1), int64(11)}, Version: v(2)},
		{Op: pipeline.OpDelete, Table: tbl, Before: []any{int64(1), nil}, Version: v(3)},
		{Op: pipeline.OpTruncate, Table: tbl, Version: v(4)},
	}
	err := s.Write(t.Context(), batch)
	var be *pipeline.BatchError
	if !errors.As(err, &be) || len(be.Failed) != 1 || be.Failed[0].Index != 3 || !be.Failed[0].Permanent {
		t.Fatalf("write: %v", err)
	}
	codec, err := schema.NewCodec(tbl, schema.Options{ConnectorName: "postgresql", ServerName: "srv"})
	if err != nil {
		t.Fatal(err)
	}
	got := readTopic(t, k, "srv.public.rows")
	if len(got) != 4 || got[3].Value != nil || string(got[3].Key) != string(got[2].Key) {
		t.Fatalf("%d records; want 3 events and a tombstone", len(got))
	}
	for i, m := range got[:3] {
		_, payload, err := schema.Unframe(m.Value)
		if err != nil {
			t.Fatal(err)
		}
		row, err := codec.DecodeValue(payload)
		if err != nil {
			t.Fatal(err)
		}
		want := batch[i].After
		if batch[i].Op == pipeline.OpDelete {
			want = []any{int64(1), int64(0)} // key-only old tuple: zero for NOT NULL
		}
		if row.Op != batch[i].Op.String() || row.Version != batch[i].Version || row.Deleted != (i == 2) || !sinktest.Equal(row.Values, want) {
			t.Errorf("row %d: %+v", i, row)
		}
	}
	if subj := strings.Join(srv.Mem.Subjects(), ","); subj != "srv.shop.public.rows.Key,srv.shop.public.rows.Value" {
		t.Errorf("record-name subjects: %s", subj)
	}
}

// Schema evolution: an added nullable column registers version 2 and old
// records still decode with their id; an incompatible shape stops the
// pipeline under policy fail with nothing produced, and under
// new_subject_version is registered under NONE, after which the level is
// restored.
func testEvolution(t *testing.T, k *harness.Kafka) {
	reg, srv := registryFor(t)
	const topic = "srv.public.evolving"
	id := pipeline.TableID{Database: "shop", Schema: "public", Table: "evolving"}
	v1 := &pipeline.Table{ID: id, KeyIdx: []int{0}, Generation: 1, Columns: []pipeline.Column{
		{Name: "id", Type: pipeline.TypeInt64, Key: true}, {Name: "n", Type: pipeline.TypeInt64}}}
	v2 := &pipeline.Table{ID: id, KeyIdx: []int{0}, Generation: 2, Columns: append(append([]pipeline.Column(nil), v1.Columns...),
		pipeline.Column{Name: "note", Type: pipeline.TypeString, Nullable: true})}
	v3 := &pipeline.Table{ID: id, KeyIdx: []int{0}, Generation: 3, Columns: []pipeline.Column{
		{Name: "id", Type: pipeline.TypeInt64, Key: true}, {Name: "n", Type: pipeline.TypeString},
		{Name: "note", Type: pipeline.TypeString, Nullable: true}}}
	ver := uint64(0)
	ins := func(t *pipeline.Table, vals ...any) pipeline.Record {
		ver++
		return pipeline.Record{Op: pipeline.OpInsert, Table: t, After: vals, Version: pipeline.Version{0, 9, 0, ver}}
	}
	s := openSink(t, k, reg, nil)
	if err := s.Write(t.Context(), []pipeline.Record{ins(v1, int64(1), int64(10)), ins(v1, int64(2), int64(20))}); err != nil {
		t.Fatal(err)
	}
	if err := s.Write(t.Context(), []pipeline.Record{ins(v1, int64(3), int64(30)), ins(v2, int64(4), int64(40), "hi")}); err != nil {
		t.Fatal(err)
	}
	versions := srv.Mem.Versions(topic + "-value")
	if len(versions) != 2 {
		t.Fatalf("value versions %v, want 2", versions)
	}
	got := readTopic(t, k, topic)
	if len(got) != 4 {
		t.Fatalf("%d records", len(got))
	}
	codecs := map[int]*schema.Codec{}
	for i, tbl := range []*pipeline.Table{v1, v2} {
		c, err := schema.NewCodec(tbl, schema.Options{ConnectorName: "postgresql", ServerName: "srv", Unchanged: true})
		if err != nil {
			t.Fatal(err)
		}
		text, _ := schema.SchemaText(c.EnvelopeSchema())
		if reg, _ := srv.Mem.Schema(versions[i]); reg != text {
			t.Fatalf("version %d is not shape %d", i+1, i+1)
		}
		codecs[versions[i]] = c
	}
	perID := map[int]int{}
	for _, m := range got {
		sid, payload, err := schema.Unframe(m.Value)
		if err != nil {
			t.Fatal(err)
		}
		env, err := codecs[sid].DecodeEnvelope(payload)
		if err != nil {
			t.Fatalf("decode with id %d: %v", sid, err)
		}
		perID[sid]++
		if (sid == versions[1]) != (len(env.After) == 3) {
			t.Errorf("id %d decoded %v", sid, env.After)
		}
	}
	if perID[versions[0]] != 3 || perID[versions[1]] != 1 {
		t.Errorf("records per schema id %v", perID)
	}

	// Incompatible: n changes from bigint to text.
	before := endOffsets(t, k, topic)
	err := s.Write(t.Context(), []pipeline.Record{ins(v2, int64(5), int64(50), nil), ins(v3, int64(6), "sixty", nil)})
	if err == nil || !pipeline.IsFatal(err) {
		t.Fatalf("incompatible shape under fail: %v", err)
	}
	for _, want := range []string{"column n: type int64 → string", topic + "-value", "BACKWARD"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	if after := endOffsets(t, k, topic); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("records produced despite the refused shape: %v → %v", before, after)
	}
	if n := len(srv.Mem.Versions(topic + "-value")); n != 2 {
		t.Errorf("%d value versions after the refusal", n)
	}

	s2 := openSink(t, k, reg, func(o *Options) { o.IncompatiblePolicy = PolicyNewSubjectVersion })
	if err := s2.Write(t.Context(), []pipeline.Record{ins(v3, int64(6), "sixty", nil)}); err != nil {
		t.Fatal(err)
	}
	if n := len(srv.Mem.Versions(topic + "-value")); n != 3 {
		t.Errorf("%d value versions, want 3", n)
	}
	if lvl := srv.Level(topic + "-value"); lvl != schema.CompatBackward {
		t.Errorf("level after the forced version: %q", lvl)
	}
	if n := len(readTopic(t, k, topic)); n != 5 {
		t.Errorf("%d records after the forced version, want 5", n)
	}
}

// Records that cannot be encoded go to the DLQ topic with the error and
// their JSON, or come back as permanent failures; the rest of the batch is
// produced. A compacted topic dead-letters keyless truncates. (A value
// Avro cannot hold, such as a decimal NaN, lands instead: null in the
// payload, its text in a header; the type matrix covers that.)
func testUnencodable(t *testing.T, k *harness.Kafka) {
	reg, _ := registryFor(t)
	tbl := &pipeline.Table{ID: pipeline.TableID{Database: "shop", Schema: "public", Table: "prices"}, KeyIdx: []int{0}, Generation: 1,
		Columns: []pipeline.Column{{Name: "id", Type: pipeline.TypeInt64, Key: true}, {Name: "p", Type: pipeline.TypeDecimal, Scale: -1, Nullable: true}}}
	batch := []pipeline.Record{
		{Op: pipeline.OpInsert, Table: tbl, After: []any{int64(1), decimal("1.5")}, Version: pipeline.Version{0, 1, 0, 1}},
		{Op: pipeline.OpInsert, Table: tbl, After: []any{int64(2), "not a decimal"}, Version: pipeline.Version{0, 1, 0, 2}},
		{Op: pipeline.OpTruncate, Table: tbl, Version: pipeline.Version{0, 1, 0, 3}},
		{Op: pipeline.OpInsert, Table: tbl, After: []any{int64(3), decimal("-2")}, Version: pipeline.Version{0, 1, 0, 4}},
	}
	s := openSink(t, k, reg, nil) // compacted topics, no DLQ topic
	err := s.Write(t.Context(), batch)
	var be *pipeline.BatchError
	if !errors.As(err, &be) || len(be.Failed) != 2 || be.Failed[0].Index != 1 || be.Failed[1].Index != 2 ||
		!be.Failed[0].Permanent || !be.Failed[1].Permanent ||
		!strings.Contains(be.Failed[0].Err.Error(), `column "p"`) || !strings.Contains(be.Failed[1].Err.Error(), "compacted") {
		t.Fatalf("write: %v", err)
	}
	if n := len(readTopic(t, k, "srv.public.prices")); n != 2 {
		t.Errorf("%d records produced, want 2", n)
	}

	const dlq = "srv.dlq"
	s2 := openSink(t, k, reg, func(o *Options) { o.DLQTopic = dlq; o.ServerName = "other" })
	if err := s2.Write(t.Context(), batch); err != nil {
		t.Fatalf("with a DLQ topic: %v", err)
	}
	if n := len(readTopic(t, k, "other.public.prices")); n != 2 {
		t.Errorf("%d records produced, want 2", n)
	}
	letters := readTopic(t, k, dlq)
	if len(letters) != 2 {
		t.Fatalf("%d dead letters, want 2", len(letters))
	}
	for i, m := range letters {
		in := &batch[i+1]
		msg, _ := header(m, headerError)
		ver, _ := header(m, headerVersion)
		table, _ := header(m, headerTable)
		if ver != in.Version.String() || table != "public.prices" || msg == "" || string(m.Value) != string(pipeline.MarshalRecord(in)) {
			t.Errorf("dead letter %d: error %q version %s table %s value %s", i, msg, ver, table, m.Value)
		}
	}
	if msg, _ := header(letters[0], headerError); !strings.Contains(msg, "wrong Go type") {
		t.Errorf("dead letter error %q", msg)
	}
}

// Write returns nil only after the broker acknowledged: with the broker
// killed, a write fails and never reports success.
func TestKafkaSinkBrokerDown(t *testing.T) {
	harness.SkipShort(t, "starts a Kafka broker")
	k := harness.KafkaT(t)
	reg, _ := registryFor(t)
	s := openSink(t, k, reg, func(o *Options) { o.Producer.DeliveryTimeout = 4 * time.Second })
	tbl := &pipeline.Table{ID: pipeline.TableID{Schema: "public", Table: "down"}, KeyIdx: []int{0}, Generation: 1,
		Columns: []pipeline.Column{{Name: "id", Type: pipeline.TypeInt64, Key: true}}}
	batch := func(from int64) []pipeline.Record {
		var out []pipeline.Record
		for i := from; i < from+500; i++ {
			out = append(out, pipeline.Record{Op: pipeline.OpInsert, Table: tbl, After: []any{i}, Version: pipeline.Version{0, 0, 0, uint64(i)}})
		}
		return out
	}
	if err := s.Write(t.Context(), batch(0)); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		// Kill the broker while this write is in flight (or before it).
		time.Sleep(20 * time.Millisecond)
		k.Kill()
		done <- nil
	}()
	var err error
	for i := int64(1); i <= 4 && err == nil; i++ {
		err = s.Write(t.Context(), batch(i*1000))
	}
	<-done
	if err == nil {
		err = s.Write(t.Context(), batch(9000))
	}
	if err == nil {
		t.Fatal("write reported success with the broker down")
	}
	if pipeline.IsFatal(err) {
		t.Errorf("a broker outage is fatal: %v", err)
	}
	t.Logf("write with the broker down: %v", err)
}

// A route that names a topic: a record goes to its Dest's topic, a row
// that moves is deleted (event and tombstone) in the topic it leaves, and
// a delete reaches every topic of the route. (The exactly-once sink
// encodes through the same prepare.)
func testRouteTopics(t *testing.T, k *harness.Kafka) {
	reg, _ := registryFor(t)
	name := "routed"
	tbl := &pipeline.Table{ID: pipeline.TableID{Database: "shop", Schema: "public", Table: name}, KeyIdx: []int{0}, Generation: 1,
		Columns: []pipeline.Column{{Name: "id", Type: pipeline.TypeInt64, Key: true}, {Name: "vip", Type: pipeline.TypeBool}}}
	const vip = "{prefix}.vip.{table}"
	s := txnSink(t, k.Brokers(), reg, func(o *Options) { o.ExactlyOnce, o.CreateTopics.Partitions, o.RouteTopics = false, 1, []string{vip} })
	prefix := serverOf(t)
	toVIP := &pipeline.Dest{To: []string{"kafka"}, Topic: vip}
	fromVIP := &pipeline.Dest{To: []string{"kafka"}, AwayTopics: []string{vip}}
	v := func(n uint64) pipeline.Version { return pipeline.Version{0, 7, 0, n} }
	batch := []pipeline.Record{
		{Op: pipeline.OpInsert, Table: tbl, After: []any{int64(1), true}, Version: v(1), Dest: toVIP},
		{Op: pipeline.OpInsert, Table: tbl, After: []any{int64(2), false}, Version: v(2)},
		{Op: pipeline.OpUpdate, Table: tbl, After: []any{int64(1), false}, Version: v(3), Dest: fromVIP},
		{Op: pipeline.OpDelete, Table: tbl, Before: []any{int64(2), false}, Version: v(4), Dest: fromVIP},
	}
	if err := s.Write(t.Context(), batch); err != nil {
		t.Fatal(err)
	}
	ops := func(topic string) string {
		var out []string
		for _, m := range readTopic(t, k, topic) {
			op := "tombstone"
			for _, h := range m.Headers {
				if h.Key == headerOp && m.Value != nil {
					op = string(h.Value)
				}
			}
			_, key, _ := schema.Unframe(m.Key)
			out = append(out, fmt.Sprintf("%s:%x", op, key))
		}
		return strings.Join(out, " ")
	}
	// Keys are Avro longs (zig-zag): 1 is 02, 2 is 04.
	if got := ops(prefix + ".vip." + name); got != "c:02 d:02 tombstone:02 d:04 tombstone:04" {
		t.Errorf("vip topic: %s", got)
	}
	if got := ops(prefix + ".public." + name); got != "c:04 u:02 d:04 tombstone:04" {
		t.Errorf("own topic: %s", got)
	}
	// Verify reads both topics: the moved row is live, the deleted one
	// gone, whichever topic is read first.
	rows, err := s.Rows(t.Context(), tbl)
	if err != nil || len(rows) != 1 || !sinktest.Equal(rows[0], []any{int64(1), false}) {
		t.Fatalf("rows %v, %v", rows, err)
	}
	batch = []pipeline.Record{{Op: pipeline.OpUpdate, Table: tbl, After: []any{int64(1), true}, Version: v(5),
		Dest: &pipeline.Dest{To: []string{"kafka"}, Topic: vip, AwayTopics: []string{""}}}}
	if err := s.Write(t.Context(), batch); err != nil {
		t.Fatal(err)
	}
	rows, err = s.Rows(t.Context(), tbl)
	if err != nil || len(rows) != 1 || !sinktest.Equal(rows[0], []any{int64(1), true}) {
		t.Fatalf("rows after the move back %v, %v", rows, err)
	}
}
