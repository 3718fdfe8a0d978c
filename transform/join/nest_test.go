package join

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/transform/state"
)

var items = &pipeline.Table{ID: pipeline.TableID{Database: "shop", Schema: "public", Table: "items"},
	Columns: []pipeline.Column{
		{Name: "id", Type: pipeline.TypeInt64, Key: true},
		{Name: "order_id", Type: pipeline.TypeInt64, Nullable: true},
		{Name: "line", Type: pipeline.TypeInt64, Nullable: true},
		{Name: "sku", Type: pipeline.TypeString, Nullable: true},
	}, KeyIdx: []int{0}, Generation: 1}

// item is an items row; line 0 stands for NULL.
func item(id, ord, line int64, sku string) []any {
	var o, l any = ord, line
	if ord == 0 {
		o = nil
	}
	if line == 0 {
		l = nil
	}
	return []any{id, o, l, sku}
}

var orderNest = Options{Output: "public.order_docs", From: "public.orders",
	With: []Lookup{{Table: "public.customers", On: []string{"customer_id"}, As: "customer", Columns: []string{"name"}}},
	Children: []Child{{Table: "public.items", On: []string{"order_id"}, As: "items", OrderBy: []string{"line"},
		Columns: []string{"id", "sku"}, MaxSetting: "transforms[0].nest.children[0].max_children"}}}

// doc is an output row as the test reads it: the order's columns, its
// customer's name and its items' skus in array order.
type doc struct {
	op       pipeline.Op
	v        pipeline.Version
	id       int64
	note     any
	customer any
	skus     []string
}

func docs(t *testing.T, out []pipeline.Record) []doc {
	t.Helper()
	var ds []doc
	for _, r := range joined(out) {
		if r.Op == pipeline.OpTruncate {
			ds = append(ds, doc{op: r.Op, v: r.Version})
			continue
		}
		if r.Op == pipeline.OpDelete {
			ds = append(ds, doc{op: r.Op, v: r.Version, id: r.Before[0].(int64)})
			continue
		}
		d := doc{op: r.Op, v: r.Version, id: r.After[0].(int64), note: r.After[2]}
		if c := r.After[3]; c != nil {
			var m map[string]any
			if err := json.Unmarshal([]byte(c.(pipeline.JSON)), &m); err != nil {
				t.Fatal(err)
			}
			d.customer = m["name"]
		}
		var arr []map[string]any
		if err := json.Unmarshal([]byte(r.After[4].(pipeline.JSON)), &arr); err != nil {
			t.Fatalf("items %v: %v", r.After[4], err)
		}
		d.skus = []string{}
		for _, m := range arr {
			if len(m) != 2 {
				t.Fatalf("item members %v, want id and sku", m)
			}
			d.skus = append(d.skus, m["sku"].(string))
		}
		ds = append(ds, d)
	}
	return ds
}

// lastOf returns the last output for order id, failing when there is none.
func lastOf(t *testing.T, ds []doc, id int64) doc {
	t.Helper()
	for i := len(ds) - 1; i >= 0; i-- {
		if ds[i].id == id {
			return ds[i]
		}
	}
	t.Fatalf("no output for order %d in %+v", id, ds)
	return doc{}
}

func ids(ds []doc) []int64 {
	var out []int64
	for _, d := range ds {
		out = append(out, d.id)
	}
	slices.Sort(out)
	return out
}

