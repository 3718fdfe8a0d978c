package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// rejectingOp rejects the records whose value is 7 modulo 50 and sends
// those whose value is a multiple of 3 to sink a only (away from b).
type rejectingOp struct{}

var toA = &Dest{To: []string{"a"}, Away: []string{"b"}}

func (rejectingOp) Process(_ context.Context, in []Record) ([]Record, error) {
	var rj Rejects
	out := in[:0]
	for _, r := range in {
		n := r.After[1].(int64)
		if n%50 == 7 {
			rj.Records = append(rj.Records, Rejected{Record: r, Err: errors.New("cannot transform")})
			continue
		}
		if n%3 == 0 {
			r.Dest = toA
		}
		out = append(out, r)
	}
	if len(rj.Records) > 0 {
		return out, &rj
	}
	return out, nil
}
func (rejectingOp) Snapshot() ([]byte, error) { return nil, nil }
func (rejectingOp) Restore([]byte) error      { return nil }

// Records an operator rejects go to the DLQ with the operator's stage and
// are acknowledged with their batch; records with a Dest reach only the
// sinks it names, and a delete of their key the sinks it sends them away
// from.
func TestOperatorRejectsAndDests(t *testing.T) {
	src := &feedSource{total: 200, size: 10, keys: 200}
	a, b := newMemSink("a", nil), newMemSink("b", nil)
	store := &memStore{}
	dlq := &memDLQ{}
	rt, err := New(fastConfig(), src, []NamedSink{{Name: "a", Sink: a}, {Name: "b", Sink: b}}, store,
		Options{DLQ: dlq, Operators: []NamedOperator{{Name: "transforms[0].filter", Operator: rejectingOp{}}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(dlq.letters) != 4 {
		t.Fatalf("dlq has %d letters, want 4", len(dlq.letters))
	}
	if l := dlq.letters[0]; l.Stage != "transform:transforms[0].filter" || !strings.Contains(l.Error, "cannot transform") || !strings.Contains(string(l.Raw), `"v":7`) {
		t.Fatalf("bad dead letter: %+v raw=%s", l, l.Raw)
	}
	if store.position() != 199 {
		t.Fatalf("checkpoint at %d, want 199", store.position())
	}
	for n := range 200 {
		k := int64(n)
		_, inA := a.rows[k]
		_, inB := b.rows[k]
		switch {
		case n%50 == 7:
			if inA || inB {
				t.Fatalf("rejected record %d was applied", n)
			}
		case n%3 == 0:
			if !inA || inB || b.vers[k] != a.vers[k] {
				t.Fatalf("record %d: in a %v, in b %v (b's version %v)", n, inA, inB, b.vers[k])
			}
		default:
			if !inA || !inB {
				t.Fatalf("record %d: in a %v, in b %v", n, inA, inB)
			}
		}
	}
}

// settleOp records what Settled reports and how many batches it saw.
type settleOp struct {
	mu      sync.Mutex
	batches uint64
	settled []uint64
}

func (s *settleOp) Process(_ context.Context, in []Record) ([]Record, error) {
	s.mu.Lock()
	s.batches++
	s.mu.Unlock()
	return in, nil
}
func (*settleOp) Snapshot() ([]byte, error) { return nil, nil }
func (*settleOp) Restore([]byte) error      { return nil }
func (s *settleOp) Settled(n uint64) {
	s.mu.Lock()
	s.settled = append(s.settled, n)
	s.mu.Unlock()
}

// runOp runs 300 records in batches of 10 from a feedSource through op
// into one sink that takes a millisecond per write, checkpointing into
// store.
func runOp(t *testing.T, name string, op Operator, src *feedSource, store *memStore) {
	t.Helper()
	sink := newMemSink("a", nil)
	sink.delay = func() time.Duration { return time.Millisecond }
	rt, err := New(fastConfig(), src, []NamedSink{{Name: "a", Sink: sink}}, store,
		Options{Operators: []NamedOperator{{Name: name, Operator: op}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// storedRecord is the record a stored checkpoint of a feedSource names.
func storedRecord(cp Checkpoint) (int64, error) {
	var p struct{ N int64 }
	err := json.Unmarshal(cp.Position, &p)
	return p.N, err
}

// Settled reports, never going back, how many of the batches Process was
// given are durable, and ends at all of them.
func TestSettlerLearnsWhatIsDurable(t *testing.T) {
	op := &settleOp{}
	runOp(t, "settle", op, &feedSource{total: 300, size: 10, keys: 50}, &memStore{})
	op.mu.Lock()
	defer op.mu.Unlock()
	if len(op.settled) == 0 || !slices.IsSorted(op.settled) || op.settled[len(op.settled)-1] != op.batches || op.batches != 30 {
		t.Fatalf("settled %v over %d batches", op.settled, op.batches)
	}
}

// syncOp is a state owner that writes its state at checkpoints: seen is
// the newest record it processed, synced what its last good Sync covered;
// the first fail Syncs fail.
type syncOp struct {
	mu                  sync.Mutex
	seen, synced        int64
	syncs, failed, fail int
	twice               chan struct{} // closed at the second Sync, when set
}

func (s *syncOp) Process(_ context.Context, in []Record) ([]Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range in {
		s.seen = max(s.seen, r.After[1].(int64))
	}
	return in, nil
}
func (*syncOp) Snapshot() ([]byte, error) { return nil, nil }
func (*syncOp) Restore([]byte) error      { return nil }
func (s *syncOp) Sync(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.syncs++
	if s.syncs == 2 && s.twice != nil {
		close(s.twice)
	}
	if s.failed < s.fail {
		s.failed++
		return errors.New("disk full")
	}
	s.synced = s.seen
	return nil
}

// Invariant 5: every checkpoint the store takes is covered by the state
// the operators wrote before it; a Sync that fails stores no checkpoint,
// and the next commit tries again.
func TestCheckpointsWaitForOperatorsState(t *testing.T) {
	op := &syncOp{fail: 1, twice: make(chan struct{})}
	// Half the records wait for two commits (the failed one and one
	// after it), so the retry happens while records still flow.
	src := &feedSource{total: 300, size: 10, keys: 50, readHook: func(n int) {
		if n == 150 {
			select {
			case <-op.twice:
			case <-time.After(30 * time.Second):
				t.Error("no second commit while the source waited")
			}
		}
	}}
	var commits int
	store := &memStore{}
	store.hook = func(cp Checkpoint) error {
		n, err := storedRecord(cp)
		if err != nil {
			return err
		}
		op.mu.Lock()
		defer op.mu.Unlock()
		if n > op.synced {
			t.Errorf("checkpoint at record %d, the operator's state covers %d", n, op.synced)
		}
		if op.failed < op.fail {
			t.Errorf("a checkpoint stored while the operator's Sync fails")
		}
		commits++
		return nil
	}
	runOp(t, "sync", op, src, store)
	if op.failed != 1 || commits == 0 || op.synced != 299 || string(store.cp.Position) != `{"n":299}` {
		t.Fatalf("%d failed syncs, %d commits, state covers %d, last checkpoint %s", op.failed, commits, op.synced, store.cp.Position)
	}
}

// A stop whose last Sync fails reports the failure: the final checkpoint
// is not stored, and the run does not end as if it had drained.
func TestAStopWithoutTheOperatorsStateFails(t *testing.T) {
	op := &syncOp{fail: 1 << 30}
	store := &memStore{}
	rt, err := New(fastConfig(), &feedSource{total: 50, size: 10}, []NamedSink{{Name: "a", Sink: newMemSink("a", nil)}}, store,
		Options{Operators: []NamedOperator{{Name: "sync", Operator: op}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "write the state of operator sync") {
		t.Fatalf("run: %v", err)
	}
	if store.ok {
		t.Fatalf("a checkpoint was stored: %s", store.cp.Position)
	}
}

// cpOp records the last record of each batch it was given, and what
// Checkpointed reports.
type cpOp struct {
	mu      sync.Mutex
	last    []int64 // per batch (from 1): its last record's number
	reports []uint64
}

func (c *cpOp) Process(_ context.Context, in []Record) ([]Record, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.last = append(c.last, in[len(in)-1].After[1].(int64))
	return in, nil
}
func (*cpOp) Snapshot() ([]byte, error) { return nil, nil }
func (*cpOp) Restore([]byte) error      { return nil }
func (c *cpOp) Checkpointed(n uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reports = append(c.reports, n)
}

// Checkpointed reports, after each stored checkpoint, exactly the batches
// it covers: the n-th batch ends at the record the checkpoint names.
func TestCheckpointedNamesTheBatchesCovered(t *testing.T) {
	op := &cpOp{}
	var committed []int64
	store := &memStore{}
	store.hook = func(cp Checkpoint) error {
		n, err := storedRecord(cp)
		if err != nil {
			return err
		}
		op.mu.Lock()
		committed = append(committed, n)
		op.mu.Unlock()
		return nil
	}
	runOp(t, "cp", op, &feedSource{total: 300, size: 10, keys: 50}, store)
	op.mu.Lock()
	defer op.mu.Unlock()
	if len(op.reports) == 0 || len(op.reports) != len(committed) || op.reports[len(op.reports)-1] != uint64(len(op.last)) {
		t.Fatalf("reports %v for %d checkpoints over %d batches", op.reports, len(committed), len(op.last))
	}
	for i, n := range op.reports {
		if op.last[n-1] != committed[i] {
			t.Fatalf("report %d: batch %d ends at record %d, the checkpoint names %d", i, n, op.last[n-1], committed[i])
		}
	}
}
