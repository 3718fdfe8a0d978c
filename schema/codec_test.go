package schema

import (
	"errors"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/hamba/avro/v2"
	"github.com/sluice-cdc/sluice/pipeline"
)

var testOpts = Options{ConnectorName: "postgresql", ServerName: "srv"}

// rows builds, from the cases, rows whose i-th row takes each case's
// (i mod len) value; the nullable twin is NULL on odd rows.
func rows(t *pipeline.Table, cases []typeCase) [][]any {
	n := 0
	for _, c := range cases {
		n = max(n, len(c.values))
	}
	out := make([][]any, 0, n+1)
	for i := 0; i <= n; i++ {
		r := []any{int64(i + 1)}
		for _, c := range cases {
			v := c.values[i%len(c.values)]
			r = append(r, v)
			if i%2 == 1 {
				r = append(r, nil)
			} else {
				r = append(r, v)
			}
		}
		if len(r) != len(t.Columns) {
			panic("row width")
		}
		out = append(out, r)
	}
	return out
}

func checkImage(t *testing.T, tbl *pipeline.Table, what string, want, got []any) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range want {
		if !valueEqual(want[i], got[i]) {
			t.Errorf("%s column %s: got %s, want %s", what, tbl.Columns[i].Name, show(got[i]), show(want[i]))
		}
	}
}

func TestEveryTypeRoundTrips(t *testing.T) {
	cases := allTypeCases()
	seen := map[pipeline.Type]bool{}
	for _, c := range cases {
		seen[c.col.Type] = true
	}
	for typ := pipeline.TypeText; typ <= pipeline.TypeArray; typ++ {
		if !seen[typ] {
			t.Errorf("no case for %s", typ)
		}
	}
	tbl := allTypesTable(cases)
	c, err := NewCodec(tbl, testOpts)
	if err != nil {
		t.Fatal(err)
	}
	when := time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)
	for i, img := range rows(tbl, cases) {
		r := &pipeline.Record{Op: pipeline.OpInsert, Table: tbl, After: img, Version: pipeline.Version{0, 42, 0, uint64(i)}, EventTime: when}
		b, err := c.EncodeValue(r)
		if err != nil {
			t.Fatalf("row %d: %v", i, err)
		}
		row, err := c.DecodeValue(b)
		if err != nil {
			t.Fatalf("row %d: %v", i, err)
		}
		checkImage(t, tbl, "value", img, row.Values)
		if row.Op != "c" || row.Deleted || row.Version != r.Version || row.SourceTsMs != when.UnixMilli() {
			t.Errorf("row %d metadata: %+v", i, row)
		}

		kb, err := c.EncodeKey(r)
		if err != nil {
			t.Fatal(err)
		}
		key, err := c.DecodeKey(kb)
		if err != nil || len(key) != 1 || key[0] != img[0] {
			t.Errorf("key: %v %v", key, err)
		}

		eb, err := c.EncodeEnvelope(r, SourceInfo{Version: "1.0"})
		if err != nil {
			t.Fatal(err)
		}
		env, err := c.DecodeEnvelope(eb)
		if err != nil {
			t.Fatal(err)
		}
		if env.Before != nil || env.Op != "c" {
			t.Errorf("envelope: before %v op %q", env.Before, env.Op)
		}
		checkImage(t, tbl, "envelope after", img, env.After)
	}
}

func TestDecimalScaleIsExact(t *testing.T) {
	col := pipeline.Column{Name: "amount", Type: pipeline.TypeDecimal, Precision: 12, Scale: 4}
	for in, want := range map[string]string{"1.5": "1.5000", "-0.0001": "-0.0001", "12345678": "12345678.0000", "7": "7.0000"} {
		v, err := fixedDecimal(dec(in), 12, 4)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := fromNative(&col, col.Type, v)
		if got.(pipeline.Decimal).String() != want {
			t.Errorf("%s: got %s, want %s", in, got, want)
		}
	}
	for _, bad := range []string{"1.23456", "123456789.0"} {
		if _, err := fixedDecimal(dec(bad), 12, 4); !errors.Is(err, ErrNotRepresentable) {
			t.Errorf("%s: err %v, want ErrNotRepresentable", bad, err)
		}
	}
	// Variable-scale decimals keep their scale, not only their value.
	for _, in := range []string{"0.000", "-1.10", "1e-30", "-128", "-129", "32768"} {
		v, err := varDecimal(dec(in))
		if err != nil {
			t.Fatal(err)
		}
		vcol := pipeline.Column{Type: pipeline.TypeDecimal}
		got, _ := fromNative(&vcol, vcol.Type, v)
		if got.(pipeline.Decimal).String() != dec(in).String() {
			t.Errorf("%s: got %s", in, got)
		}
	}
}