func TestNestEmbedsChildrenInOrder(t *testing.T) {
	j := openRun(t, orderNest, t.TempDir(), false)
	defer j.Close()
	ds := docs(t, process(t, j,
		rec(pipeline.OpInsert, customers, ver(1), nil, customer(1, "Ada")),
		rec(pipeline.OpInsert, orders, ver(2), nil, order(10, 1, "n")),
		rec(pipeline.OpInsert, items, ver(3), nil, item(100, 10, 2, "b")),
		rec(pipeline.OpInsert, items, ver(3), nil, item(101, 10, 1, "a")),
		rec(pipeline.OpInsert, items, ver(3), nil, item(102, 10, 0, "z")),
		rec(pipeline.OpInsert, items, ver(4), nil, item(103, 99, 1, "c")),
	))
	if len(ds) != 4 {
		t.Fatalf("want the order and one output per item of it (none for order 99's, unknown yet), got %+v", ds)
	}
	if d := lastOf(t, ds, 10); !reflect.DeepEqual(d.skus, []string{"a", "b", "z"}) || d.customer != "Ada" || d.op != pipeline.OpUpdate {
		t.Fatalf("order 10: %+v (by line, NULL last)", d)
	}
	for i := 1; i < len(ds); i++ {
		if !ds[i-1].v.Less(ds[i].v) {
			t.Fatalf("versions do not grow: %v then %v (three items share one)", ds[i-1].v, ds[i].v)
		}
	}
	ds = docs(t, process(t, j, rec(pipeline.OpInsert, orders, ver(5), nil, order(99, 0, "m"))))
	if len(ds) != 1 || !reflect.DeepEqual(ds[0].skus, []string{"c"}) || ds[0].op != pipeline.OpInsert {
		t.Fatalf("an order inserted after its item: %+v", ds)
	}
	ds = docs(t, process(t, j, rec(pipeline.OpUpdate, items, ver(6), nil, item(100, 10, -1, "b"))))
	if len(ds) != 1 || !reflect.DeepEqual(ds[0].skus, []string{"b", "a", "z"}) || ds[0].v != ver(6) {
		t.Fatalf("an item's line changed: %+v", ds)
	}
	// Moved to order 99 with its sku unchanged (TOAST): both orders change.
	ds = docs(t, process(t, j, rec(pipeline.OpUpdate, items, ver(7), nil, []any{int64(101), int64(99), int64(0), pipeline.UnchangedValue})))
	if got := ids(ds); !reflect.DeepEqual(got, []int64{10, 99}) {
		t.Fatalf("a moved item emits both orders, got %v", got)
	}
	if a, b := lastOf(t, ds, 10), lastOf(t, ds, 99); !reflect.DeepEqual(a.skus, []string{"b", "z"}) || !reflect.DeepEqual(b.skus, []string{"a", "c"}) {
		t.Fatalf("after the move: 10 %v, 99 %v", a.skus, b.skus)
	}
	ds = docs(t, process(t, j, rec(pipeline.OpDelete, items, ver(8), item(102, 0, 0, ""), nil)))
	if len(ds) != 1 || !reflect.DeepEqual(ds[0].skus, []string{"b"}) {
		t.Fatalf("a deleted item (key-only before image): %+v", ds)
	}
	ds = docs(t, process(t, j, rec(pipeline.OpUpdate, customers, ver(9), nil, customer(1, "Ada L."))))
	if len(ds) != 1 || ds[0].customer != "Ada L." || !reflect.DeepEqual(ds[0].skus, []string{"b"}) {
		t.Fatalf("a renamed customer reaches its order with the items kept: %+v", ds)
	}
	ds = docs(t, process(t, j, rec(pipeline.OpDelete, orders, ver(10), order(10, 0, ""), nil)))
	if len(ds) != 1 || ds[0].op != pipeline.OpDelete {
		t.Fatalf("order delete: %+v", ds)
	}
	if ds := docs(t, process(t, j, rec(pipeline.OpUpdate, items, ver(11), nil, item(100, 10, 5, "x")))); len(ds) != 0 {
		t.Fatalf("an item of a deleted order emits nothing: %+v", ds)
	}
	// The item's key changes: it leaves order 10 (deleted) and joins 99.
	ds = docs(t, process(t, j, rec(pipeline.OpUpdate, items, ver(12), item(100, 10, 5, "x"), item(200, 99, 3, "x"))))
	if len(ds) != 1 || !reflect.DeepEqual(ds[0].skus, []string{"a", "c", "x"}) {
		t.Fatalf("an item whose key changed: %+v", ds)
	}
}

