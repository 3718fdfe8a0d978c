package pipeline

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// ownerOp is a pass-through operator that owns state: it records what
// Begin was told and whether Process ran before it.
type ownerOp struct {
	mu            sync.Mutex
	begins        []bool
	processed     int
	earlyProcess  bool
	fail          error
	openedAtBegin *bool
	src           *openSource
}

func (o *ownerOp) Begin(_ context.Context, resumed bool) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.begins = append(o.begins, resumed)
	if o.src != nil {
		opened := o.src.opened
		o.openedAtBegin = &opened
	}
	return o.fail
}

func (o *ownerOp) Process(_ context.Context, in []Record) ([]Record, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.begins) == 0 {
		o.earlyProcess = true
	}
	o.processed += len(in)
	return in, nil
}

func (o *ownerOp) Snapshot() ([]byte, error) { return nil, nil }
func (o *ownerOp) Restore([]byte) error      { return nil }

// openSource records whether Open was called.
type openSource struct {
	*feedSource
	opened bool
}

func (s *openSource) Open(ctx context.Context, from Position) error {
	s.opened = true
	return s.feedSource.Open(ctx, from)
}

// An operator that owns its state is told, before the source opens and
// before its first batch, whether the run resumes from a checkpoint:
// false on the first run (and whenever no checkpoint was ever stored),
// true once one was; an error from Begin stops the run as an open error
// without opening the source.
func TestStateOwnerToldWhetherTheRunResumes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	store := &memStore{events: &eventLog{}}
	run := func(op *ownerOp, src *openSource) error {
		op.src = src
		rt, err := New(fastConfig(), src, []NamedSink{{Name: "mem", Sink: newMemSink("mem", &eventLog{})}}, store,
			Options{Operators: []NamedOperator{{Name: "owner", Operator: op}}})
		if err != nil {
			t.Fatal(err)
		}
		return rt.Run(ctx)
	}
	newSource := func() *openSource {
		return &openSource{feedSource: &feedSource{total: 200, size: 10, events: &eventLog{}}}
	}

	first := &ownerOp{}
	if err := run(first, newSource()); err != nil {
		t.Fatal(err)
	}
	if len(first.begins) != 1 || first.begins[0] || first.earlyProcess || *first.openedAtBegin {
		t.Fatalf("first run: begins %v, process before begin %v, source opened before begin %v",
			first.begins, first.earlyProcess, *first.openedAtBegin)
	}
	if first.processed != 200 || !store.ok {
		t.Fatalf("first run processed %d records, checkpoint stored %v", first.processed, store.ok)
	}

	second := &ownerOp{}
	if err := run(second, newSource()); err != nil {
		t.Fatal(err)
	}
	if len(second.begins) != 1 || !second.begins[0] {
		t.Fatalf("resumed run: begins %v, want [true]", second.begins)
	}

	refused := &ownerOp{fail: errors.New("state does not cover the checkpoint")}
	src := newSource()
	err := run(refused, src)
	var oe *OpenError
	if !errors.As(err, &oe) || src.opened || refused.processed != 0 {
		t.Fatalf("refusing operator: err %v (open error %v), source opened %v, processed %d",
			err, oe != nil, src.opened, refused.processed)
	}
}
