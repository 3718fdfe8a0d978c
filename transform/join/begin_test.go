package join

import (
	"context"
	"github.com/sluice-cdc/sluice/pipeline/binform"
	"math/big"
	"strings"
	"testing"

	"github.com/sluice-cdc/sluice/pipeline"
)

// load returns an initial load at version n as a source sends it: per
// table a truncate barrier, then the rows, all below every stream change.
func load(n uint64, custs map[int64]string, ords map[int64]int64) []pipeline.Record {
	barrier := func(t *pipeline.Table) pipeline.Record {
		r := rec(pipeline.OpTruncate, t, pipeline.Version{0, n, 0, 0}, nil, nil)
		r.Snapshot = true
		return r
	}
	// The looked-up table first: its barrier then clears what an earlier
	// attempt left and re-sends the rows that refer to it.
	out := []pipeline.Record{barrier(customers)}
	for id, name := range custs {
		out = append(out, rec(pipeline.OpRead, customers, ver(n), nil, customer(id, name)))
	}
	out = append(out, barrier(orders))
	for id, c := range ords {
		out = append(out, rec(pipeline.OpRead, orders, ver(n), nil, order(id, c, "o")))
	}
	for i := range out {
		out[i].Snapshot = true
	}
	return out
}

// An initial load interrupted by a crash before the first checkpoint is
// redone from a new snapshot, after an order was deleted and a customer
// renamed in between. The runtime starts the join's state over (no
// checkpoint: Begin(false)), so the deleted order does not live on in the
// outputs and the reloaded orders are not dropped as stale.
func TestInterruptedLoadRedone(t *testing.T) {
	dir := t.TempDir()
	j := open(t, dir)
	sink := &modelSink{rows: map[int64]modelRow{}}
	sink.write(t, process(t, j, load(1, map[int64]string{1: "Ada", 2: "Bob"}, map[int64]int64{10: 1, 11: 2, 12: 2})...))
	if len(sink.rows) != 3 {
		t.Fatalf("first load: %d joined rows", len(sink.rows))
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}

	j = open(t, dir) // no checkpoint was committed
	defer j.Close()
	sink.write(t, process(t, j, load(5, map[int64]string{1: "Ada", 2: "Bobby"}, map[int64]int64{11: 2, 12: 1})...))
	live := map[int64]string{}
	for id, row := range sink.rows {
		if !row.deleted {
			live[id] = string(row.img[3].(pipeline.JSON))
		}
	}
	if len(live) != 2 || !strings.Contains(live[11], `"Bobby"`) || !strings.Contains(live[12], `"Ada"`) {
		t.Fatalf("after the redone load the sink holds %v; want orders 11 (Bobby) and 12 (Ada) only", live)
	}
}