// The state ran ahead of the checkpoint and the outputs of two moves never
// reached the sinks: the replay of the first move finds, besides the
// item's current order, both orders the moves took it from (N1).
func TestNestReplayFindsTheOrdersAMoveLeft(t *testing.T) {
	dir := t.TempDir()
	j := openRun(t, orderNest, dir, false)
	process(t, j,
		rec(pipeline.OpInsert, orders, ver(1), nil, order(1, 0, "")),
		rec(pipeline.OpInsert, orders, ver(1), nil, order(2, 0, "")),
		rec(pipeline.OpInsert, orders, ver(1), nil, order(3, 0, "")),
		rec(pipeline.OpInsert, items, ver(2), nil, item(7, 1, 1, "s")),
	)
	j.Checkpointed(1)
	move2 := rec(pipeline.OpUpdate, items, ver(10), nil, item(7, 2, 1, "s"))
	move3 := rec(pipeline.OpUpdate, items, ver(11), nil, item(7, 3, 1, "s"))
	process(t, j, move2)
	process(t, j, move3)
	// Crash: none of the two batches' outputs was written.
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	j = openRun(t, orderNest, dir, true)
	defer j.Close()
	ds := docs(t, process(t, j, move2))
	if got := ids(ds); !reflect.DeepEqual(got, []int64{1, 2, 3}) {
		t.Fatalf("the replayed first move emits orders %v, want 1, 2 and 3", got)
	}
	want := map[int64][]string{1: {}, 2: {}, 3: {"s"}}
	for id, skus := range want {
		if d := lastOf(t, ds, id); !reflect.DeepEqual(d.skus, skus) {
			t.Fatalf("order %d: %v, want %v", id, d.skus, skus)
		}
	}
	if got := ids(docs(t, process(t, j, move3))); !reflect.DeepEqual(got, []int64{2, 3}) {
		t.Fatalf("the replayed second move emits orders %v, want 2 and 3", got)
	}
}

// The same state ran ahead on one server and the run resumes on another
// (a generation up, other positions): the replay re-applies the moves,
// the state's parent being where the item went. The orders the lost moves
// left are still emitted, from the moves of the earlier generation, and a
// checkpoint in the middle of the replay keeps those its rest needs (by
// position: every earlier-generation move sorts below the new floor).
func TestNestFailoverReplayFindsTheOrdersAMoveLeft(t *testing.T) {
	dir := t.TempDir()
	o := orderNest
	o.Covers = func(pos, mark pipeline.Position) bool { return positionN(pos) <= positionN(mark) }
	at := func(r pipeline.Record, gen, n uint64) pipeline.Record {
		r.Version = pipeline.Version{gen, n + 1000*gen, 0, 1}
		r.Pos, r.TxID = pipeline.Position(fmt.Sprintf(`{"N":%d}`, n)), n
		return r
	}
	j := openRun(t, o, dir, false)
	process(t, j,
		at(rec(pipeline.OpInsert, orders, ver(1), nil, order(1, 0, "")), 0, 1),
		at(rec(pipeline.OpInsert, orders, ver(1), nil, order(2, 0, "")), 0, 2),
		at(rec(pipeline.OpInsert, orders, ver(1), nil, order(3, 0, "")), 0, 3),
		at(rec(pipeline.OpInsert, items, ver(1), nil, item(7, 1, 1, "s")), 0, 4),
	)
	j.Checkpointed(1)
	other := at(rec(pipeline.OpUpdate, orders, ver(1), nil, order(3, 0, "x")), 0, 10)
	move2 := at(rec(pipeline.OpUpdate, items, ver(1), nil, item(7, 2, 1, "s")), 0, 11)
	move3 := at(rec(pipeline.OpUpdate, items, ver(1), nil, item(7, 3, 1, "s")), 0, 12)
	process(t, j, other)
	process(t, j, move2)
	process(t, j, move3)
	// Crash: no output after the checkpoint was written. The run resumes
	// on another server at generation 1.
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	j = openRun(t, o, dir, true)
	defer j.Close()
	again := func(r pipeline.Record) pipeline.Record { return at(r, 1, uint64(positionN(r.Pos))) }
	process(t, j, again(other))
	process(t, j, again(other)) // a second batch
	j.Checkpointed(1)           // covers the first: the floor is at position 10, in generation 1
	process(t, j, again(other)) // a batch that prunes below the floor
	ds := docs(t, process(t, j, again(move2)))
	if got := ids(ds); !slices.Contains(got, 1) {
		t.Fatalf("the replayed move emits orders %v: not order 1, which it left", got)
	}
	if d := lastOf(t, ds, 1); len(d.skus) != 0 {
		t.Fatalf("order 1: %v, want no items", d.skus)
	}
}

