package search

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/sinks/sinktest"
)

// TestExternalVersionOrder checks that the packing never reorders:
// external versions are non-decreasing in version order, strictly
// increasing below the saturation point, across generations (a later
// generation's low LSNs above an earlier one's high LSNs).
func TestExternalVersionOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var vs []pipeline.Version
	for range 5000 {
		lsn := rng.Uint64N(1 << 20)
		if rng.IntN(4) == 0 {
			lsn = maxLSN - rng.Uint64N(1<<20)
		}
		idx := rng.Uint64N(maxIndex + 10)
		if rng.IntN(10) == 0 {
			idx = rng.Uint64()
		}
		gen := uint64(0)
		switch rng.IntN(6) {
		case 0:
			gen = 1 + rng.Uint64N(3)
		case 1:
			gen = 14 + rng.Uint64N(3) // around saturation
		}
		vs = append(vs, pipeline.Version{gen, lsn, 0, idx})
	}
	vs = append(vs, pipeline.Version{}, pipeline.Version{0, maxLSN, 0, ^uint64(0)}, pipeline.Version{0, 0, 0, maxIndex - 1},
		pipeline.Version{0, 0, 0, maxIndex}, pipeline.Version{0, 1, 0, 0})
	sort.Slice(vs, func(a, b int) bool { return vs[a].Less(vs[b]) })
	for i := 1; i < len(vs); i++ {
		a, satA, errA := external(vs[i-1])
		b, _, errB := external(vs[i])
		if errA != nil || errB != nil {
			t.Fatal(errA, errB)
		}
		switch {
		case a > b:
			t.Fatalf("%s → %d but %s → %d", vs[i-1], a, vs[i], b)
		case a == b && !satA && vs[i-1] != vs[i]:
			t.Fatalf("%s and %s share %d without saturating", vs[i-1], vs[i], a)
		}
		if a < 0 || b < 0 {
			t.Fatalf("negative external version")
		}
	}
	if _, sat, _ := external(pipeline.Version{0, maxLSN + 1, 0, 0}); !sat {
		t.Errorf("an LSN beyond 47 bits does not saturate")
	}
	if a, _, _ := external(pipeline.Version{1, 1, 0, 2}); a <= func() int64 { b, _, _ := external(pipeline.Version{0, maxLSN - 1, 0, 2}); return b }() {
		t.Errorf("generation 1 at a low LSN does not sort above generation 0 at a high one")
	}
	if ext, sat, _ := external(pipeline.Version{0, 0x16B3748, 0, 3}); ext != 0x16B3748<<12|3 || sat {
		t.Errorf("ext = %#x %v", ext, sat)
	}
}

// TestExternalVersionOrderMySQL checks the MySQL layout the same way,
// across epochs, binlog files, offsets and row indexes, including
// components beyond their fields.
func TestExternalVersionOrderMySQL(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var vs []pipeline.Version
	for range 5000 {
		v := pipeline.Version{rng.Uint64N(3), 1 + rng.Uint64N(5), 4 + rng.Uint64N(1<<20), rng.Uint64N(maxIndex + 10)}
		switch rng.IntN(8) {
		case 0:
			v[0] = 7 + rng.Uint64N(3)
		case 1:
			v[1] = 1<<16 - 2 + rng.Uint64N(4)
		case 2:
			v[2] = 1<<32 - 2 + rng.Uint64N(4)
		}
		vs = append(vs, v)
	}
	sort.Slice(vs, func(a, b int) bool { return vs[a].Less(vs[b]) })
	for i := 1; i < len(vs); i++ {
		a, satA, _ := external(vs[i-1])
		b, _, _ := external(vs[i])
		switch {
		case a > b:
			t.Fatalf("%s → %d but %s → %d", vs[i-1], a, vs[i], b)
		case a == b && !satA && vs[i-1] != vs[i]:
			t.Fatalf("%s and %s share %d without saturating", vs[i-1], vs[i], a)
		case a < 0 || b < 0:
			t.Fatalf("negative external version")
		}
	}
	if ext, sat, _ := external(pipeline.Version{1, 3, 1234, 5}); ext != 1<<60|3<<44|1234<<12|5 || sat {
		t.Errorf("ext = %#x %v", ext, sat)
	}
}

