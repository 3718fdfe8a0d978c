package pipeline

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/integration/harness"
)

func fastConfig() Config {
	return Config{Pipeline: "p", BatchMaxRecords: 50, BatchLinger: 5 * time.Millisecond,
		CheckpointInterval: 5 * time.Millisecond, RetryInitial: time.Millisecond, RetryMax: 5 * time.Millisecond,
		ShutdownTimeout: 10 * time.Second}
}

// Invariant 1: with a slow sink and a flaky sink, no checkpoint ever names a
// position whose records are not durable in both, and every ack follows the
// commit of its checkpoint.
func TestCheckpointNeverPassesUndurableRecord(t *testing.T) {
	ev := &eventLog{}
	const total, keys = 5000, 5000
	src := &feedSource{total: total, size: 7, keys: keys, events: ev}
	slow := newMemSink("slow", ev)
	slow.delay = func() time.Duration { return time.Duration(rand.IntN(3)) * time.Millisecond }
	flaky := newMemSink("flaky", ev)
	flaky.fail = func([]Record) error {
		if rand.IntN(3) == 0 {
			return errors.New("transient: connection reset")
		}
		return nil
	}
	var violations atomic.Int64
	store := &memStore{events: ev}
	store.hook = func(cp Checkpoint) error {
		var n int
		fmt.Sscanf(string(cp.Position), `{"n":%d}`, &n)
		for i := 0; i <= n; i++ {
			if !slow.has(i, keys) || !flaky.has(i, keys) {
				violations.Add(1)
				t.Errorf("checkpoint at %d committed while record %d is not durable in every sink", n, i)
				break
			}
		}
		return nil
	}
	rt, err := New(fastConfig(), src, []NamedSink{{Name: "slow", Sink: slow}, {Name: "flaky", Sink: flaky}}, store, Options{})
	runToEnd(t, rt, err)
	if got := store.position(); got != total-1 {
		t.Fatalf("final checkpoint at %d, want %d", got, total-1)
	}
	if store.commits < 2 {
		t.Fatalf("only %d commits; the test did not exercise intermediate checkpoints", store.commits)
	}
	// Every ack names the position committed just before it.
	lastCommit := ""
	for _, e := range ev.list() {
		if strings.HasPrefix(e, "commit ") {
			lastCommit = strings.TrimPrefix(e, "commit ")
		}
		if strings.HasPrefix(e, "ack ") {
			if want := fmt.Sprintf(`{"n":%s}`, strings.TrimPrefix(e, "ack ")); want != lastCommit {
				t.Fatalf("%s not preceded by its commit (last commit %s)", e, lastCommit)
			}
		}
	}
	for k := 0; k < keys; k++ {
		if !slow.has(k, keys) || !flaky.has(k, keys) {
			t.Fatalf("record %d missing from a sink", k)
		}
	}
}

