package pipeline

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

// A blocked sink holds back only the checkpoint: the other sink receives
// every record meanwhile, nothing is committed until the blocked sink has
// the records too, and then everything is.
func TestSlowSinkHoldsOnlyTheCheckpoint(t *testing.T) {
	const total, keys = 2000, 2000
	src := &feedSource{total: total, size: 10, keys: keys}
	fast := newMemSink("fast", nil)
	stuck := newMemSink("stuck", nil)
	stuck.block = make(chan struct{})
	store := &memStore{}
	rt, err := New(fastConfig(), src, []NamedSink{{Name: "fast", Sink: fast}, {Name: "stuck", Sink: stuck}}, store, Options{})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- rt.Run(context.Background()) }()

	deadline := time.Now().Add(30 * time.Second)
	for !fast.has(total-1, keys) {
		if time.Now().After(deadline) {
			t.Fatal("the fast sink did not receive every record while the other sink was blocked")
		}
		time.Sleep(5 * time.Millisecond) // polling a condition, not standing in for one
	}
	if n := store.commitCount(); n != 0 {
		t.Fatalf("%d checkpoints committed while a sink held none of the records", n)
	}
	close(stuck.block)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := store.position(); got != total-1 {
		t.Fatalf("checkpoint at %d, want %d", got, total-1)
	}
	for i := 0; i < total; i++ {
		if !stuck.has(i, keys) {
			t.Fatalf("record %d missing in the released sink", i)
		}
	}
}

// A fatal error in one lane stops the pipeline and commits nothing past
// what every sink holds.
func TestFatalSinkStopsEveryLane(t *testing.T) {
	src := &feedSource{total: -1, size: 10}
	ok := newMemSink("ok", nil)
	bad := newMemSink("bad", nil)
	bad.fail = func([]Record) error { return Fatal(errors.New("schema incompatible")) }
	store := &memStore{}
	rt, _ := New(fastConfig(), src, []NamedSink{{Name: "ok", Sink: ok}, {Name: "bad", Sink: bad}}, store, Options{})
	err := rt.Run(context.Background())
	if err == nil || !IsFatal(err) {
		t.Fatalf("run returned %v, want the fatal sink error", err)
	}
	if n := store.commitCount(); n != 0 {
		t.Fatalf("%d checkpoints committed although a sink never wrote", n)
	}
}