// Resuming from a checkpoint needs state built for this definition from
// the pipeline's start: none at all (a join added to a running pipeline),
// or one built for other lookups or columns, is refused with the way to
// rebuild; the same state and definition resume.
func TestBeginRefusesStateThatCannotCoverTheCheckpoint(t *testing.T) {
	dir := t.TempDir()
	j, err := Open(Options{Output: orderDocs.Output, From: orderDocs.From, With: orderDocs.With, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	err = j.Begin(context.Background(), true)
	if err == nil || !strings.Contains(err.Error(), "join public.order_docs: no state in") || !strings.Contains(err.Error(), "--reset-offsets") {
		t.Fatalf("new state resuming a checkpoint: %v", err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}

	j = open(t, dir)
	process(t, j, rec(pipeline.OpInsert, customers, ver(1), nil, customer(1, "Ada")))
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	j = reopen(t, dir) // same definition: resumes
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}

	changed := orderDocs
	changed.With = []Lookup{{Table: "public.customers", On: []string{"customer_id"}, As: "customer", Columns: []string{"name"}}}
	changed.Dir = dir
	j, err = Open(changed)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	err = j.Begin(context.Background(), true)
	if err == nil || !strings.Contains(err.Error(), "definition changed") || !strings.Contains(err.Error(), `"columns":["name","since"]`) {
		t.Fatalf("changed columns resuming a checkpoint: %v", err)
	}
	// Without a checkpoint the same change simply starts over.
	if err := j.Begin(context.Background(), false); err != nil {
		t.Fatal(err)
	}
}

// Keys SQL finds equal match whatever the numeric types of the two
// columns: a numeric(10,2) foreign key 5.00 finds the bigint key 5, an
// unsigned one finds a signed one.
func TestNumericKeysMatchAcrossTypes(t *testing.T) {
	fives := []any{
		pipeline.Decimal{Unscaled: big.NewInt(500), Scale: 2},
		pipeline.Decimal{Unscaled: big.NewInt(5), Scale: 0},
		uint64(5),
		int64(5),
	}
	var want []byte
	for _, v := range fives {
		b, err := binform.AppendKey(nil, v)
		if err != nil {
			t.Fatal(err)
		}
		if want == nil {
			want = b
		} else if string(b) != string(want) {
			t.Fatalf("%#v encodes as %x, 5 as %x", v, b, want)
		}
	}
	for _, pair := range [][2]any{
		{pipeline.Decimal{Unscaled: big.NewInt(510), Scale: 2}, pipeline.Decimal{Unscaled: big.NewInt(51), Scale: 1}},
		{pipeline.Decimal{Unscaled: big.NewInt(0), Scale: 3}, int64(0)},
		{pipeline.Decimal{Unscaled: new(big.Int).SetUint64(1 << 63), Scale: 0}, uint64(1 << 63)},
	} {
		a, _ := binform.AppendKey(nil, pair[0])
		b, _ := binform.AppendKey(nil, pair[1])
		if string(a) != string(b) {
			t.Fatalf("%v and %v encode differently", pair[0], pair[1])
		}
	}
	for _, pair := range [][2]any{
		{pipeline.Decimal{Unscaled: big.NewInt(51), Scale: 1}, int64(5)},
		{"5", int64(5)},
	} {
		a, _ := binform.AppendKey(nil, pair[0])
		b, _ := binform.AppendKey(nil, pair[1])
		if string(a) == string(b) {
			t.Fatalf("%v and %v encode alike", pair[0], pair[1])
		}
	}

	// End to end: an order whose customer_id is a decimal joins.
	dec := &pipeline.Table{ID: orders.ID, Columns: []pipeline.Column{orders.Columns[0],
		{Name: "customer_id", Type: pipeline.TypeDecimal, Precision: 10, Scale: 2, Nullable: true}, orders.Columns[2]},
		KeyIdx: []int{0}}
	j := open(t, t.TempDir())
	defer j.Close()
	js := joined(process(t, j,
		rec(pipeline.OpInsert, customers, ver(1), nil, customer(5, "Eve")),
		rec(pipeline.OpInsert, dec, ver(2), nil, []any{int64(1), fives[0], "n"})))
	if len(js) != 1 || nested(t, js[0])["name"] != "Eve" {
		t.Fatalf("decimal foreign key: %+v", js)
	}
}

// A new shape of a looked-up table that changes the embedded columns (a
// column added with a default) writes every referring row again, with the
// column's value for the rows stored before it existed; a new shape that
// embeds the same columns (a column outside columns, a restart) does not.
func TestLookupShapeChangeRewritesReferrers(t *testing.T) {
	o := Options{Output: "public.order_docs", From: "public.orders",
		With: []Lookup{{Table: "public.customers", On: []string{"customer_id"}, As: "customer"}}}
	dir := t.TempDir()
	j := openRun(t, o, dir, false)
	process(t, j,
		rec(pipeline.OpInsert, customers, ver(1), nil, customer(1, "Ada")),
		rec(pipeline.OpInsert, customers, ver(1), nil, customer(2, "Bob")),
		rec(pipeline.OpInsert, orders, ver(2), nil, order(10, 1, "a")),
		rec(pipeline.OpInsert, orders, ver(2), nil, order(11, 2, "b")),
		rec(pipeline.OpInsert, orders, ver(2), nil, order(12, 0, "no customer")))
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	// A restart: the same shape again (a new pointer) re-sends nothing.
	j = openRun(t, o, dir, true)
	defer j.Close()
	same := *customers
	if js := joined(process(t, j, rec(pipeline.OpInsert, &same, ver(3), nil, customer(3, "Cy")))); len(js) != 0 {
		t.Fatalf("same shape after restart: %+v", js)
	}
	wider := *customers
	wider.Columns = append(append([]pipeline.Column{}, customers.Columns...),
		pipeline.Column{Name: "tier", Type: pipeline.TypeString, Nullable: true, Missing: "basic"})
	wider.Generation = 2
	js := joined(process(t, j, rec(pipeline.OpUpdate, &wider, ver(4), nil, append(customer(1, "Ada L."), "gold"))))
	tiers := map[int64]any{}
	for _, r := range js {
		tiers[r.After[0].(int64)] = nested(t, r)["tier"]
	}
	if len(js) != 2 || tiers[10] != "gold" || tiers[11] != "basic" {
		t.Fatalf("after the added column: %d outputs, tiers %v", len(js), tiers)
	}
}

// A batch without a record of a joined table passes through as it is.
func TestUnrelatedBatchPassesThrough(t *testing.T) {
	j := open(t, t.TempDir())
	defer j.Close()
	in := []pipeline.Record{rec(pipeline.OpInsert, other, ver(1), nil, []any{int64(1)}), {Op: pipeline.OpHeartbeat}}
	out := process(t, j, in...)
	if len(out) != len(in) || &out[0] != &in[0] {
		t.Fatalf("unrelated batch: %+v", out)
	}
}