func TestNonFiniteDecimalIsAnError(t *testing.T) {
	tbl := &pipeline.Table{ID: pipeline.TableID{Schema: "public", Table: "m"}, KeyIdx: []int{0}, Columns: []pipeline.Column{
		{Name: "id", Type: pipeline.TypeInt32, Key: true},
		{Name: "fixed", Type: pipeline.TypeDecimal, Precision: 10, Scale: 2, Nullable: true},
		{Name: "free", Type: pipeline.TypeDecimal, Nullable: true},
	}}
	c, err := NewCodec(tbl, testOpts)
	if err != nil {
		t.Fatal(err)
	}
	for col := 1; col <= 2; col++ {
		for _, sp := range []pipeline.Special{pipeline.NaN, pipeline.PosInfinity, pipeline.NegInfinity} {
			img := []any{int64(1), nil, nil}
			img[col] = pipeline.Decimal{Special: sp}
			r := &pipeline.Record{Op: pipeline.OpInsert, Table: tbl, After: img}
			_, err := c.EncodeValue(r)
			var ee *EncodeError
			if !errors.As(err, &ee) || !errors.Is(err, ErrNotRepresentable) || ee.Column != tbl.Columns[col].Name ||
				!strings.Contains(err.Error(), "public.m") || !strings.Contains(err.Error(), "pipeline.Decimal") {
				t.Errorf("%s %s: err %v", tbl.Columns[col].Name, sp, err)
			}
			if _, err := c.EncodeEnvelope(r, SourceInfo{}); !errors.Is(err, ErrNotRepresentable) {
				t.Errorf("envelope %s: err %v", sp, err)
			}
		}
	}
}

