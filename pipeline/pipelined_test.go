package pipeline

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// pipeSink is a Pipeliner: Start queues a batch and one worker lands the
// batches in the order they were started, after a random delay, like a
// producer that keeps order. Some batches fail after landing a random
// prefix of their records (a transient error: the rest may or may not
// have landed). Every landed record is also appended to a per-key log,
// like a topic, to check that a key's last entry is its newest change.
type pipeSink struct {
	*memSink
	queue    chan *pipeBatch
	failOne  int // one batch in failOne fails; 0: none
	inFlight atomic.Int64
	maxIn    atomic.Int64
	starts   atomic.Int64
	failures atomic.Int64

	logMu sync.Mutex
	log   map[int64][]uint64 // key → the versions (minor) landed, in order
}

type pipeBatch struct {
	recs []Record
	done chan struct{}
	err  error
}

func (b *pipeBatch) Done() <-chan struct{} { return b.done }
func (b *pipeBatch) Err() error            { return b.err }

func newPipeSink(name string, ev *eventLog, failOne int) *pipeSink {
	p := &pipeSink{memSink: newMemSink(name, ev), queue: make(chan *pipeBatch, 1024), failOne: failOne,
		log: map[int64][]uint64{}}
	go p.work()
	return p
}

func (p *pipeSink) Pipelines() bool { return true }

func (p *pipeSink) Start(_ context.Context, recs []Record) (Pending, error) {
	n := p.inFlight.Add(1)
	for m := p.maxIn.Load(); n > m && !p.maxIn.CompareAndSwap(m, n); m = p.maxIn.Load() {
	}
	p.starts.Add(1)
	b := &pipeBatch{recs: recs, done: make(chan struct{})}
	p.queue <- b
	return b, nil
}

// Write is the plain path the lane rewrites failed batches through.
func (p *pipeSink) Write(ctx context.Context, recs []Record) error {
	p.land(recs)
	return nil
}

func (p *pipeSink) land(recs []Record) {
	p.apply(recs, nil)
	p.logMu.Lock()
	for _, r := range recs {
		if r.Table != nil {
			k := r.After[0].(int64)
			p.log[k] = append(p.log[k], r.Version[3])
		}
	}
	p.logMu.Unlock()
}

func (p *pipeSink) work() {
	for b := range p.queue {
		time.Sleep(time.Duration(rand.IntN(1500)) * time.Microsecond) // the broker's acknowledgement
		if p.failOne > 0 && rand.IntN(p.failOne) == 0 {
			p.land(b.recs[:rand.IntN(len(b.recs)+1)])
			b.err = errors.New("transient: not every record was acknowledged")
			p.failures.Add(1)
		} else {
			p.land(b.recs)
		}
		p.inFlight.Add(-1)
		close(b.done)
	}
}

// Invariant 1 with a pipelining sink: batches are in flight together and
// some fail after landing part of their records, yet no checkpoint names
// a record that is not durable in both sinks; after every failure the
// failed batch and those started after it are written again in order, so
// each key's last landed change is its newest.
func TestPipelinedSinkCheckpointNeverPassesUndurableRecord(t *testing.T) {
	ev := &eventLog{}
	const total, keys = 6000, 500
	src := &feedSource{total: total, size: 7, keys: keys, events: ev}
	pipe := newPipeSink("pipe", ev, 6)
	plain := newMemSink("plain", ev)
	store := &memStore{events: ev}
	store.hook = func(cp Checkpoint) error {
		var n int
		fmt.Sscanf(string(cp.Position), `{"n":%d}`, &n)
		for i := 0; i <= n; i++ {
			if !pipe.has(i, keys) || !plain.has(i, keys) {
				t.Errorf("checkpoint at %d committed while record %d is not durable in every sink", n, i)
				break
			}
		}
		return nil
	}
	rt := runFeed(t, src, []NamedSink{{Name: "pipe", Sink: pipe}, {Name: "plain", Sink: plain}}, store, Options{})
	if m := pipe.maxIn.Load(); m < 2 || m > int64(rt.cfg.PipelinedWrites) {
		t.Fatalf("at most %d batches were in flight at once, want 2..%d", m, rt.cfg.PipelinedWrites)
	}
	if pipe.failures.Load() == 0 {
		t.Fatal("no pipelined write failed: the rewrite path was not exercised")
	}
	for k := 0; k < keys; k++ {
		if !pipe.has(total-keys+k, keys) {
			t.Fatalf("key %d lacks its newest change", k)
		}
		l := pipe.log[int64(k)]
		newest := l[len(l)-1]
		for _, v := range l {
			if v > newest {
				t.Fatalf("key %d: change %d landed after the newer %d: %v", k, newest, v, l)
			}
		}
	}
	t.Logf("%d batches started, %d failed, at most %d in flight", pipe.starts.Load(), pipe.failures.Load(), pipe.maxIn.Load())
}

// A pipelining sink's permanent per-record refusals go to the DLQ and the
// rest of the batch counts as durable, without rewriting it.
func TestPipelinedSinkPermanentFailuresGoToDLQ(t *testing.T) {
	ev := &eventLog{}
	src := &feedSource{total: 200, size: 10, keys: 1000, events: ev}
	sink := &refusingPipe{memSink: newMemSink("refusing", ev)}
	dlq := &memDLQ{}
	store := &memStore{events: ev}
	runFeed(t, src, []NamedSink{{Name: "refusing", Sink: sink}}, store, Options{DLQ: dlq})
	if sink.writes != 0 {
		t.Fatalf("%d plain rewrites; permanent refusals need none", sink.writes)
	}
	if n := dlq.Depth(); n != 20 {
		t.Fatalf("%d dead letters, want the 20 refused records", n)
	}
	for i := 0; i < 200; i++ {
		if want := i%10 != 3; sink.has(i, 1000) != want {
			t.Fatalf("record %d stored %v, want %v", i, !want, want)
		}
	}
}

// runFeed runs the bounded feed src to its end with fastConfig and checks
// that the final checkpoint names its last record.
func runFeed(t *testing.T, src *feedSource, sinks []NamedSink, store *memStore, opts Options) *Runtime {
	t.Helper()
	rt, err := New(fastConfig(), src, sinks, store, opts)
	runToEnd(t, rt, err)
	if got := store.position(); got != src.total-1 {
		t.Fatalf("final checkpoint at %d, want %d", got, src.total-1)
	}
	return rt
}

// refusingPipe refuses, permanently, every record whose feed number ends
// in 3, and lands the rest at once.
type refusingPipe struct {
	*memSink
	writes int
}

func (p *refusingPipe) Write(context.Context, []Record) error {
	p.writes++
	return errors.New("unexpected rewrite")
}

func (p *refusingPipe) Pipelines() bool { return true }

func (p *refusingPipe) Start(_ context.Context, recs []Record) (Pending, error) {
	var failed []RecordError
	skip := map[int]bool{}
	for i, r := range recs {
		if r.After[1].(int64)%10 == 3 {
			failed = append(failed, RecordError{Index: i, Err: errors.New("refused"), Permanent: true})
			skip[i] = true
		}
	}
	p.apply(recs, skip)
	if len(failed) > 0 {
		return Settled(&BatchError{Failed: failed}), nil
	}
	return Settled(nil), nil
}