// Moves below the replay floor are pruned; those a replay may need stay.
func TestNestPrunesMovesBelowTheFloor(t *testing.T) {
	dir := t.TempDir()
	j := openRun(t, orderNest, dir, false)
	defer j.Close()
	process(t, j, rec(pipeline.OpInsert, orders, ver(1), nil, order(1, 0, "")), rec(pipeline.OpInsert, orders, ver(1), nil, order(2, 0, "")),
		rec(pipeline.OpInsert, items, ver(1), nil, item(7, 1, 1, "s")))
	for n := uint64(2); n < 12; n++ { // batches 2..11: the item moves back and forth
		process(t, j, rec(pipeline.OpUpdate, items, ver(n), nil, item(7, int64(1+n%2), 1, "s")))
	}
	moves := func() int {
		var n int
		if err := j.st.View(time.Time{}, func(tx *state.Tx) error {
			s, err := newState(tx)
			n = s.moveOrder.Len()
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if got := moves(); got != 9 {
		t.Fatalf("%d moves recorded, want 9 (versions 3..11; batch 2 left it where it was)", got)
	}
	j.Checkpointed(6)                                                           // batches 1..6 covered: the floor is batch 6's version, ver(6)
	process(t, j, rec(pipeline.OpInsert, other, ver(12), nil, []any{int64(1)})) // an unrelated batch prunes nothing
	process(t, j, rec(pipeline.OpInsert, orders, ver(12), nil, order(3, 0, "")))
	if got := moves(); got != 6 {
		t.Fatalf("%d moves left, want the 6 at versions 6..11", got)
	}
}

func TestNestBoundsTheArray(t *testing.T) {
	for _, policy := range []Overflow{OverflowTruncate, OverflowFail} {
		o := orderNest
		o.Children = slices.Clone(o.Children)
		o.Children[0].Max, o.Children[0].Overflow = 2, policy
		overflowed := 0
		o.Overflowed = func(n int) { overflowed += n }
		j := openRun(t, o, t.TempDir(), false)
		in := []pipeline.Record{rec(pipeline.OpInsert, orders, ver(1), nil, order(1, 0, ""))}
		for i, sku := range []string{"c", "a", "b"} {
			in = append(in, rec(pipeline.OpInsert, items, ver(2), nil, item(int64(10+i), 1, int64(3-i), sku)))
		}
		out, err := j.Process(context.Background(), in)
		_ = j.Close()
		if policy == OverflowFail {
			if err == nil || !strings.Contains(err.Error(), "has 3 rows of public.items in items, more than 2: raise transforms[0].nest.children[0].max_children") {
				t.Fatalf("fail policy: %v", err)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if d := lastOf(t, docs(t, out), 1); !reflect.DeepEqual(d.skus, []string{"b", "a"}) || overflowed != 1 {
			t.Fatalf("truncate policy: %v (want the first two by line), counted %d", d.skus, overflowed)
		}
	}
}

// A truncate of the child table empties every order's array; replayed
// after a crash, when the items it cleared are no longer known, it
// writes every live order again.
func TestNestChildTruncate(t *testing.T) {
	dir := t.TempDir()
	j := openRun(t, orderNest, dir, false)
	process(t, j,
		rec(pipeline.OpInsert, orders, ver(1), nil, order(1, 0, "")),
		rec(pipeline.OpInsert, orders, ver(1), nil, order(2, 0, "")),
		rec(pipeline.OpInsert, orders, ver(1), nil, order(3, 0, "")),
		rec(pipeline.OpInsert, items, ver(2), nil, item(7, 1, 1, "s")),
		rec(pipeline.OpInsert, items, ver(2), nil, item(8, 2, 1, "t")),
	)
	tr := rec(pipeline.OpTruncate, items, ver(3), nil, nil)
	ds := docs(t, process(t, j, tr))
	if got := ids(ds); !reflect.DeepEqual(got, []int64{1, 2}) || len(ds[0].skus)+len(ds[1].skus) != 0 {
		t.Fatalf("truncate emits the orders that had items, emptied: %+v", ds)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	j = openRun(t, orderNest, dir, true)
	defer j.Close()
	if got := ids(docs(t, process(t, j, tr))); !reflect.DeepEqual(got, []int64{1, 2, 3}) {
		t.Fatalf("a replayed truncate emits every live order, got %v", got)
	}
	if ds := docs(t, process(t, j, rec(pipeline.OpInsert, items, ver(2), nil, item(9, 1, 1, "old")))); len(ds) != 0 {
		t.Fatalf("an item older than the truncate is not nested and changes nothing: %+v", ds)
	}
}

func TestNestShapeErrors(t *testing.T) {
	o := orderNest
	o.Children = []Child{{Table: "public.items", On: []string{"order_id"}, As: "items", OrderBy: []string{"position"}}}
	j := openRun(t, o, t.TempDir(), false)
	defer j.Close()
	_, err := j.Process(context.Background(), []pipeline.Record{rec(pipeline.OpInsert, items, ver(1), nil, item(1, 1, 1, "s"))})
	if err == nil || !strings.Contains(err.Error(), `children items: public.items has no column "position" (listed in order_by)`) {
		t.Fatalf("got %v", err)
	}
}

// A random change log of customers, orders and items (moves, key
// changes, deletes, truncates of the items) applied in random batches,
// with crashes that restart from an earlier checkpoint while the state
// ran ahead, and the replay floor following the checkpoints: the sink
// ends equal to the nested documents of the final tables.
func TestNestReplayAfterCrashesConverges(t *testing.T) {
	for _, failover := range []bool{false, true} {
		for seed := range uint64(seeds(30)) {
			t.Run(fmt.Sprint(variant(failover), "seed", seed), func(t *testing.T) { nestConverges(t, seed, failover) })
		}
	}
}

func nestConverges(t *testing.T, seed uint64, failover bool) {
	rng := rand.New(rand.NewPCG(seed, 11))
	custs := map[int64]string{}
	ords := map[int64][]any{}
	its := map[int64][]any{}
	var log []pipeline.Record
	for id := int64(1); id <= 4; id++ {
		custs[id] = fmt.Sprint("c", id)
		log = append(log, rec(pipeline.OpRead, customers, ver(1), nil, customer(id, custs[id])))
	}
	for id := int64(1); id <= 6; id++ {
		ords[id] = order(id, 1+rng.Int64N(5), "o")
		log = append(log, rec(pipeline.OpRead, orders, ver(1), nil, ords[id]))
	}
	for id := int64(1); id <= 12; id++ {
		its[id] = item(id, 1+rng.Int64N(7), rng.Int64N(4), fmt.Sprint("i", id))
		log = append(log, rec(pipeline.OpRead, items, ver(1), nil, its[id]))
	}
	rng.Shuffle(len(log), func(a, b int) { log[a], log[b] = log[b], log[a] })
	for n := uint64(2); n < 160; n++ {
		v := ver(n)
		switch x := rng.IntN(20); {
		case x < 2:
			id := 1 + rng.Int64N(5)
			custs[id] = fmt.Sprint("c", id, "@", n)
			log = append(log, rec(pipeline.OpUpdate, customers, v, nil, customer(id, custs[id])))
		case x < 5:
			id := 1 + rng.Int64N(8)
			ords[id] = order(id, rng.Int64N(6), fmt.Sprint("o@", n))
			log = append(log, rec(pipeline.OpUpdate, orders, v, nil, ords[id]))
		case x < 6:
			id := 1 + rng.Int64N(8)
			if _, ok := ords[id]; ok {
				delete(ords, id)
				log = append(log, rec(pipeline.OpDelete, orders, v, order(id, 0, ""), nil))
			}
		case x < 14: // an item inserted, updated or moved
			id := 1 + rng.Int64N(16)
			its[id] = item(id, rng.Int64N(9), rng.Int64N(4), fmt.Sprint("i", id, "@", n))
			log = append(log, rec(pipeline.OpUpdate, items, v, nil, its[id]))
		case x < 16:
			id := 1 + rng.Int64N(16)
			if _, ok := its[id]; ok {
				delete(its, id)
				log = append(log, rec(pipeline.OpDelete, items, v, item(id, 0, 0, ""), nil))
			}
		case x < 18: // an item's key changes
			from, to := 1+rng.Int64N(16), 17+rng.Int64N(8)
			if img, ok := its[from]; ok {
				if _, taken := its[to]; !taken {
					delete(its, from)
					its[to] = item(to, rng.Int64N(9), rng.Int64N(4), fmt.Sprint("k", to, "@", n))
					log = append(log, rec(pipeline.OpUpdate, items, v, img, its[to]))
				}
			}
		default:
			if rng.IntN(5) == 0 {
				clear(its)
				log = append(log, rec(pipeline.OpTruncate, items, v, nil, nil))
			}
		}
	}
	sink := &modelSink{rows: map[int64]modelRow{}}
	j := runWithCrashes(t, rng, orderNest, log, sink, failover)
	defer j.Close()
	for id, img := range ords {
		row, ok := sink.rows[id]
		if !ok || row.deleted {
			t.Fatalf("order %d missing from the sink", id)
		}
		if !reflect.DeepEqual(row.img[:3], img) {
			t.Fatalf("order %d: sink has %v, source %v", id, row.img[:3], img)
		}
		var want []string
		var mine [][]any
		for _, it := range its {
			if it[1] == img[0] {
				mine = append(mine, it)
			}
		}
		slices.SortFunc(mine, func(a, b []any) int {
			la, lb := a[2], b[2]
			switch {
			case la == nil && lb != nil:
				return 1
			case la != nil && lb == nil:
				return -1
			case la != nil && la.(int64) != lb.(int64):
				return int(la.(int64) - lb.(int64))
			}
			return int(a[0].(int64) - b[0].(int64))
		})
		want = []string{}
		for _, it := range mine {
			want = append(want, it[3].(string))
		}
		got := docs(t, []pipeline.Record{{Op: pipeline.OpUpdate, Table: &pipeline.Table{ID: pipeline.TableID{Table: "order_docs"}}, After: row.img}})[0].skus
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("order %d: items %v in the sink, %v in the source", id, got, want)
		}
	}
	for id, row := range sink.rows {
		if _, ok := ords[id]; !ok && !row.deleted {
			t.Fatalf("order %d is gone from the source but live in the sink", id)
		}
	}
}

// A column added to the child table (with a default the rows already
// written hold) rewrites every document with children, the old rows with
// the default.
func TestNestChildShapeChangeRewritesDocuments(t *testing.T) {
	o := orderNest
	o.With = nil
	o.Children = []Child{{Table: "public.items", On: []string{"order_id"}, As: "items", OrderBy: []string{"line"}}}
	j := openRun(t, o, t.TempDir(), false)
	defer j.Close()
	process(t, j,
		rec(pipeline.OpInsert, orders, ver(1), nil, order(1, 0, "")),
		rec(pipeline.OpInsert, orders, ver(1), nil, order(2, 0, "")),
		rec(pipeline.OpInsert, items, ver(2), nil, item(7, 1, 1, "s")),
		rec(pipeline.OpInsert, items, ver(2), nil, item(8, 2, 1, "t")),
	)
	wider := *items
	wider.Columns = append(slices.Clone(items.Columns), pipeline.Column{Name: "qty", Type: pipeline.TypeInt64, Nullable: true, Missing: int64(5)})
	wider.Generation = 2
	out := joined(process(t, j, rec(pipeline.OpInsert, &wider, ver(3), nil, append(item(9, 1, 2, "u"), int64(1)))))
	got := map[int64]string{}
	for _, r := range out {
		got[r.After[0].(int64)] = string(r.After[3].(pipeline.JSON))
	}
	want := map[int64]string{
		1: `[{"id":7,"order_id":1,"line":1,"sku":"s","qty":5},{"id":9,"order_id":1,"line":2,"sku":"u","qty":1}]`,
		2: `[{"id":8,"order_id":2,"line":1,"sku":"t","qty":5}]`,
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("documents after the column was added:\n%v\nwant\n%v", got, want)
	}
}

// shapeChangeAhead opens a nest of orders and their items, with two
// orders of one item each through a checkpoint, and returns it with the
// change that brings the items' new shape (a column qty, 5 where a row
// lacks it): an item added to order 1 at ver(3).
func shapeChangeAhead(t *testing.T) (o Options, dir string, j *Join, wider *pipeline.Table, change pipeline.Record) {
	t.Helper()
	o = orderNest
	o.With = nil
	o.Children = []Child{{Table: "public.items", On: []string{"order_id"}, As: "items", OrderBy: []string{"line"}}}
	dir = t.TempDir()
	j = openRun(t, o, dir, false)
	process(t, j,
		rec(pipeline.OpInsert, orders, ver(1), nil, order(1, 0, "")),
		rec(pipeline.OpInsert, orders, ver(1), nil, order(2, 0, "")),
		rec(pipeline.OpInsert, items, ver(2), nil, item(7, 1, 1, "s")),
		rec(pipeline.OpInsert, items, ver(2), nil, item(8, 2, 1, "t")),
	)
	j.Checkpointed(1)
	w := *items
	w.Columns = append(slices.Clone(items.Columns), pipeline.Column{Name: "qty", Type: pipeline.TypeInt64, Nullable: true, Missing: int64(5)})
	w.Generation = 2
	return o, dir, j, &w, rec(pipeline.OpInsert, &w, ver(3), nil, append(item(9, 1, 2, "u"), int64(1)))
}

// N2: the documents a new child shape rewrote are lost in a crash; the
// resumed run, whose state knows the shape already, rewrites them again
// when the replay meets the change that brought it, and not after the
// floor has passed it.
func TestNestReplayedShapeChangeRewritesAgain(t *testing.T) {
	o, dir, j, wider, change := shapeChangeAhead(t)
	if out := joined(process(t, j, change)); len(out) != 2 {
		t.Fatalf("%d documents rewritten, want both orders'", len(out))
	}
	if err := j.Close(); err != nil { // its outputs never reached a sink
		t.Fatal(err)
	}
	j = openRun(t, o, dir, true)
	defer j.Close()
	out := joined(process(t, j, change))
	got := map[int64]string{}
	for _, r := range out {
		got[r.After[0].(int64)] = string(r.After[3].(pipeline.JSON))
	}
	want := map[int64]string{
		1: `[{"id":7,"order_id":1,"line":1,"sku":"s","qty":5},{"id":9,"order_id":1,"line":2,"sku":"u","qty":1}]`,
		2: `[{"id":8,"order_id":2,"line":1,"sku":"t","qty":5}]`,
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("the replay rewrote\n%v\nwant\n%v", got, want)
	}
	// Once: the next change of the table rewrites its own document only.
	if out := joined(process(t, j, rec(pipeline.OpInsert, wider, ver(4), nil, append(item(10, 2, 2, "v"), int64(2))))); len(out) != 1 {
		t.Fatalf("%d documents after the rewrite was done again, want 1", len(out))
	}
	// The floor passes it: a later resumed run does not rewrite again.
	j.Checkpointed(2)
	process(t, j, rec(pipeline.OpInsert, wider, ver(5), nil, append(item(11, 2, 3, "w"), int64(3))))
	if len(j.refresh.recorded) != 0 {
		t.Fatalf("recorded rewrites below the floor are kept: %v", j.refresh.recorded)
	}
}

// N2 across a failover: the replay comes from another server, a
// generation up, and a checkpoint of that run passes every version of the
// first one before the replay reaches the shape change; the rewrite is
// still done again when it does.
func TestNestReplayedShapeChangeRewritesAgainOnAnotherServer(t *testing.T) {
	o, dir, j, _, change := shapeChangeAhead(t)
	process(t, j, rec(pipeline.OpUpdate, orders, ver(3), nil, order(2, 0, "x")))
	if out := joined(process(t, j, change)); len(out) != 2 {
		t.Fatalf("%d documents rewritten, want both orders'", len(out))
	}
	if err := j.Close(); err != nil { // its outputs never reached a sink
		t.Fatal(err)
	}
	j = openRun(t, o, dir, true)
	defer j.Close()
	up := func(r pipeline.Record, n uint64) pipeline.Record {
		r.Version = pipeline.Version{1, 1000 + n, 0, 1}
		return r
	}
	process(t, j, up(rec(pipeline.OpUpdate, orders, ver(3), nil, order(2, 0, "x")), 3))
	process(t, j, up(rec(pipeline.OpUpdate, orders, ver(3), nil, order(2, 0, "x")), 3))
	j.Checkpointed(1) // the floor: generation 1, above every version of the first run
	process(t, j, up(rec(pipeline.OpUpdate, orders, ver(3), nil, order(2, 0, "x")), 3))
	got := map[int64]string{}
	for _, r := range joined(process(t, j, up(change, 4))) {
		got[r.After[0].(int64)] = string(r.After[3].(pipeline.JSON))
	}
	want := map[int64]string{
		1: `[{"id":7,"order_id":1,"line":1,"sku":"s","qty":5},{"id":9,"order_id":1,"line":2,"sku":"u","qty":1}]`,
		2: `[{"id":8,"order_id":2,"line":1,"sku":"t","qty":5}]`,
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("the replay rewrote\n%v\nwant\n%v", got, want)
	}
}

// N2: a resumed run whose replay starts after the change that brought a
// new shape does not rewrite every document again.
func TestNestShapeChangeBeforeTheReplayIsNotRedone(t *testing.T) {
	o := orderNest
	o.With = nil
	o.Children = []Child{{Table: "public.items", On: []string{"order_id"}, As: "items", OrderBy: []string{"line"}}}
	dir := t.TempDir()
	j := openRun(t, o, dir, false)
	process(t, j,
		rec(pipeline.OpInsert, orders, ver(1), nil, order(1, 0, "")),
		rec(pipeline.OpInsert, orders, ver(1), nil, order(2, 0, "")),
		rec(pipeline.OpInsert, items, ver(2), nil, item(7, 1, 1, "s")),
	)
	wider := *items
	wider.Columns = append(slices.Clone(items.Columns), pipeline.Column{Name: "qty", Type: pipeline.TypeInt64, Nullable: true})
	process(t, j, rec(pipeline.OpInsert, &wider, ver(3), nil, append(item(9, 1, 2, "u"), int64(1))))
	j.Checkpointed(2) // covers the change; the floor keeps its record
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	j = openRun(t, o, dir, true)
	defer j.Close()
	if out := joined(process(t, j, rec(pipeline.OpInsert, &wider, ver(4), nil, append(item(10, 2, 2, "v"), int64(2))))); len(out) != 1 {
		t.Fatalf("%d documents: the rewrite was done again though its change was not replayed", len(out))
	}
}