func TestValueErrors(t *testing.T) {
	tbl := &pipeline.Table{ID: pipeline.TableID{Schema: "public", Table: "e"}, KeyIdx: []int{0}, Columns: []pipeline.Column{
		{Name: "id", Type: pipeline.TypeInt16, Key: true},
		{Name: "a", Type: pipeline.TypeArray, Elem: pipeline.TypeInt32, Nullable: true},
		{Name: "t", Type: pipeline.TypeText},
	}}
	c, err := NewCodec(tbl, testOpts)
	if err != nil {
		t.Fatal(err)
	}
	for name, img := range map[string][]any{
		"multi-dim array":   {int64(1), []any{[]any{int64(1)}}, "x"},
		"int16 overflow":    {int64(40000), nil, "x"},
		"wrong go type":     {int64(1), nil, 5},
		"null in not null":  {int64(1), nil, nil},
		"unchanged, no opt": {int64(1), nil, pipeline.UnchangedValue},
		"short image":       {int64(1)},
	} {
		if _, err := c.EncodeValue(&pipeline.Record{Op: pipeline.OpUpdate, Table: tbl, After: img}); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	other := *tbl
	if _, err := c.EncodeValue(&pipeline.Record{Op: pipeline.OpInsert, Table: &other, After: []any{int64(1), nil, "x"}}); err == nil {
		t.Error("record of another shape: no error")
	}
	if _, err := c.EncodeValue(&pipeline.Record{Op: pipeline.OpTruncate, Table: tbl}); !errors.Is(err, ErrNoRow) {
		t.Errorf("truncate value: %v", err)
	}
	if _, err := c.EncodeKey(&pipeline.Record{Op: pipeline.OpTruncate, Table: tbl}); !errors.Is(err, ErrNoRow) {
		t.Errorf("truncate key: %v", err)
	}
}

func TestDeleteOfKeyOnlyOldTuple(t *testing.T) {
	tbl := &pipeline.Table{ID: pipeline.TableID{Schema: "public", Table: "d"}, KeyIdx: []int{0}, Columns: []pipeline.Column{
		{Name: "id", Type: pipeline.TypeInt64, Key: true},
		{Name: "name", Type: pipeline.TypeText},
		{Name: "at", Type: pipeline.TypeTimestampTZ},
		{Name: "note", Type: pipeline.TypeText, Nullable: true},
	}}
	c, err := NewCodec(tbl, testOpts)
	if err != nil {
		t.Fatal(err)
	}
	r := &pipeline.Record{Op: pipeline.OpDelete, Table: tbl, Before: []any{int64(9), nil, nil, nil}}
	b, err := c.EncodeValue(r)
	if err != nil {
		t.Fatal(err)
	}
	row, err := c.DecodeValue(b)
	if err != nil {
		t.Fatal(err)
	}
	want := []any{int64(9), "", pipeline.Timestamp{}, nil}
	checkImage(t, tbl, "delete", want, row.Values)
	if !row.Deleted || row.Op != "d" {
		t.Errorf("metadata %+v", row)
	}
	eb, err := c.EncodeEnvelope(r, SourceInfo{})
	if err != nil {
		t.Fatal(err)
	}
	env, err := c.DecodeEnvelope(eb)
	if err != nil {
		t.Fatal(err)
	}
	if env.After != nil || env.Op != "d" {
		t.Errorf("envelope %+v", env)
	}
	checkImage(t, tbl, "envelope before", want, env.Before)
	k, err := c.EncodeKey(r)
	if err != nil {
		t.Fatal(err)
	}
	if key, _ := c.DecodeKey(k); len(key) != 1 || key[0] != int64(9) {
		t.Errorf("key %v", key)
	}
}

func TestUnchangedColumnsAreListed(t *testing.T) {
	tbl := &pipeline.Table{ID: pipeline.TableID{Schema: "public", Table: "toast"}, KeyIdx: []int{0}, Columns: []pipeline.Column{
		{Name: "id", Type: pipeline.TypeInt64, Key: true},
		{Name: "body", Type: pipeline.TypeText},
		{Name: "doc", Type: pipeline.TypeJSON, Nullable: true},
		{Name: "n", Type: pipeline.TypeInt32, Nullable: true},
	}}
	opts := testOpts
	opts.Unchanged = true
	c, err := NewCodec(tbl, opts)
	if err != nil {
		t.Fatal(err)
	}
	img := []any{int64(1), pipeline.UnchangedValue, pipeline.UnchangedValue, nil}
	r := &pipeline.Record{Op: pipeline.OpUpdate, Table: tbl, After: img}
	b, err := c.EncodeValue(r)
	if err != nil {
		t.Fatal(err)
	}
	var raw map[string]any
	if err := c.API().Unmarshal(c.ValueSchema(), b, &raw); err != nil {
		t.Fatal(err)
	}
	if got := raw[FieldUnchanged]; !valueEqual(got, []any{"body", "doc"}) {
		t.Errorf("%s = %v", FieldUnchanged, got)
	}
	row, err := c.DecodeValue(b)
	if err != nil {
		t.Fatal(err)
	}
	checkImage(t, tbl, "value", img, row.Values) // n stays NULL, not unchanged
	eb, err := c.EncodeEnvelope(r, SourceInfo{})
	if err != nil {
		t.Fatal(err)
	}
	env, err := c.DecodeEnvelope(eb)
	if err != nil {
		t.Fatal(err)
	}
	checkImage(t, tbl, "envelope", img, env.After)
	// A key column is never nullable, so an unchanged key is an error.
	if _, err := c.EncodeValue(&pipeline.Record{Op: pipeline.OpUpdate, Table: tbl,
		After: []any{pipeline.UnchangedValue, "x", nil, nil}}); err == nil {
		t.Error("unchanged key: no error")
	}
	// The field is nullable with default null even though body is NOT NULL.
	txt, _ := SchemaText(c.ValueSchema())
	if !strings.Contains(txt, `{"name":"body","type":["null","string"],"default":null,"sluice.nullable":false}`) ||
		!strings.Contains(txt, `"name":"__sluice_unchanged","doc":`) || !strings.Contains(txt, `"default":[]`) {
		t.Errorf("schema text: %s", txt)
	}
}

// Two shapes of one table share record names; each must encode with its
// own schema, whichever was used first, and decode with it.
func TestTwoShapesEncodeWithTheirOwnSchemas(t *testing.T) {
	id := pipeline.TableID{Database: "shop", Schema: "public", Table: "orders"}
	v1 := &pipeline.Table{ID: id, KeyIdx: []int{0}, Generation: 1, Columns: []pipeline.Column{
		{Name: "id", Type: pipeline.TypeInt32, Key: true},
		{Name: "amount", Type: pipeline.TypeDecimal, Precision: 10, Scale: 2},
	}}
	v2 := &pipeline.Table{ID: id, KeyIdx: []int{0}, Generation: 2, Columns: []pipeline.Column{
		{Name: "id", Type: pipeline.TypeInt32, Key: true},
		{Name: "amount", Type: pipeline.TypeDecimal, Precision: 12, Scale: 4}, // same name, new scale
		{Name: "note", Type: pipeline.TypeText, Nullable: true},               // added column
	}}
	cache := NewCache(testOpts)
	c1, err := cache.Codec(v1)
	if err != nil {
		t.Fatal(err)
	}
	c2, err := cache.Codec(v2)
	if err != nil {
		t.Fatal(err)
	}
	if c1.ValueSchema().(avro.NamedSchema).FullName() != c2.ValueSchema().(avro.NamedSchema).FullName() {
		t.Fatal("the shapes should share the record name")
	}
	if c1.API() == c2.API() {
		t.Fatal("shapes must not share a hamba configuration")
	}
	r1 := &pipeline.Record{Op: pipeline.OpInsert, Table: v1, After: []any{int64(1), dec("12.34")}}
	r2 := &pipeline.Record{Op: pipeline.OpInsert, Table: v2, After: []any{int64(1), dec("12.3456"), "hi"}}
	for round := 0; round < 2; round++ { // interleaved, so a shared cache would show
		b1, err := c1.EncodeValue(r1)
		if err != nil {
			t.Fatal(err)
		}
		b2, err := c2.EncodeValue(r2)
		if err != nil {
			t.Fatal(err)
		}
		row1, err := c1.DecodeValue(b1)
		if err != nil {
			t.Fatal(err)
		}
		row2, err := c2.DecodeValue(b2)
		if err != nil {
			t.Fatal(err)
		}
		checkImage(t, v1, "v1", r1.After, row1.Values)
		checkImage(t, v2, "v2", r2.After, row2.Values)
		// Independently of our decoder: a fresh parse of each shape's text.
		for _, x := range []struct {
			c    *Codec
			b    []byte
			want map[string]any
		}{{c1, b1, map[string]any{"amount": big.NewRat(1234, 100)}},
			{c2, b2, map[string]any{"amount": big.NewRat(123456, 10000), "note": "hi"}}} {
			txt, _ := SchemaText(x.c.ValueSchema())
			s, err := ParseSchemaText(txt)
			if err != nil {
				t.Fatal(err)
			}
			var m map[string]any
			if err := (avro.Config{}).Freeze().Unmarshal(s, x.b, &m); err != nil {
				t.Fatal(err)
			}
			for k, v := range x.want {
				if !valueEqual(m[k], v) && !(isRat(v) && m[k].(*big.Rat).Cmp(v.(*big.Rat)) == 0) {
					t.Errorf("gen %d field %s = %v, want %v", x.c.Table().Generation, k, m[k], v)
				}
			}
			if len(m) != len(x.c.ValueSchema().(*avro.RecordSchema).Fields()) {
				t.Errorf("gen %d decoded %d fields: %v", x.c.Table().Generation, len(m), m)
			}
		}
	}
	// Old-shape records still encode after the new shape appeared.
	if again, _ := cache.Codec(v1); again != c1 {
		t.Error("cache rebuilt a live shape")
	}
	// v1 data is readable by v2's schema (BACKWARD): the registry agrees.
	reg := NewMemRegistry()
	t1, _ := SchemaText(c1.ValueSchema())
	t2, _ := SchemaText(c2.ValueSchema())
	if _, err := reg.Register(t.Context(), "orders-value", t1); err != nil {
		t.Fatal(err)
	}
	ok, reason, err := reg.Compatible(t.Context(), "orders-value", t2)
	if err != nil {
		t.Fatal(err)
	}
	// Avro resolution ignores logical types (as the Java implementation
	// does), so the added nullable column decides: compatible.
	if !ok {
		t.Errorf("v1→v2 incompatible: %s", reason)
	}
}

func isRat(v any) bool { _, ok := v.(*big.Rat); return ok }

func TestCacheEvictsOldShapes(t *testing.T) {
	cache := &Cache{Options: testOpts, MaxShapes: 2}
	var shapes []*pipeline.Table
	for g := 1; g <= 3; g++ {
		tbl := &pipeline.Table{ID: pipeline.TableID{Schema: "s", Table: "t"}, Generation: g,
			Columns: []pipeline.Column{{Name: "a", Type: pipeline.TypeText}}}
		shapes = append(shapes, tbl)
		if _, err := cache.Codec(tbl); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := cache.codecs[shapes[0]]; ok || len(cache.codecs) != 2 {
		t.Errorf("cache holds %d codecs, first shape kept %v", len(cache.codecs), ok)
	}
	c, err := cache.Codec(shapes[0])
	if err != nil || c.Table() != shapes[0] {
		t.Fatal(err)
	}
	if _, err := c.EncodeKey(&pipeline.Record{Op: pipeline.OpInsert, Table: shapes[0], After: []any{"x"}}); !errors.Is(err, ErrNoKey) {
		t.Errorf("keyless EncodeKey: %v", err)
	}
}

func TestCodecIsSafeForConcurrentUse(t *testing.T) {
	cases := allTypeCases()
	tbl := allTypesTable(cases)
	c, err := NewCodec(tbl, testOpts)
	if err != nil {
		t.Fatal(err)
	}
	imgs := rows(tbl, cases)
	done := make(chan error, 4)
	for g := 0; g < 4; g++ {
		go func() {
			for i := 0; i < 20; i++ {
				img := imgs[(g+i)%len(imgs)]
				b, err := c.EncodeValue(&pipeline.Record{Op: pipeline.OpInsert, Table: tbl, After: img})
				if err == nil {
					var row *Row
					if row, err = c.DecodeValue(b); err == nil && !valueEqual(row.Values, img) {
						err = errors.New("round trip differs")
					}
				}
				if err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
	}
	for g := 0; g < 4; g++ {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}
