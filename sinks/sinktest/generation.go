package sinktest

import (
	"context"
	"testing"

	"github.com/sluice-cdc/sluice/pipeline"
)

// generation asks a pipeline.GenerationKeeper for its recorded generation.
func generation(t *testing.T, s pipeline.Sink) (uint64, bool) {
	t.Helper()
	k, ok := s.(pipeline.GenerationKeeper)
	if !ok {
		t.Fatalf("%T keeps versions but is no pipeline.GenerationKeeper (Invariant 10)", s)
	}
	g, held, err := k.Generation(context.Background())
	if err != nil {
		t.Fatalf("generation: %v", err)
	}
	return g, held
}

// testNewGeneration is a re-snapshot below what the target holds: a
// restore into a new cluster, whose LSNs start low again, after the
// target took changes at high LSNs. The sink must record each generation
// it writes (also across a restart), and the new generation's barrier,
// rows and changes must win over everything the old one left.
func testNewGeneration(t *testing.T, h Harness) {
	at := func(gen, lsn, index uint64) pipeline.Version { return pipeline.Version{gen, lsn, 0, index} }
	row := func(op pipeline.Op, v pipeline.Version, r []any) pipeline.Record {
		x := rec(op, 0, r)
		x.Version, x.Snapshot = v, op == pipeline.OpRead
		return x
	}
	s := open(t, h.Open(t))
	if _, held := generation(t, s); held {
		t.Fatalf("a fresh target reports a generation")
	}
	m := NewModel()
	old := []pipeline.Record{
		{Op: pipeline.OpTruncate, Table: Accounts, Version: at(0, 0x9000000, 0), Snapshot: true},
		row(pipeline.OpRead, at(0, 0x9000000, 1), account(1, "one", 100, "a")),
		row(pipeline.OpRead, at(0, 0x9000000, 1), account(2, "two", 200, nil)),
		row(pipeline.OpRead, at(0, 0x9000000, 1), account(3, "three", 300, nil)),
		row(pipeline.OpUpdate, at(0, 0x9800000, 2), account(1, "one later", 101, "b")),
	}
	write(t, s, old)
	m.Apply(old)
	if g, held := generation(t, s); !held || g != 0 {
		t.Fatalf("after writing generation 0: generation %d, held %v", g, held)
	}
	closeSink(t, s)
	s = open(t, h.Reopen(t))
	defer func() { closeSink(t, s) }()
	if g, held := generation(t, s); !held || g != 0 {
		t.Fatalf("after a restart: generation %d, held %v; want 0 recorded", g, held)
	}
	// The restored cluster: row 3 is gone, row 2 differs, LSNs are low.
	fresh := [][]pipeline.Record{
		{{Op: pipeline.OpTruncate, Table: Accounts, Version: at(1, 0x1600000, 0), Snapshot: true},
			row(pipeline.OpRead, at(1, 0x1600000, 1), account(1, "restored", 1, nil)),
			row(pipeline.OpRead, at(1, 0x1600000, 1), account(2, "restored two", 2, "r"))},
		{row(pipeline.OpUpdate, at(1, 0x1700000, 2), account(2, "changed after", 3, nil)),
			row(pipeline.OpInsert, at(1, 0x1700000, 3), account(4, "new", 4, nil))},
	}
	for _, b := range fresh {
		write(t, s, b)
		m.Apply(b)
	}
	check(t, h, m, "after the new generation")
	live := m.Live(Accounts)
	if len(live) != 3 || !Equal(live[Key([]any{int64(2)})][1], "changed after") {
		t.Fatalf("model self-check failed: %v", live)
	}
	if g, held := generation(t, s); !held || g != 1 {
		t.Fatalf("after writing generation 1: generation %d, held %v", g, held)
	}
	closeSink(t, s)
	s = open(t, h.Reopen(t))
	if g, held := generation(t, s); !held || g != 1 {
		t.Fatalf("generation 1 after a restart: generation %d, held %v", g, held)
	}
	check(t, h, m, "after the new generation and a restart")
}