func TestDocIDs(t *testing.T) {
	for _, c := range []struct {
		vals []any
		want string
	}{
		{[]any{int64(42)}, "42"},
		{[]any{"a:b\\c", int64(-1)}, `a\:b\\c:-1`},
		{[]any{""}, `\e`},
		{[]any{"", ""}, ":"},
		{[]any{uint64(18446744073709551615), true, 1.5}, "18446744073709551615:true:1.5"},
		{[]any{json.RawMessage(`["x",1]`)}, `["x",1]`},
	} {
		keys := make([]int, len(c.vals))
		for i := range keys {
			keys[i] = i
		}
		if got := docID(keys, c.vals); got != c.want {
			t.Errorf("docID(%v) = %q, want %q", c.vals, got, c.want)
		}
	}
	long := docID([]int{0}, []any{strings.Repeat("é", 300)})
	if !strings.HasPrefix(long, `\h`) || len(long) != 66 || long == docID([]int{0}, []any{strings.Repeat("é", 301)}) {
		t.Errorf("long id %q", long)
	}
}

func TestIndexNames(t *testing.T) {
	for tmpl, want := range map[string]string{
		"{schema}.{table}":        "public.orders",
		"cdc-{database}_{table}":  "cdc-shop_orders",
		"_{schema}/{table}?":      "public_orders_",
		"{table} #1, \"x\" <y>|z": "orders__1___x___y__z",
	} {
		got, err := indexName(tmpl, pipeline.TableID{Database: "Shop", Schema: "Public", Table: "Orders"})
		if err != nil || got != want {
			t.Errorf("%s: %q, %v; want %q", tmpl, got, err, want)
		}
	}
	for _, bad := range []string{"", "..", "___", strings.Repeat("x", 256)} {
		if _, err := sanitizeIndex(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestStageDecodeRoundTrip checks the value encodings without a node:
// every value of the types table survives staging, JSON encoding and
// decoding.
func TestStageDecodeRoundTrip(t *testing.T) {
	for _, r := range typeRows() {
		for i := range allTypes.Columns {
			c := &allTypes.Columns[i]
			x, err := (conv{}).Stage(c, r[i])
			if err != nil {
				t.Fatalf("%s: stage %v: %v", c.Name, r[i], err)
			}
			raw := appendValue(nil, x)
			if !json.Valid(raw) {
				t.Fatalf("%s: invalid JSON %s", c.Name, raw)
			}
			got, err := decodeColumn(c, raw)
			if err != nil {
				t.Fatalf("%s: decode %s: %v", c.Name, raw, err)
			}
			if !sinktest.Equal(got, r[i]) {
				t.Errorf("%s: %s → %s, want %s", c.Name, raw, sinktest.Canon(got), sinktest.Canon(r[i]))
			}
		}
	}
	bad := &pipeline.Column{Name: "c", Type: pipeline.TypeString}
	for _, v := range []any{"\xff", struct{}{}, pipeline.JSON(`{`)} {
		if _, err := (conv{}).Stage(bad, v); err == nil {
			t.Errorf("%v staged", v)
		}
	}
}

func TestBadOptionsAreFatal(t *testing.T) {
	for _, o := range []Options{
		{},
		{Kind: "solr", URLs: []string{"http://x:1"}},
		{Kind: KindOpenSearch},
		{Kind: KindOpenSearch, URLs: []string{"x:1"}},
		{Kind: KindOpenSearch, URLs: []string{"http://x:1"}, APIKey: "k"},
		{Kind: KindOpenSearch, URLs: []string{"http://x:1"}, IndexTemplate: "{schema}.{tabel}"},
		{Kind: KindOpenSearch, URLs: []string{"http://x:1"}, Mappings: map[string]json.RawMessage{"s.t": json.RawMessage(`[1]`)}},
		{Kind: KindOpenSearch, URLs: []string{"http://x:1"}, Mappings: map[string]json.RawMessage{
			"s.t": json.RawMessage(`{"properties":{"_sluice_version":{"type":"long"}}}`)}},
		{Kind: KindOpenSearch, URLs: []string{"http://x:1"}, CAFile: "/nonexistent.pem"},
		{Kind: KindOpenSearch, URLs: []string{"http://x:1"}, BulkMaxBytes: 100},
		{Kind: KindOpenSearch, URLs: []string{"http://x:1"}, StateIndex: "Upper"},
		{Kind: KindOpenSearch, URLs: []string{"http://x:1"}, AliasSuffix: "#x"},
	} {
		if err := New(o, nil).Open(ctx); !pipeline.IsFatal(err) {
			t.Errorf("%+v: err = %v, want fatal", o, err)
		}
	}
}

func TestMappingsBody(t *testing.T) {
	ov, err := parseOverride(json.RawMessage(`{"dynamic":"strict","properties":{"b":{"type":"keyword"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	cols := []pipeline.Column{{Name: "a", Type: pipeline.TypeString}, {Name: "b", Type: pipeline.TypeInt64}}
	got := string(mappingsBody(properties(cols, []bool{true, false}, ov, true), ov))
	want := `{"properties":{` + metaProperties + `,"a":{"type":"keyword"},"b":{"type":"keyword"}},"dynamic":"strict"}`
	if got != want || !json.Valid([]byte(got)) {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}

// A JSON column with Fields (a join's embedded row) is an object whose
// members are mapped like columns; without Fields it stays unindexed; with
// empty Fields (members not known yet) the engine maps them dynamically.
func TestObjectMapping(t *testing.T) {
	members := []pipeline.Column{{Name: "since", Type: pipeline.TypeTimestampTZ}, {Name: "name", Type: pipeline.TypeString, Key: true}}
	for _, c := range []struct {
		col  pipeline.Column
		want string
	}{
		{pipeline.Column{Name: "customer", Type: pipeline.TypeJSON, Fields: members},
			`{"type":"object","properties":{"name":{"type":"text","fields":{"keyword":{"type":"keyword","ignore_above":256}}},"since":{"type":"date","ignore_malformed":true}}}`},
		{pipeline.Column{Name: "customer", Type: pipeline.TypeJSON, Fields: []pipeline.Column{}}, `{"type":"object","properties":{}}`},
		{pipeline.Column{Name: "doc", Type: pipeline.TypeJSON}, `{"type":"object","enabled":false}`},
	} {
		got := fieldMapping(&c.col, false, true)
		if got != c.want || !json.Valid([]byte(got)) {
			t.Errorf("%+v:\ngot  %s\nwant %s", c.col, got, c.want)
		}
	}
}

// cannedEngine answers every bulk request with one item status per
// document.
type cannedEngine struct{ statuses []int }

func (e *cannedEngine) do(context.Context, string, string, url.Values, []byte) (int, []byte, error) {
	return 200, []byte(`{}`), nil
}

func (e *cannedEngine) bulk(context.Context, []byte, bool) (int, []byte, error) {
	var items []string
	for _, st := range e.statuses {
		items = append(items, fmt.Sprintf(`{"index":{"status":%d,"error":{"type":"t%d","reason":"r"}}}`, st, st))
	}
	return 200, []byte(`{"errors":true,"items":[` + strings.Join(items, ",") + `]}`), nil
}

func (e *cannedEngine) close() {}

// Only a 400 (the engine refuses what the document holds) dead-letters a
// record (Invariant 7); every other failure is retried, so a permission
// change, a write block or an oversized request never loses good records.
func TestItemStatusClassification(t *testing.T) {
	statuses := []int{201, 409, 400, 401, 403, 404, 413, 429, 503}
	s := New(Options{Kind: KindOpenSearch, URLs: []string{"http://127.0.0.1:1"}}, nil)
	s.opts.setDefaults()
	s.eng = &cannedEngine{statuses: statuses}
	st := &indexState{name: "i"}
	c := &chunkReq{body: []byte("{}\n")}
	for i := range statuses {
		c.ops = append(c.ops, &op{st: st, id: strconv.Itoa(i)})
	}
	res := s.sendChunk(context.Background(), c)
	if res.err != nil {
		t.Fatal(res.err)
	}
	if len(res.permanent) != 1 || res.permanent[0].o.id != "2" {
		t.Fatalf("permanent failures %+v, want only the 400", res.permanent)
	}
	if res.transient == nil || len(res.missing) != 1 {
		t.Fatalf("transient %v, missing %v: want the other failures retried", res.transient, res.missing)
	}
}
