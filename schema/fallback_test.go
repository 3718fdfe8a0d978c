package schema

import (
	"errors"
	"testing"

	"github.com/sluice-cdc/sluice/pipeline"
)

// The Fallback encoders write a value Avro cannot hold in a nullable
// column as null and name it; the strict encoders and a NOT NULL column
// still refuse it.
func TestTextFallback(t *testing.T) {
	tbl := &pipeline.Table{ID: pipeline.TableID{Schema: "public", Table: "f"}, KeyIdx: []int{0}, Columns: []pipeline.Column{
		{Name: "id", Type: pipeline.TypeInt64, Key: true},
		{Name: "n", Type: pipeline.TypeDecimal, Nullable: true},
		{Name: "a", Type: pipeline.TypeArray, Elem: pipeline.TypeInt32, Nullable: true},
		{Name: "m", Type: pipeline.TypeDecimal}}}
	c, err := NewCodec(tbl, Options{})
	if err != nil {
		t.Fatal(err)
	}
	nan := pipeline.Decimal{Special: pipeline.NaN}
	nested := []any{[]any{int64(1)}, []any{int64(2)}}
	r := &pipeline.Record{Op: pipeline.OpUpdate, Table: tbl, Before: []any{int64(1), nan, nil, dec("1")},
		After: []any{int64(1), nan, nested, dec("2")}}
	if _, err := c.EncodeEnvelope(r, SourceInfo{}); !errors.Is(err, ErrNotRepresentable) {
		t.Fatalf("strict: %v; want ErrNotRepresentable", err)
	}
	type got struct {
		before bool
		col    int
	}
	var fell []got
	b, err := c.EncodeEnvelopeFallback(r, SourceInfo{}, func(before bool, col int) { fell = append(fell, got{before, col}) })
	if err != nil {
		t.Fatal(err)
	}
	if want := []got{{true, 1}, {false, 1}, {false, 2}}; len(fell) != len(want) || fell[0] != want[0] || fell[1] != want[1] || fell[2] != want[2] {
		t.Fatalf("fell back %v; want %v", fell, want)
	}
	env, err := c.DecodeEnvelope(b)
	if err != nil {
		t.Fatal(err)
	}
	if env.After[1] != nil || env.After[2] != nil || env.Before[1] != nil {
		t.Fatalf("after %v before %v; want nulls where the values fell back", env.After, env.Before)
	}
	r.After[3] = nan // NOT NULL: no null to fall back to
	if _, err := c.EncodeEnvelopeFallback(r, SourceInfo{}, func(bool, int) {}); !errors.Is(err, ErrNotRepresentable) {
		t.Fatalf("NOT NULL column: %v; want ErrNotRepresentable", err)
	}
	if _, err := c.EncodeValueFallback(&pipeline.Record{Op: pipeline.OpInsert, Table: tbl, After: []any{int64(2), nan, nested, dec("3")}},
		func(bool, int) {}); err != nil {
		t.Fatalf("row form: %v", err)
	}
}