// Each sink receives only its routed tables and columns; key columns are
// always kept; a sink's dead letters go to its own DLQ.
func TestRoutingAndPerSinkDLQ(t *testing.T) {
	other := &Table{ID: TableID{Schema: "s", Table: "u"}, Columns: testTable.Columns, KeyIdx: []int{0}}
	var recs []Record
	for i := 0; i < 100; i++ {
		tbl := testTable
		if i%2 == 1 {
			tbl = other
		}
		recs = append(recs, Record{Op: OpInsert, Table: tbl, After: []any{int64(i), int64(i)}, Version: Version{0, 0, 0, uint64(i + 1)}})
	}
	src := &listSource{batches: [][]Record{recs[:50], recs[50:]}}
	type got struct {
		tables map[string]int
		cols   map[int]bool
	}
	capture := func(g *got) func([]Record) error {
		return func(rs []Record) error {
			for _, r := range rs {
				g.tables[r.Table.ID.String()]++
				g.cols[len(r.Table.Columns)] = true
				if len(r.After) != len(r.Table.Columns) {
					t.Errorf("image of %d values for %d columns", len(r.After), len(r.Table.Columns))
				}
			}
			return nil
		}
	}
	onlyT, noV := &got{map[string]int{}, map[int]bool{}}, &got{map[string]int{}, map[int]bool{}}
	s1, s2 := &funcSink{write: capture(onlyT)}, &funcSink{write: capture(noV)}
	r1, err := NewRoute([]string{"s.t"}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := NewRoute(nil, nil, []string{"s.*.v", "s.*.id"})
	if err != nil {
		t.Fatal(err)
	}
	pick := &funcSink{write: func(rs []Record) error {
		return &BatchError{Failed: []RecordError{{Index: 0, Err: errors.New("rejected"), Permanent: true}}}
	}}
	own, shared := &memDLQ{}, &memDLQ{}
	rt, _ := New(fastConfig(), src, []NamedSink{{Name: "t-only", Sink: s1, Route: r1}, {Name: "no-v", Sink: s2, Route: r2},
		{Name: "picky", Sink: pick, DLQ: own}}, &memStore{}, Options{DLQ: shared})
	if err := rt.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if onlyT.tables["s.t"] != 50 || onlyT.tables["s.u"] != 0 || !onlyT.cols[2] {
		t.Errorf("table route: %+v", onlyT)
	}
	if noV.tables["s.t"] != 50 || noV.tables["s.u"] != 50 || !noV.cols[1] || noV.cols[2] {
		t.Errorf("column route (key kept, v dropped): %+v", noV)
	}
	if own.Depth() == 0 || shared.Depth() != 0 {
		t.Errorf("dead letters: sink's own DLQ %d, pipeline DLQ %d", own.Depth(), shared.Depth())
	}
}

func TestRouteProjection(t *testing.T) {
	tbl := &Table{ID: TableID{Schema: "app", Table: "users"}, Columns: []Column{
		{Name: "id", Key: true}, {Name: "email"}, {Name: "password_hash"}, {Name: "name"}}, KeyIdx: []int{0}}
	rec := Record{Op: OpUpdate, Table: tbl, Before: []any{1, "a@x", "h1", "A"}, After: []any{1, "b@x", "h2", "B"}}
	hb := Record{Op: OpHeartbeat}
	cases := []struct {
		tables, include, exclude []string
		want                     []string // kept columns; nil: dropped
	}{
		{nil, nil, []string{"app.*.password_hash"}, []string{"id", "email", "name"}},
		{nil, []string{"app.users.name"}, nil, []string{"id", "name"}},
		{nil, []string{"other.t.x"}, []string{"*.*.id"}, []string{"id", "email", "password_hash", "name"}},
		{[]string{"app.u*"}, nil, nil, []string{"id", "email", "password_hash", "name"}},
		{[]string{"app.orders"}, nil, nil, nil},
	}
	for _, c := range cases {
		r, err := NewRoute(c.tables, c.include, c.exclude)
		if err != nil {
			t.Fatal(err)
		}
		out := r.Apply([]Record{rec, hb})
		if out[len(out)-1].Op != OpHeartbeat {
			t.Errorf("%v: heartbeat not passed", c)
		}
		if c.want == nil {
			if len(out) != 1 {
				t.Errorf("%v: table not dropped", c)
			}
			continue
		}
		p := out[0]
		var names []string
		for _, col := range p.Table.Columns {
			names = append(names, col.Name)
		}
		if !slices.Equal(names, c.want) || len(p.After) != len(names) || len(p.Before) != len(names) ||
			p.Table.Columns[p.Table.KeyIdx[0]].Name != "id" || p.After[0] != 1 || p.Table.ID != tbl.ID {
			t.Errorf("%v: got %v %v %v", c, names, p.Before, p.After)
		}
		if slices.Contains(names, "name") && p.After[slices.Index(names, "name")] != "B" {
			t.Errorf("%v: values misaligned: %v", c, p.After)
		}
	}
	if r, err := NewRoute(nil, nil, nil); r != nil || err != nil {
		t.Errorf("empty route: %v %v", r, err)
	}
	if _, err := NewRoute([]string{"users"}, nil, nil); err == nil {
		t.Error("a one-part table pattern was accepted")
	}
}

// A write that never returns on its own (a black-holed target) is cut off
// by WriteTimeout and retried; the run completes.
func TestWriteTimeoutRetriesAHungWrite(t *testing.T) {
	src := &feedSource{total: 100, size: 10}
	calls := 0
	var first error
	hung := &ctxSink{write: func(ctx context.Context, recs []Record) error {
		calls++
		if calls == 1 {
			<-ctx.Done()
			first = ctx.Err()
			return first
		}
		return nil
	}}
	cfg := fastConfig()
	cfg.WriteTimeout = 50 * time.Millisecond
	store := &memStore{}
	rt, _ := New(cfg, src, []NamedSink{{Name: "hung", Sink: hung}}, store, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := rt.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(first, context.DeadlineExceeded) || calls < 2 || store.position() != 99 {
		t.Fatalf("first attempt ended with %v, %d calls, checkpoint %d", first, calls, store.position())
	}
}

type ctxSink struct {
	write func(context.Context, []Record) error
}

func (s *ctxSink) Open(context.Context) error                     { return nil }
func (s *ctxSink) Write(ctx context.Context, recs []Record) error { return s.write(ctx, recs) }
func (s *ctxSink) Close(context.Context) error                    { return nil }

// A batch that fills a write by itself (an incremental snapshot's chunk
// behind a few stream changes) is written alone, as the source made it,
// after the records before it; the others are coalesced as before, and
// the sink sees every record once, in order.
func TestItemThatFillsAWriteGoesAlone(t *testing.T) {
	n := 0
	batch := func(size int) []Record {
		recs := []Record{} // none: a batch that carries only its position
		for range size {
			recs = append(recs, Record{Op: OpUpdate, Table: testTable, After: []any{int64(n), int64(n)},
				Version: Version{0, 0, 0, uint64(n + 1)}, Size: 100})
			n++
		}
		return recs
	}
	src := &listSource{batches: [][]Record{batch(2), batch(3), batch(0), batch(60), batch(1)}}
	big := src.batches[3]
	sink := &recordingSink{memSink: newMemSink("s", &eventLog{})}
	cfg := fastConfig()
	cfg.BatchLinger = time.Hour // writes are cut by size and at the end only
	store := &memStore{}
	rt, err := New(cfg, src, []NamedSink{{Name: "s", Sink: sink}}, store, Options{})
	runToEnd(t, rt, err)
	if got := store.position(); got != 4 {
		t.Errorf("final checkpoint at batch %d, want the last, 4 (Invariant 1)", got)
	}
	// The 60 records go in pieces of BatchMaxRecords (50), as any write.
	if want := []int{5, 50, 10, 1}; !slices.Equal(sink.sizes, want) {
		t.Fatalf("writes of %v records, want %v", sink.sizes, want)
	}
	if sink.first[1] != &big[0] {
		t.Error("the 60-record batch was copied before its write")
	}
	for k := range int64(n) {
		if sink.rows[k] != k {
			t.Errorf("key %d holds %d, want %d", k, sink.rows[k], k)
		}
	}
}

// recordingSink notes each write's size and first record.
type recordingSink struct {
	*memSink
	sizes []int
	first []*Record
}

func (r *recordingSink) Write(ctx context.Context, recs []Record) error {
	r.mu.Lock()
	r.sizes = append(r.sizes, len(recs))
	if len(recs) > 0 {
		r.first = append(r.first, &recs[0])
	}
	r.mu.Unlock()
	return r.memSink.Write(ctx, recs)
}
