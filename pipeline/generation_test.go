package pipeline

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestNextGeneration(t *testing.T) {
	for _, c := range []struct {
		name          string
		floor         uint64
		held, resumed bool
		from          uint64
		moved         bool
		want          uint64
	}{
		{"first run on empty sinks", 0, false, false, 0, false, 0},
		{"reset: sinks hold generation 0", 0, true, false, 0, false, 1},
		{"reset: sinks hold generation 4", 4, true, false, 0, false, 5},
		{"resume: sinks hold the checkpoint's", 3, true, true, 3, false, 3},
		{"resume: sinks hold less (a sink added since)", 1, true, true, 3, false, 3},
		{"resume: nothing held", 0, false, true, 3, false, 3},
		{"resume: a sink holds more (a run cut short after a bump)", 5, true, true, 3, false, 6},
		{"resume on another server", 3, true, true, 3, true, 4},
		{"resume on another server, a sink above", 7, true, true, 3, true, 8},
		{"resume on another server, nothing held", 0, false, true, 3, true, 4},
	} {
		if got := NextGeneration(c.floor, c.held, c.resumed, c.from, c.moved); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
}

// genSink is a memSink that keeps a generation.
type genSink struct {
	*memSink
	gen  uint64
	held bool
	err  error
	asks int
}

func (g *genSink) Generation(context.Context) (uint64, bool, error) {
	g.asks++
	if g.asks == 1 && g.err != nil {
		return 0, false, g.err
	}
	return g.gen, g.held, nil
}

// genSource records the floor it was given and whether Open came after.
type genSource struct {
	*feedSource
	floors   []uint64
	helds    []bool
	openedAt int // floors seen when Open was called
}

func (s *genSource) FloorGeneration(floor uint64, held bool) {
	s.floors, s.helds = append(s.floors, floor), append(s.helds, held)
}

func (s *genSource) Open(ctx context.Context, from Position) error {
	s.openedAt = len(s.floors)
	return s.feedSource.Open(ctx, from)
}

// The runtime opens the sinks, asks every GenerationKeeper (retrying a
// failed answer) and gives the source the highest recorded generation
// before it opens it (Invariant 10); sinks that keep none do not count.
func TestSourceGetsTheHighestGenerationBeforeOpen(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ev := &eventLog{}
	plain := newMemSink("plain", ev)
	low := &genSink{memSink: newMemSink("low", ev), gen: 2, held: true}
	high := &genSink{memSink: newMemSink("high", ev), gen: 5, held: true, err: errors.New("connection reset")}
	none := &genSink{memSink: newMemSink("none", ev)}
	src := &genSource{feedSource: &feedSource{total: 50, size: 10, events: ev}}
	rt, err := New(fastConfig(), src, []NamedSink{{Name: "plain", Sink: plain}, {Name: "low", Sink: low},
		{Name: "high", Sink: high}, {Name: "none", Sink: none}}, &memStore{events: ev}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if len(src.floors) != 1 || src.floors[0] != 5 || !src.helds[0] || src.openedAt != 1 {
		t.Fatalf("floors %v held %v, opened after %d of them; want [5] [true] after 1", src.floors, src.helds, src.openedAt)
	}
	if high.asks != 2 {
		t.Fatalf("the failing sink was asked %d times, want 2 (one retry)", high.asks)
	}

	nothing := &genSource{feedSource: &feedSource{total: 10, size: 10, events: ev}}
	rt, err = New(fastConfig(), nothing, []NamedSink{{Name: "plain", Sink: newMemSink("p", ev)},
		{Name: "none", Sink: &genSink{memSink: newMemSink("n", ev)}}}, &memStore{events: ev}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if len(nothing.floors) != 1 || nothing.helds[0] {
		t.Fatalf("no sink recorded a generation: floors %v held %v", nothing.floors, nothing.helds)
	}
}
