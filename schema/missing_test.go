package schema

import (
	"math"
	"testing"

	"github.com/hamba/avro/v2"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/verify"
)

// A column added with a missing value carries it as its Avro default, the
// type first in its union: an event of the older shape read with the new
// schema holds the default, and the new shape's own NULLs and values
// still round-trip through the swapped union.
func TestMissingValueIsTheAvroDefault(t *testing.T) {
	id := pipeline.TableID{Schema: "public", Table: "t"}
	v1 := &pipeline.Table{ID: id, KeyIdx: []int{0}, Columns: []pipeline.Column{
		{Name: "id", Type: pipeline.TypeInt64, Key: true}, {Name: "a", Type: pipeline.TypeText, Nullable: true}}}
	v2 := *v1
	v2.Columns = append(append([]pipeline.Column{}, v1.Columns...),
		pipeline.Column{Name: "n", Type: pipeline.TypeInt32, Nullable: true, Missing: int64(7)},
		pipeline.Column{Name: "d", Type: pipeline.TypeDecimal, Precision: 10, Scale: 2, Nullable: true,
			Missing: dec("-12.50")},
		pipeline.Column{Name: "f", Type: pipeline.TypeFloat64, Nullable: true, Missing: math.Inf(1)}, // no JSON form
		pipeline.Column{Name: "ts", Type: pipeline.TypeTimestampTZ, Nullable: true, Missing: pipeline.Timestamp{Micros: 1}})
	old, err := NewCodec(v1, Options{})
	if err != nil {
		t.Fatal(err)
	}
	cur, err := NewCodec(&v2, Options{})
	if err != nil {
		t.Fatal(err)
	}
	fields := cur.ValueSchema().(*avro.RecordSchema).Fields()
	for _, f := range fields {
		u, _ := f.Type().(*avro.UnionSchema)
		switch f.Name() {
		case "n", "d":
			if u == nil || u.Types()[0].Type() == avro.Null || !f.HasDefault() {
				t.Errorf("field %s: %s, default %v; want the type first and a default", f.Name(), f.Type(), f.Default())
			}
		case "a", "f", "ts":
			if u == nil || u.Types()[0].Type() != avro.Null || f.Default() != nil {
				t.Errorf("field %s: %s, default %v; want null first and no other default", f.Name(), f.Type(), f.Default())
			}
		}
		// A missing value the default cannot hold is the field's
		// sluice.missing property, in its text form.
		want := map[string]any{"f": "Infinity", "ts": "1970-01-01T00:00:00.000001Z"}[f.Name()]
		if got := f.Prop(PropMissing); got != want {
			t.Errorf("field %s: property %s = %v, want %v", f.Name(), PropMissing, got, want)
		}
	}
	payload, err := old.EncodeValue(&pipeline.Record{Op: pipeline.OpInsert, Table: v1, After: []any{int64(1), "x"}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := avro.NewSchemaCompatibility().Resolve(cur.ValueSchema(), old.ValueSchema())
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := cur.API().Unmarshal(res, payload, &m); err != nil {
		t.Fatal(err)
	}
	again, err := cur.API().Marshal(cur.ValueSchema(), m)
	if err != nil {
		t.Fatal(err)
	}
	row, err := cur.DecodeValue(again)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := verify.Canon(row.Values), verify.Canon([]any{int64(1), "x", int64(7), dec("-12.50"), nil, nil}); got != want {
		t.Errorf("an older event read with the new schema: %s; want %s (the defaults of n and d)", got, want)
	}
	for _, vals := range [][]any{
		{int64(2), nil, nil, nil, nil, nil},
		{int64(3), "y", int64(-1), dec("0.01"), 1.5, pipeline.Timestamp{Micros: 5}},
	} {
		b, err := cur.EncodeValue(&pipeline.Record{Op: pipeline.OpInsert, Table: &v2, After: vals})
		if err != nil {
			t.Fatal(err)
		}
		row, err := cur.DecodeValue(b)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := verify.Canon(row.Values), verify.Canon(vals); got != want {
			t.Errorf("round trip: %s, want %s", got, want)
		}
	}
}
