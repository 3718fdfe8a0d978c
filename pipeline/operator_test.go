package pipeline

import (
	"context"
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

// Settled reports, never going back, how many of the batches Process was
// given are durable, and ends at all of them.
func TestSettlerLearnsWhatIsDurable(t *testing.T) {
	src := &feedSource{total: 300, size: 10, keys: 50}
	sink := newMemSink("a", nil)
	sink.delay = func() time.Duration { return time.Millisecond }
	op := &settleOp{}
	rt, err := New(fastConfig(), src, []NamedSink{{Name: "a", Sink: sink}}, &memStore{},
		Options{Operators: []NamedOperator{{Name: "settle", Operator: op}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	op.mu.Lock()
	defer op.mu.Unlock()
	if len(op.settled) == 0 || !slices.IsSorted(op.settled) || op.settled[len(op.settled)-1] != op.batches || op.batches != 30 {
		t.Fatalf("settled %v over %d batches", op.settled, op.batches)
	}
}
