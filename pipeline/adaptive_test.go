package pipeline

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestAdaptiveSizing(t *testing.T) {
	a := newAdaptive(1000, 100*time.Millisecond)
	a.split(1000)
	a.split(500)
	if a.size() != 250 {
		t.Fatalf("after two splits: %d, want 250", a.size())
	}
	for range 3 {
		a.succeeded(a.size(), time.Millisecond)
	}
	if a.size() != 400 {
		t.Fatalf("after three fast full writes: %d, want 250+3×50", a.size())
	}
	a.succeeded(10, time.Millisecond) // a small write says nothing about the limit
	if a.size() != 400 {
		t.Fatalf("a partial write moved the limit to %d", a.size())
	}
	a.succeeded(400, 400*time.Millisecond) // 4× the target: halve at most
	if a.size() != 200 {
		t.Fatalf("after a slow write: %d, want 200", a.size())
	}
	for range 10 {
		a.succeeded(a.size(), time.Second)
	}
	if a.size() != 62 {
		t.Fatalf("slow writes took the limit to %d, want the floor 62", a.size())
	}
	for range 100 {
		a.split(a.size())
	}
	if a.size() != 1 {
		t.Fatalf("splits stop at %d, want 1", a.size())
	}
	for range 100 {
		a.succeeded(a.size(), 0)
	}
	if a.size() != 1000 {
		t.Fatalf("grew back to %d, want the maximum 1000", a.size())
	}
}

// orderSink records every record it lands, per key in landing order, and
// refuses writes as chosen by refuse (nil: lands).
type orderSink struct {
	mu      sync.Mutex
	landed  map[int64][]uint64 // key → versions in landing order
	sizes   []int              // sizes of the writes that landed
	refuse  func(ctx context.Context, recs []Record) error
	writes  int
	durable int
}

