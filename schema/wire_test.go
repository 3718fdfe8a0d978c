package schema

import (
	"bytes"
	"context"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/sluice-cdc/sluice/pipeline"
)

func TestFrameUnframe(t *testing.T) {
	for _, id := range []int{0, 1, 258, math.MaxInt32} {
		payload := []byte{1, 2, 3}
		b := Frame(id, payload)
		if b[0] != 0 || len(b) != 8 {
			t.Fatalf("frame %x", b)
		}
		gotID, got, err := Unframe(b)
		if err != nil || gotID != id || !bytes.Equal(got, payload) {
			t.Errorf("id %d: got %d %x %v", id, gotID, got, err)
		}
	}
	if b := Frame(0x01020304, nil); !bytes.Equal(b, []byte{0, 1, 2, 3, 4}) {
		t.Errorf("big-endian id: %x", b)
	}
	for _, bad := range [][]byte{nil, {0, 0, 0, 1}, {1, 0, 0, 0, 1, 9}} {
		if _, _, err := Unframe(bad); !errors.Is(err, ErrNotFramed) {
			t.Errorf("%x: %v", bad, err)
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("negative id did not panic")
		}
	}()
	Frame(-1, nil)
}

func FuzzUnframe(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0, 0, 0, 0, 1})
	f.Add(Frame(7, []byte("payload")))
	f.Add([]byte{0, 0xff, 0xff, 0xff, 0xff, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		id, payload, err := Unframe(b)
		if err != nil {
			if len(b) >= 5 && b[0] == 0 {
				t.Fatalf("valid header rejected: %x", b)
			}
			return
		}
		if len(payload) != len(b)-5 || !bytes.Equal(payload, b[5:]) {
			t.Fatalf("payload %x of %x", payload, b)
		}
		if id >= 0 && !bytes.Equal(Frame(id, payload), b) {
			t.Fatalf("Frame(Unframe(%x)) differs", b)
		}
	})
}

func TestMemRegistry(t *testing.T) {
	ctx := context.Background()
	base := &pipeline.Table{ID: pipeline.TableID{Schema: "s", Table: "t"}, KeyIdx: []int{0}, Columns: []pipeline.Column{
		{Name: "id", Type: pipeline.TypeInt64, Key: true}, {Name: "a", Type: pipeline.TypeText}}}
	text := func(cols ...pipeline.Column) string {
		tbl := *base
		tbl.Columns = append(append([]pipeline.Column(nil), base.Columns...), cols...)
		v, err := ValueSchema(&tbl, Options{})
		if err != nil {
			t.Fatal(err)
		}
		s, err := SchemaText(v)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	v1 := text()
	v2 := text(pipeline.Column{Name: "b", Type: pipeline.TypeInt32, Nullable: true}) // has a default: BACKWARD ok
	v3 := text(pipeline.Column{Name: "b", Type: pipeline.TypeInt32, Nullable: true},
		pipeline.Column{Name: "c", Type: pipeline.TypeInt32}) // required, no default: BACKWARD fails

	var reg Registry = NewMemRegistry()
	mem := reg.(*MemRegistry)
	id1, err := reg.Register(ctx, "t-value", v1)
	if err != nil || id1 != 1 {
		t.Fatalf("first id %d %v", id1, err)
	}
	if again, _ := reg.Register(ctx, "t-value", v1); again != 1 || len(mem.Versions("t-value")) != 1 {
		t.Errorf("re-register: id %d versions %v", again, mem.Versions("t-value"))
	}
	if other, _ := reg.Register(ctx, "other-value", v1); other != 1 {
		t.Errorf("same schema, other subject: id %d", other)
	}
	ok, reason, err := reg.Compatible(ctx, "t-value", v2)
	if err != nil || !ok {
		t.Errorf("v2: %v %s %v", ok, reason, err)
	}
	id2, err := reg.Register(ctx, "t-value", v2)
	if err != nil || id2 != 2 {
		t.Fatalf("v2 id %d %v", id2, err)
	}
	ok, reason, err = reg.Compatible(ctx, "t-value", v3)
	if err != nil || ok || !strings.Contains(reason, "c") {
		t.Errorf("v3 should be incompatible: %v %q %v", ok, reason, err)
	}
	if _, err := reg.Register(ctx, "t-value", v3); err == nil {
		t.Error("registering an incompatible schema succeeded")
	}
	if err := reg.SetCompatibility(ctx, "t-value", "none"); err != nil {
		t.Fatal(err)
	}
	if id3, err := reg.Register(ctx, "t-value", v3); err != nil || id3 != 3 {
		t.Errorf("v3 under NONE: %d %v", id3, err)
	}
	if got := mem.Versions("t-value"); len(got) != 3 || got[2] != 3 {
		t.Errorf("versions %v", got)
	}
	if s, ok := mem.Schema(2); !ok || s != v2 {
		t.Error("Schema(2)")
	}
	if err := reg.SetCompatibility(ctx, "t-value", "SIDEWAYS"); err == nil {
		t.Error("unknown level accepted")
	}
	// FORWARD: the old schema must read the new data; dropping a field
	// without a default breaks that.
	if err := reg.SetCompatibility(ctx, "fwd", CompatForward); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Register(ctx, "fwd", v3); err != nil {
		t.Fatal(err)
	}
	if ok, _, _ := reg.Compatible(ctx, "fwd", v1); ok {
		t.Error("FORWARD: dropping required c should be incompatible")
	}
	if _, _, err := reg.Compatible(ctx, "t-value", "{not json"); err == nil {
		t.Error("invalid schema accepted")
	}
	if got := mem.Subjects(); strings.Join(got, ",") != "fwd,other-value,t-value" {
		t.Errorf("subjects %v", got)
	}
}
