package schema

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hamba/avro/v2"
	"github.com/sluice-cdc/sluice/pipeline"
)

func fieldNames(s avro.Schema) []string {
	if r, ok := s.(*avro.RefSchema); ok {
		s = r.Schema()
	}
	var out []string
	for _, f := range s.(*avro.RecordSchema).Fields() {
		out = append(out, f.Name())
	}
	return out
}

func unionRecord(s avro.Schema) avro.Schema {
	return s.(*avro.UnionSchema).Types()[1]
}

func TestKeySchemaHasKeyColumnsInKeyOrder(t *testing.T) {
	tbl := &pipeline.Table{ID: pipeline.TableID{Database: "db", Schema: "sales", Table: "lines"}, KeyIdx: []int{2, 0},
		Columns: []pipeline.Column{
			{Name: "order_id", Type: pipeline.TypeInt64, Key: true},
			{Name: "qty", Type: pipeline.TypeInt32},
			{Name: "line-no", Type: pipeline.TypeInt16, Key: true},
		}}
	k, err := KeySchema(tbl, Options{ServerName: "srv"})
	if err != nil {
		t.Fatal(err)
	}
	if got := k.(avro.NamedSchema).FullName(); got != "srv.db.sales.lines.Key" {
		t.Errorf("name %s", got)
	}
	if got := fieldNames(k); !reflect.DeepEqual(got, []string{"line_no", "order_id"}) {
		t.Errorf("key fields %v", got)
	}
	f := k.(*avro.RecordSchema).Fields()[0]
	if f.Prop(PropKey) != true || f.Prop(PropColumn) != "line-no" || f.Prop(PropNullable) != false {
		t.Errorf("props %v", f.Props())
	}
	c, err := NewCodec(tbl, Options{ServerName: "srv"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.EncodeKey(&pipeline.Record{Op: pipeline.OpInsert, Table: tbl, After: []any{int64(7), int64(3), int64(2)}})
	if err != nil {
		t.Fatal(err)
	}
	key, err := c.DecodeKey(b)
	if err != nil || !reflect.DeepEqual(key, []any{int64(2), int64(7)}) {
		t.Errorf("key %v %v", key, err)
	}
	tbl.KeyIdx = nil
	if _, err := KeySchema(tbl, Options{}); !errors.Is(err, ErrNoKey) {
		t.Errorf("keyless: %v", err)
	}
}

func TestValueSchemaLayout(t *testing.T) {
	tbl := &pipeline.Table{ID: pipeline.TableID{Schema: "public", Table: "t"}, KeyIdx: []int{0}, Columns: []pipeline.Column{
		{Name: "id", Type: pipeline.TypeInt32, Key: true},
		{Name: "name", Type: pipeline.TypeText, Nullable: true, Comment: "display name", SourceType: "text"},
	}}
	v, err := ValueSchema(tbl, Options{Unchanged: true})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"id", "name", FieldUnchanged, FieldOp, FieldVersion, FieldDeleted, FieldSourceTsMs}
	if got := fieldNames(v); !reflect.DeepEqual(got, want) {
		t.Errorf("fields %v", got)
	}
	if got := v.(avro.NamedSchema).FullName(); got != "public.t.Value" {
		t.Errorf("name %s", got)
	}
	name := v.(*avro.RecordSchema).Fields()[1]
	if name.Doc() != "display name" || name.Prop(PropComment) != "display name" || name.Prop(PropSourceType) != "text" ||
		name.Prop(PropKey) != nil || !name.HasDefault() || name.Default() != nil {
		t.Errorf("name field %s", name)
	}
	// Columns colliding after sanitising, or with a metadata field, fail.
	for _, cols := range [][]pipeline.Column{
		{{Name: "a-b", Type: pipeline.TypeText}, {Name: "a_b", Type: pipeline.TypeText}},
		{{Name: "__op", Type: pipeline.TypeText}},
	} {
		bad := &pipeline.Table{ID: pipeline.TableID{Table: "x"}, Columns: cols}
		if _, err := ValueSchema(bad, Options{}); err == nil {
			t.Errorf("%v: no error", cols)
		}
	}
}

func TestEnvelopeFieldNamesMatchDebezium(t *testing.T) {
	tbl := &pipeline.Table{ID: pipeline.TableID{Database: "inventory", Schema: "public", Table: "customers"}, KeyIdx: []int{0},
		Columns: []pipeline.Column{{Name: "id", Type: pipeline.TypeInt32, Key: true}, {Name: "email", Type: pipeline.TypeText}}}
	opts := Options{ConnectorName: "postgresql", ServerName: "dbserver1"}
	e, err := EnvelopeSchema(tbl, opts)
	if err != nil {
		t.Fatal(err)
	}
	rec := e.(*avro.RecordSchema)
	if rec.FullName() != "dbserver1.inventory.public.customers.Envelope" || rec.Prop("connect.name") != rec.FullName() {
		t.Errorf("envelope name %s %v", rec.FullName(), rec.Props())
	}
	if got := fieldNames(e); !reflect.DeepEqual(got, []string{"before", "after", "source", "op", "ts_ms", "transaction"}) {
		t.Errorf("envelope fields %v", got)
	}
	f := rec.Fields()
	if got := fieldNames(unionRecord(f[0].Type())); !reflect.DeepEqual(got, []string{"id", "email"}) {
		t.Errorf("before fields %v", got)
	}
	if _, ok := unionRecord(f[1].Type()).(*avro.RefSchema); !ok {
		t.Error("after should reference the Value record defined in before")
	}
	src := f[2].Type().(*avro.RecordSchema)
	if src.FullName() != "io.debezium.connector.postgresql.Source" {
		t.Errorf("source name %s", src.FullName())
	}
	wantSrc := []string{"version", "connector", "name", "ts_ms", "snapshot", "db", "sequence", "schema", "table", "txId", "lsn", "xmin"}
	if got := fieldNames(src); !reflect.DeepEqual(got, wantSrc) {
		t.Errorf("source fields %v", got)
	}
	if got := fieldNames(unionRecord(f[5].Type())); !reflect.DeepEqual(got, []string{"id", "total_order", "data_collection_order"}) {
		t.Errorf("transaction fields %v", got)
	}

	c, err := NewCodec(tbl, opts)
	if err != nil {
		t.Fatal(err)
	}
	commit := time.Date(2024, 1, 2, 3, 4, 5, 6e6, time.UTC)
	lsn := int64(0x16B3748)
	r := &pipeline.Record{Op: pipeline.OpUpdate, Table: tbl, TxID: 555, EventTime: commit,
		Before: []any{int64(1), "a@x"}, After: []any{int64(1), "b@x"}}
	b, err := c.EncodeEnvelope(r, SourceInfo{Version: "0.1.0", LSN: &lsn,
		Transaction: &Transaction{ID: "555:23803720", TotalOrder: 2, DataCollectionOrder: 1},
		ProcessedAt: commit.Add(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	env, err := c.DecodeEnvelope(b)
	if err != nil {
		t.Fatal(err)
	}
	want := SourceInfo{Version: "0.1.0", Connector: "postgresql", Name: "dbserver1", TsMs: commit.UnixMilli(), Snapshot: "false",
		DB: "inventory", Schema: "public", Table: "customers", TxID: ptr(int64(555)), LSN: &lsn,
		Transaction: &Transaction{ID: "555:23803720", TotalOrder: 2, DataCollectionOrder: 1}}
	if !reflect.DeepEqual(env.Source, want) {
		t.Errorf("source\n got %+v\nwant %+v", env.Source, want)
	}
	if env.Op != "u" || env.TsMs == nil || *env.TsMs != commit.Add(time.Second).UnixMilli() ||
		!reflect.DeepEqual(env.Before, r.Before) || !reflect.DeepEqual(env.After, r.After) {
		t.Errorf("envelope %+v", env)
	}
	// Snapshot reads say so; truncates have neither image.
	for op, snap := range map[pipeline.Op]string{pipeline.OpRead: "true", pipeline.OpTruncate: "false"} {
		rr := &pipeline.Record{Op: op, Table: tbl}
		if op == pipeline.OpRead {
			rr.After = r.After
		}
		b, err := c.EncodeEnvelope(rr, SourceInfo{})
		if err != nil {
			t.Fatal(err)
		}
		env, err := c.DecodeEnvelope(b)
		if err != nil {
			t.Fatal(err)
		}
		if env.Op != op.String() || env.Source.Snapshot != snap || env.Source.Transaction != nil || env.Source.TxID != nil {
			t.Errorf("%s: %+v", op, env)
		}
	}
	if _, err := c.EncodeEnvelope(&pipeline.Record{Op: pipeline.OpHeartbeat, Table: tbl}, SourceInfo{}); err == nil {
		t.Error("heartbeat envelope: no error")
	}
}

func ptr[T any](v T) *T { return &v }

// The registered text must keep what a registry's compatibility check reads.
func TestSchemaTextKeepsDefaultsAndProperties(t *testing.T) {
	tbl := allTypesTable(allTypeCases())
	c, err := NewCodec(tbl, Options{ConnectorName: "postgresql", ServerName: "srv", Unchanged: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []avro.Schema{c.KeySchema(), c.ValueSchema(), c.EnvelopeSchema()} {
		txt, err := SchemaText(s)
		if err != nil {
			t.Fatal(err)
		}
		back, err := ParseSchemaText(txt)
		if err != nil {
			t.Fatalf("%v\n%s", err, txt)
		}
		if back.Fingerprint() != s.Fingerprint() {
			t.Errorf("%s: reparsed schema differs", s.(avro.NamedSchema).FullName())
		}
		if again, _ := SchemaText(back); again != txt {
			t.Errorf("text is not stable:\n%s\n%s", txt, again)
		}
	}
	txt, _ := SchemaText(c.ValueSchema())
	for _, want := range []string{
		`"default":null`, `"default":[]`,
		`"sluice.source_type":"numeric(38,10)"`, `"sluice.key":true`, `"sluice.nullable":false`, `"sluice.comment":"row id"`,
		`{"type":"bytes","logicalType":"decimal","precision":38,"scale":10}`,
		`{"type":"bytes","logicalType":"decimal","precision":20}`, // uint64
		`{"type":"int","connect.type":"int16"}`,
		`{"type":"long","logicalType":"local-timestamp-micros"}`, `{"type":"long","logicalType":"timestamp-micros"}`,
		`{"type":"int","logicalType":"date"}`, `{"type":"long","logicalType":"time-micros"}`,
		`{"type":"string","logicalType":"uuid"}`,
		`{"type":"string","connect.name":"io.debezium.data.Json"}`,
		`{"type":"string","connect.name":"io.debezium.time.ZonedTime"}`,
		`{"type":"string","connect.name":"io.debezium.data.Enum","connect.parameters":{"allowed":"sad,ok,happy"}}`,
		`"connect.name":"io.debezium.data.VariableScaleDecimal"`,
		`{"name":"sluice.Interval"`, `"items":["null","sluice.Interval"]`,
		`"items":["null","io.debezium.data.VariableScaleDecimal"]`,
	} {
		if !strings.Contains(txt, want) {
			t.Errorf("value schema text lacks %s", want)
		}
	}
	if strings.Count(txt, `"name":"sluice.Interval"`) != 1 {
		t.Error("sluice.Interval must be defined exactly once")
	}
	etxt, _ := SchemaText(c.EnvelopeSchema())
	for _, want := range []string{`"name":"snapshot","type":{"type":"string"`, `"default":"false"`, `"name":"transaction","type":["null",{"name":"event.block"`} {
		if !strings.Contains(etxt, want) {
			t.Errorf("envelope text lacks %s", want)
		}
	}
}

func TestNamesAndSubjects(t *testing.T) {
	for in, want := range map[string]string{"order-id": "order_id", "1st": "_1st", "prénom": "pr_nom", "": "_", "ok_9": "ok_9", "a b.c": "a_b_c"} {
		if got := SanitizeName(in); got != want {
			t.Errorf("SanitizeName(%q) = %q, want %q", in, got, want)
		}
	}
	if got := Namespace("", pipeline.TableID{Schema: "shop", Table: "2024-orders"}); got != "shop._2024_orders" {
		t.Errorf("namespace %s", got)
	}
	v, err := ValueSchema(&pipeline.Table{ID: pipeline.TableID{Schema: "s", Table: "t"},
		Columns: []pipeline.Column{{Name: "a", Type: pipeline.TypeText}}}, Options{ServerName: "p"})
	if err != nil {
		t.Fatal(err)
	}
	if got := TopicNameStrategy("p.s.t", true, v); got != "p.s.t-key" {
		t.Error(got)
	}
	if got := TopicNameStrategy("p.s.t", false, v); got != "p.s.t-value" {
		t.Error(got)
	}
	if got := RecordNameStrategy("ignored", false, v); got != "p.s.t.Value" {
		t.Error(got)
	}
	var _ SubjectNameStrategy = RecordNameStrategy
}