func (s *orderSink) Open(context.Context) error  { return nil }
func (s *orderSink) Close(context.Context) error { return nil }
func (s *orderSink) Write(ctx context.Context, recs []Record) error {
	s.mu.Lock()
	s.writes++
	s.mu.Unlock()
	if s.refuse != nil {
		if err := s.refuse(ctx, recs); err != nil {
			return err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.landed == nil {
		s.landed = map[int64][]uint64{}
	}
	for _, r := range recs {
		k := r.After[0].(int64)
		s.landed[k] = append(s.landed[k], r.Version[3])
	}
	s.sizes = append(s.sizes, len(recs))
	s.durable += len(recs)
	return nil
}

// inOrder reports a key whose changes landed out of version order, or
// whose last landed change is not its newest.
func (s *orderSink) inOrder(t *testing.T, total, keys int) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, vs := range s.landed {
		for i := 1; i < len(vs); i++ {
			if vs[i] < vs[i-1] {
				t.Fatalf("key %d: version %d landed after %d", k, vs[i], vs[i-1])
			}
		}
	}
	for k := range keys {
		newest := uint64(0)
		for n := k; n < total; n += keys {
			newest = uint64(n + 1)
		}
		vs := s.landed[int64(k)]
		if len(vs) == 0 || vs[len(vs)-1] != newest {
			t.Fatalf("key %d: last landed %v, want %d", k, vs, newest)
		}
	}
}

// A target that times out every write of more than 300 records (a slow
// search cluster after an outage): the lane splits its 1,000-record
// writes until they fit, every record lands once in order per key, the
// run completes with the checkpoint at the end, and the limit keeps
// probing upward (additive increase) instead of staying at its minimum.
func TestTimedOutWritesAreSplit(t *testing.T) {
	const total, keys = 20000, 700
	src := &feedSource{total: total, size: 100, keys: keys}
	var limits []int
	var mu sync.Mutex
	sink := &orderSink{refuse: func(ctx context.Context, recs []Record) error {
		if len(recs) > 300 {
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	}}
	cfg := fastConfig()
	cfg.BatchMaxRecords = 1000
	cfg.MaxInFlightRecords = 5000
	cfg.WriteTimeout = 30 * time.Millisecond
	cfg.BatchLinger = 50 * time.Millisecond
	store := &memStore{}
	obs := &limitObserver{f: func(n int) { mu.Lock(); limits = append(limits, n); mu.Unlock() }}
	rt, err := New(cfg, src, []NamedSink{{Name: "slow", Sink: sink}}, store, Options{Observer: obs})
	runToEnd(t, rt, err)
	if store.position() != total-1 {
		t.Fatalf("final checkpoint %d, want %d", store.position(), total-1)
	}
	sink.inOrder(t, total, keys)
	if sink.durable != total {
		t.Fatalf("%d records landed, want %d (each once)", sink.durable, total)
	}
	for _, n := range sink.sizes {
		if n > 300 {
			t.Fatalf("a write of %d landed", n)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if obs.splits < 2 {
		t.Fatalf("%d splits", obs.splits)
	}
	grew := false
	for i := 1; i < len(limits); i++ {
		grew = grew || limits[i] > limits[i-1]
	}
	if !grew {
		t.Fatalf("the limit never grew back: %v", limits)
	}
}

// A record that makes the sink panic, and one the target refuses as too
// large, are isolated by splitting and go to the DLQ with the reason; every
// other record lands and the run ends cleanly.
func TestPoisonRecordsAreIsolatedBySplitting(t *testing.T) {
	for _, c := range []struct {
		name, reason string
		fail         func()
		err          error
	}{
		{name: "panic", reason: "panic: interface conversion", fail: func() { panic("interface conversion: int64, not int32") }},
		{name: "too large", reason: "413", err: TooLarge(errors.New("HTTP 413 request entity too large"))},
	} {
		t.Run(c.name, func(t *testing.T) {
			const total, keys, poison = 3000, 3000, 1234
			src := &feedSource{total: total, size: 50, keys: keys}
			sink := &orderSink{refuse: func(_ context.Context, recs []Record) error {
				for _, r := range recs {
					if r.Version[3] == poison+1 {
						if c.fail != nil {
							c.fail()
						}
						return c.err
					}
				}
				return nil
			}}
			dlq := &memDLQ{}
			store := &memStore{}
			cfg := fastConfig()
			cfg.BatchMaxRecords = 500
			rt, _ := New(cfg, src, []NamedSink{{Name: "s", Sink: sink}}, store, Options{DLQ: dlq})
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := rt.Run(ctx); err != nil {
				t.Fatal(err)
			}
			if store.position() != total-1 {
				t.Fatalf("final checkpoint %d", store.position())
			}
			if len(dlq.letters) != 1 || !strings.Contains(dlq.letters[0].Error, c.reason) ||
				dlq.letters[0].Version != (Version{0, 0, 0, poison + 1}).String() {
				t.Fatalf("dead letters: %+v", dlq.letters)
			}
			if sink.durable != total-1 {
				t.Fatalf("%d records landed, want %d", sink.durable, total-1)
			}
			if len(sink.landed[poison]) != 0 {
				t.Fatal("the poison record landed")
			}
		})
	}
}

// A bounded source that ends while its sink is down: once the drain
// deadline passes the run returns an *UndrainedError naming the sink and
// how many records it holds, the checkpoint covers only what was durable,
// and a restart with the sink back completes the feed.
func TestStopWithUndrainedRecordsIsNotClean(t *testing.T) {
	const total = 400
	var down sync.Mutex
	broken := true
	sink := &orderSink{refuse: func(context.Context, []Record) error {
		down.Lock()
		defer down.Unlock()
		if broken {
			return errors.New("dial tcp 127.0.0.1:9200: connection refused")
		}
		return nil
	}}
	store := &memStore{}
	cfg := fastConfig()
	cfg.ShutdownTimeout = 100 * time.Millisecond
	src := &feedSource{total: total, size: 10, keys: 50}
	rt, _ := New(cfg, src, []NamedSink{{Name: "search", Sink: sink}}, store, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := rt.Run(ctx)
	var u *UndrainedError
	if !errors.As(err, &u) || u.Records == 0 || len(u.Sinks) != 1 || u.Sinks[0].Name != "search" ||
		u.Sinks[0].Undrained == 0 || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("run ended with %v", err)
	}
	if store.position() != -1 {
		t.Fatalf("checkpoint at %d while nothing was durable", store.position())
	}
	down.Lock()
	broken = false
	down.Unlock()
	src = &feedSource{total: total, size: 10, keys: 50}
	rt, _ = New(cfg, src, []NamedSink{{Name: "search", Sink: sink}}, store, Options{})
	if err := rt.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if store.position() != total-1 {
		t.Fatalf("after the restart the checkpoint is at %d", store.position())
	}
	sink.inOrder(t, total, 50)
}

// A sink that keeps failing makes the pipeline degraded after
// DegradedAfter — Stats names it with its error and Ready refuses — and
// healthy again once a write succeeds.
func TestFailingSinkIsReportedDegraded(t *testing.T) {
	var mu sync.Mutex
	broken := true
	sink := &orderSink{refuse: func(context.Context, []Record) error {
		mu.Lock()
		defer mu.Unlock()
		if broken {
			return errors.New("read tcp: i/o timeout")
		}
		return nil
	}}
	cfg := fastConfig()
	cfg.DegradedAfter = 50 * time.Millisecond
	store := &memStore{}
	rt, _ := New(cfg, &feedSource{total: -1, size: 10}, []NamedSink{{Name: "cache", Sink: sink}}, store, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rt.Run(ctx) }()
	deadline := time.Now().Add(30 * time.Second)
	for !rt.Stats().Degraded {
		if time.Now().After(deadline) {
			t.Fatal("never degraded")
		}
		time.Sleep(5 * time.Millisecond)
	}
	st := rt.Stats()
	if h := st.Sinks[0]; h.Name != "cache" || h.FailingSince.IsZero() || !strings.Contains(h.LastError, "i/o timeout") {
		t.Fatalf("sink health %+v", h)
	}
	if err := rt.Ready(); err == nil || !strings.Contains(err.Error(), "sink cache") {
		t.Fatalf("Ready while degraded: %v", err)
	}
	mu.Lock()
	broken = false
	mu.Unlock()
	for rt.Stats().Degraded || rt.Ready() != nil {
		if time.Now().After(deadline) {
			t.Fatal("still degraded after the sink recovered")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

type limitObserver struct {
	NopObserver
	f      func(int)
	splits int
}

func (o *limitObserver) SinkBatchLimit(_ string, n int) { o.f(n) }
func (o *limitObserver) SinkSplit(string)               { o.splits++ }

// A sink that refuses one table permanently (a *TableError: a schema
// change it cannot apply) quarantines only that table: its records go to
// the DLQ with the reason, the other table's records all land, the run
// ends with the checkpoint at the end, and Stats names the table.
func TestTableErrorQuarantinesOnlyThatTable(t *testing.T) {
	other := &Table{ID: TableID{Schema: "s", Table: "ddl"}, Columns: testTable.Columns, KeyIdx: []int{0}}
	var batches [][]Record
	for b := range 60 {
		var recs []Record
		for i := range 20 {
			n := b*20 + i
			tbl := testTable
			if n%3 == 0 {
				tbl = other
			}
			recs = append(recs, Record{Op: OpUpdate, Table: tbl, After: []any{int64(n), int64(n)}, Version: Version{0, 0, 0, uint64(n + 1)}})
		}
		batches = append(batches, recs)
	}
	var writes int
	var landed []int64
	sink := &funcSink{write: func(recs []Record) error {
		writes++
		for _, r := range recs {
			if r.Table == other {
				return fmt.Errorf("upsert: %w", &TableError{Table: other.ID, Err: errors.New(`add column c: missing value: cannot encode uuid`)})
			}
		}
		for _, r := range recs {
			landed = append(landed, r.After[0].(int64))
		}
		return nil
	}}
	dlq := &memDLQ{}
	rt, _ := New(fastConfig(), &listSource{batches: batches}, []NamedSink{{Name: "duckdb", Sink: sink}}, &memStore{}, Options{DLQ: dlq})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := rt.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if len(landed) != 800 || len(dlq.letters) != 400 {
		t.Fatalf("%d records landed (want 800), %d dead letters (want 400)", len(landed), len(dlq.letters))
	}
	for _, l := range dlq.letters {
		if l.Table != "s.ddl" || !strings.Contains(l.Error, "quarantined in sink duckdb") || !strings.Contains(l.Error, "cannot encode uuid") {
			t.Fatalf("dead letter %+v", l)
		}
	}
	st := rt.Stats()
	if q := st.Sinks[0].Quarantined; !st.Degraded || len(q) != 1 || q[0].Table != other.ID {
		t.Fatalf("stats: degraded %v, quarantined %+v", st.Degraded, q)
	}
}

// With QuarantineHold, a table a sink refuses permanently is neither
// written nor dead-lettered: its changes stay in the source's log (no
// checkpoint passes the first of them), the other tables keep flowing,
// the stop says undrained and names the held records, and a restart after
// the fix delivers them from the checkpoint.
func TestQuarantineHoldKeepsChangesInTheSourceLog(t *testing.T) {
	other := &Table{ID: TableID{Schema: "s", Table: "ddl"}, Columns: testTable.Columns, KeyIdx: []int{0}}
	var batches [][]Record
	for b := range 60 {
		var recs []Record
		for i := range 20 {
			n := b*20 + i
			tbl := testTable
			if b >= 20 && b < 30 && i%4 == 0 {
				tbl = other
			}
			recs = append(recs, Record{Op: OpUpdate, Table: tbl, After: []any{int64(n), int64(n)}, Version: Version{0, 0, 0, uint64(n + 1)}})
		}
		batches = append(batches, recs)
	}
	fixed := false
	landed := map[int64]bool{}
	sink := &funcSink{write: func(recs []Record) error {
		for _, r := range recs {
			if r.Table == other && !fixed {
				return &TableError{Table: other.ID, Err: errors.New(`add column c: cannot apply the default`)}
			}
		}
		for _, r := range recs {
			landed[r.After[0].(int64)] = true
		}
		return nil
	}}
	cfg := fastConfig()
	cfg.QuarantineHold = true
	dlq, store := &memDLQ{}, &memStore{}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rt, _ := New(cfg, &listSource{batches: batches}, []NamedSink{{Name: "duckdb", Sink: sink}}, store, Options{DLQ: dlq})
	err := rt.Run(ctx)
	var u *UndrainedError
	if !errors.As(err, &u) || !strings.Contains(err.Error(), "held for quarantined s.ddl") {
		t.Fatalf("run with a held table: %v", err)
	}
	if len(dlq.letters) != 0 {
		t.Fatalf("%d dead letters; a held table sends none", len(dlq.letters))
	}
	for n := int64(0); n < 1200; n++ {
		if n/20 >= 20 && n/20 < 30 && n%20%4 == 0 {
			if landed[n] {
				t.Fatalf("record %d of the held table was written", n)
			}
		} else if !landed[n] {
			t.Fatalf("record %d of the other table did not land", n)
		}
	}
	if string(store.cp.Position) != `{"n":19}` {
		t.Fatalf("checkpoint at %s; want the last batch before the first held change, {\"n\":19}", store.cp.Position)
	}
	// The sink is fixed: a restart reads the held changes again.
	fixed = true
	rt, _ = New(cfg, &listSource{batches: batches}, []NamedSink{{Name: "duckdb", Sink: sink}}, store, Options{DLQ: dlq})
	if err := rt.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if len(landed) != 1200 || string(store.cp.Position) != `{"n":59}` {
		t.Fatalf("after the restart: %d records landed, checkpoint %s", len(landed), store.cp.Position)
	}
}