// A sink that keeps failing holds the checkpoint where it is: nothing is
// committed or acknowledged, and the stop returns within the drain deadline.
func TestFailingSinkHoldsCheckpoint(t *testing.T) {
	ev := &eventLog{}
	src := &feedSource{total: -1, size: 10, events: ev}
	bad := newMemSink("bad", ev)
	var failures atomic.Int64
	bad.fail = func([]Record) error { failures.Add(1); return errors.New("transient: target unavailable") }
	store := &memStore{events: ev}
	cfg := fastConfig()
	cfg.ShutdownTimeout = 200 * time.Millisecond
	rt, _ := New(cfg, src, []NamedSink{{Name: "bad", Sink: bad}}, store, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- rt.Run(ctx) }()
	// Wait until the sink has failed (and been retried) several times.
	deadline := time.Now().Add(10 * time.Second)
	for failures.Load() < 5 {
		if time.Now().After(deadline) {
			t.Fatal("sink was never retried")
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Logf("run ended with %v", err)
	}
	if store.commits != 0 || len(src.ackList()) != 0 {
		t.Fatalf("commits=%d acks=%v with a sink that never succeeded", store.commits, src.ackList())
	}
}

// Invariant 6: with the only sink stalled for 10 s while the source keeps
// offering data, the records in flight stay under the cap and the heap stays
// flat; after the stall everything drains.
func TestBackpressureHoldsMemoryUnderCap(t *testing.T) {
	harness.SkipShort(t, "10 s stall")
	ev := &eventLog{}
	var offered atomic.Int64
	src := &feedSource{total: -1, size: 100, keys: 1000, events: ev, readHook: func(n int) { offered.Store(int64(n)) }}
	stalled := newMemSink("stalled", ev)
	stalled.block = make(chan struct{})
	store := &memStore{events: ev}
	obs := &maxObserver{}
	cfg := fastConfig()
	cfg.MaxInFlightRecords = 2000
	cfg.MaxInFlightBytes = 1 << 30
	rt, _ := New(cfg, src, []NamedSink{{Name: "stalled", Sink: stalled}}, store, Options{Observer: obs})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- rt.Run(ctx) }()

	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	stallEnd := time.After(10 * time.Second)
	var peakHeap uint64
	tick := time.NewTicker(100 * time.Millisecond)
loop:
	for {
		select {
		case <-stallEnd:
			break loop
		case <-tick.C:
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			if ms.HeapAlloc > peakHeap {
				peakHeap = ms.HeapAlloc
			}
			if n, _ := rt.ledger.inFlight(); n > cfg.MaxInFlightRecords {
				t.Fatalf("in flight %d > cap %d", n, cfg.MaxInFlightRecords)
			}
		}
	}
	tick.Stop()
	// The source was held: it offered at most the cap plus what sits in the
	// reader's hands (one batch) — never the millions an unbounded loop makes.
	if o := offered.Load(); o > int64(cfg.MaxInFlightRecords+src.size) {
		t.Fatalf("source offered %d records while the sink was stalled; cap is %d", o, cfg.MaxInFlightRecords)
	}
	if peakHeap > before.HeapAlloc+64<<20 {
		t.Fatalf("heap grew from %d to %d during the stall", before.HeapAlloc, peakHeap)
	}
	close(stalled.block)
	// After the stall the pipeline makes progress again.
	deadline := time.Now().Add(20 * time.Second)
	for store.position() < cfg.MaxInFlightRecords*2 {
		if time.Now().After(deadline) {
			t.Fatalf("no progress after the stall; checkpoint at %d", store.position())
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if obs.maxRecs > cfg.MaxInFlightRecords {
		t.Fatalf("observer saw %d in flight, cap %d", obs.maxRecs, cfg.MaxInFlightRecords)
	}
}

// Invariant 7: permanent per-record failures go to the DLQ with their raw
// record and reason; the rest is written and the checkpoint moves on.
func TestPermanentFailuresGoToDLQ(t *testing.T) {
	ev := &eventLog{}
	src := &feedSource{total: 200, size: 10, keys: 200, events: ev}
	sink := newMemSink("picky", ev)
	sink.fail = func(recs []Record) error {
		var be BatchError
		for i, r := range recs {
			if r.After[1].(int64)%50 == 7 {
				be.Failed = append(be.Failed, RecordError{Index: i, Err: errors.New("document rejected: field too long"), Permanent: true})
			}
		}
		if len(be.Failed) == 0 {
			return nil
		}
		return &be
	}
	store := &memStore{events: ev}
	dlq := &memDLQ{}
	rt, _ := New(fastConfig(), src, []NamedSink{{Name: "picky", Sink: sink}}, store, Options{DLQ: dlq})
	if err := rt.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(dlq.letters) != 4 {
		t.Fatalf("dlq has %d letters, want 4", len(dlq.letters))
	}
	l := dlq.letters[0]
	if l.Stage != "sink:picky" || !strings.Contains(l.Error, "field too long") || !strings.Contains(string(l.Raw), `"v":7`) || l.Table != "s.t" {
		t.Fatalf("bad dead letter: %+v raw=%s", l, l.Raw)
	}
	if store.position() != 199 {
		t.Fatalf("checkpoint at %d, want 199", store.position())
	}
	if sink.has(7, 200) {
		t.Fatal("rejected record was applied")
	}
	if !sink.has(8, 200) {
		t.Fatal("record after the rejected one missing")
	}
}

// Without a DLQ a poison record stops the pipeline instead of vanishing.
func TestPermanentFailureWithoutDLQStops(t *testing.T) {
	src := &feedSource{total: 20, size: 10, keys: 20}
	sink := newMemSink("picky", nil)
	sink.fail = func(recs []Record) error {
		return &BatchError{Failed: []RecordError{{Index: 0, Err: errors.New("rejected"), Permanent: true}}}
	}
	store := &memStore{}
	rt, _ := New(fastConfig(), src, []NamedSink{{Name: "picky", Sink: sink}}, store, Options{})
	err := rt.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "no dead-letter queue") {
		t.Fatalf("err = %v", err)
	}
	if store.commits != 0 {
		t.Fatal("checkpoint committed past a record that was neither written nor dead-lettered")
	}
}

// A fatal sink error stops the pipeline without a checkpoint past it.
func TestFatalSinkErrorStops(t *testing.T) {
	src := &feedSource{total: 1000, size: 10, keys: 1000}
	sink := newMemSink("s", nil)
	var calls atomic.Int64
	sink.fail = func([]Record) error {
		if calls.Add(1) > 3 {
			return Fatal(errors.New("schema incompatible"))
		}
		return nil
	}
	store := &memStore{}
	rt, _ := New(fastConfig(), src, []NamedSink{{Name: "s", Sink: sink}}, store, Options{})
	err := rt.Run(context.Background())
	if err == nil || !IsFatal(err) {
		t.Fatalf("err = %v, want fatal", err)
	}
	if p := store.position(); p >= 1000-1 {
		t.Fatalf("checkpoint at %d after a fatal error", p)
	}
	for i := 0; i <= store.position(); i++ {
		if !sink.has(i, 1000) {
			t.Fatalf("checkpoint at %d but record %d not durable", store.position(), i)
		}
	}
}

// givingWay is a source whose Read fails with a Restart-marked error
// once after n batches, as an initial load that gave way does.
type givingWay struct {
	*feedSource
	n, reads int
}

func (g *givingWay) Read(ctx context.Context) (Batch, error) {
	if g.reads++; g.reads == g.n+1 {
		return Batch{}, fmt.Errorf("source: %w", Restart(errors.New("gave way")))
	}
	return g.feedSource.Read(ctx)
}

// A source error marked Restart stops the run like any error, reported
// as such through the runtime (the daemon then starts again), with the
// checkpoint only at durable records (Invariant 1); the next run from
// that checkpoint delivers everything.
func TestRestartErrorStopsAndTheNextRunResumes(t *testing.T) {
	src := &feedSource{total: 1000, size: 10, keys: 1000}
	sink := newMemSink("s", nil)
	store := &memStore{}
	rt, _ := New(fastConfig(), &givingWay{feedSource: src, n: 30}, []NamedSink{{Name: "s", Sink: sink}}, store, Options{})
	err := rt.Run(context.Background())
	if !IsRestart(err) || IsFatal(err) {
		t.Fatalf("err = %v, want one marked Restart", err)
	}
	at := store.position()
	if at >= 300 {
		t.Fatalf("checkpoint at %d, past the 300 records read before the error", at)
	}
	for i := 0; i <= at; i++ {
		if !sink.has(i, 1000) {
			t.Fatalf("checkpoint at %d but record %d not durable", at, i)
		}
	}
	rt, _ = New(fastConfig(), &feedSource{total: 1000, size: 10, keys: 1000}, []NamedSink{{Name: "s", Sink: sink}}, store, Options{})
	if err := rt.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 1000; i++ {
		if !sink.has(i, 1000) {
			t.Fatalf("record %d missing after the restart", i)
		}
	}
}

// A graceful stop drains what was read, commits a final checkpoint at the
// last durable position, then closes sinks before the source; a restart
// resumes right after it.
func TestGracefulStopDrainsAndResumes(t *testing.T) {
	ev := &eventLog{}
	src := &feedSource{total: -1, size: 10, keys: 100000, events: ev}
	sink := newMemSink("s", ev)
	store := &memStore{events: ev}
	rt, _ := New(fastConfig(), src, []NamedSink{{Name: "s", Sink: sink}}, store, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- rt.Run(ctx) }()
	for store.position() < 500 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	src.mu.Lock()
	read := src.next
	src.mu.Unlock()
	// Everything handed to the writer is drained; only the one batch the
	// reader held when the stop came may be left for the restart.
	got := store.position()
	if got > read-1 || read-1-got > src.size {
		t.Fatalf("final checkpoint %d, last read record %d: the drain lost more than the reader's batch", got, read-1)
	}
	for i := 0; i <= got; i++ {
		if !sink.has(i, 100000) {
			t.Fatalf("checkpoint %d but record %d not in the sink", got, i)
		}
	}
	evs := ev.list()
	if evs[len(evs)-2] != "close sink s" || evs[len(evs)-1] != "close source" {
		t.Fatalf("stop order: %v", evs[len(evs)-3:])
	}
	// Restart: resumes strictly after the checkpoint.
	src2 := &feedSource{total: read + 10, size: 10, keys: 100000}
	rt2, _ := New(fastConfig(), src2, []NamedSink{{Name: "s", Sink: sink}}, store, Options{})
	if err := rt2.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if store.position() != read+9 {
		t.Fatalf("after restart checkpoint %d, want %d", store.position(), read+9)
	}
	for i := got + 1; i < read+10; i++ {
		if !sink.has(i, 100000) {
			t.Fatalf("record %d after the restart point is missing", i)
		}
	}
}

// Invariant 8: heartbeat batches carry positions through the pipeline and
// feed the end-to-end latency.
type hbSource struct {
	feedSource
	sent int
}

func (h *hbSource) Read(ctx context.Context) (Batch, error) {
	if h.sent >= 3 {
		<-ctx.Done()
		return Batch{}, ctx.Err()
	}
	h.sent++
	return Batch{Records: []Record{{Op: OpHeartbeat, EventTime: time.Now()}}, Pos: Position(fmt.Sprintf(`{"n":%d}`, h.sent))}, nil
}

func TestHeartbeatsAdvanceCheckpoint(t *testing.T) {
	src := &hbSource{}
	sink := newMemSink("s", nil)
	store := &memStore{}
	obs := &maxObserver{}
	rt, _ := New(fastConfig(), src, []NamedSink{{Name: "s", Sink: sink}}, store, Options{Observer: obs})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- rt.Run(ctx) }()
	for store.position() < 3 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	<-done
	if obs.e2e < 3 {
		t.Fatalf("end-to-end latency observed %d times, want 3", obs.e2e)
	}
	if acks := src.ackList(); len(acks) == 0 || acks[len(acks)-1] != 3 {
		t.Fatalf("acks %v", acks)
	}
}

// Stats may be polled while Run starts (the daemon serves /status before
// the pipeline runs): it shows the stored checkpoint without racing Run's
// load of it (checked under -race).
func TestStatsDuringStartShowsStoredCheckpoint(t *testing.T) {
	store := &memStore{cp: Checkpoint{Pipeline: "t", Position: []byte("null"), Seq: 7}, ok: true}
	rt, err := New(fastConfig(), &feedSource{total: 100, size: 10}, []NamedSink{{Name: "m", Sink: newMemSink("m", nil)}}, store, Options{})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- rt.Run(context.Background()) }()
	var seen uint64
	for running := true; running; {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			running = false
		default:
			seen = max(seen, rt.Stats().LastCheckpoint.Seq)
		}
	}
	if s := rt.Stats().LastCheckpoint.Seq; s < 7 || seen > s {
		t.Fatalf("checkpoint seq %d after the run (max seen while running %d), want >= 7", s, seen)
	}
}
