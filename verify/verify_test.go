package verify

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"sync"
	"testing"

	"github.com/sluice-cdc/sluice/pipeline"
)

var people = &pipeline.Table{ID: pipeline.TableID{Schema: "public", Table: "people"}, KeyIdx: []int{0},
	Columns: []pipeline.Column{{Name: "id", Type: pipeline.TypeInt64, Key: true}, {Name: "score", Type: pipeline.TypeFloat64}}}

// fakeDB is a source and a sink at once: rows per side, and a log
// position the sink's checkpoint follows.
type fakeDB struct {
	mu         sync.Mutex
	src, sink  map[int64]float64
	pos, cp    int
	onCheckpnt func()
}

func (f *fakeDB) Tables() []pipeline.TableID { return []pipeline.TableID{people.ID} }
func (f *fakeDB) Scan(_ context.Context, _ pipeline.TableID, shape func(*pipeline.Table) error, row func([]any) error) error {
	f.mu.Lock()
	rows := rowsOf(f.src)
	f.mu.Unlock()
	if err := shape(people); err != nil {
		return err
	}
	for _, r := range rows {
		if err := row(r); err != nil {
			return err
		}
	}
	return nil
}
func (f *fakeDB) Now(context.Context) (Mark, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return intMark(f.pos), nil
}

type sinkSide struct{ f *fakeDB }

func (s sinkSide) Rows(context.Context, *pipeline.Table) ([][]any, error) {
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	return rowsOf(s.f.sink), nil
}

func rowsOf(m map[int64]float64) [][]any {
	var out [][]any
	for k, v := range m {
		out = append(out, []any{k, v})
	}
	return out
}

type intMark int

func (m intMark) String() string { return strconv.Itoa(int(m)) }
func (m intMark) CoveredBy(cp pipeline.Position) (bool, error) {
	n, err := strconv.Atoi(string(cp))
	return n >= int(m), err
}

func (f *fakeDB) checkpoint(context.Context) (pipeline.Position, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.onCheckpnt != nil {
		f.onCheckpnt()
	}
	return pipeline.Position(strconv.Itoa(f.cp)), nil
}

func TestRunFindsDifferencesAndIgnoresChangesInFlight(t *testing.T) {
	newDB := func() *fakeDB {
		f := &fakeDB{src: map[int64]float64{}, sink: map[int64]float64{}}
		for i := range int64(100) {
			f.src[i], f.sink[i] = float64(i), float64(i)
		}
		return f
	}
	run := func(f *fakeDB) Report {
		rep, err := Run(context.Background(), f, []NamedSink{{Name: "s", Sink: sinkSide{f}}}, Options{Checkpoint: f.checkpoint})
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	if rep := run(newDB()); rep.Outcome() != 0 || rep.Results[0].SourceRows != 100 || rep.Results[0].Rechecked {
		t.Fatalf("equal: %+v", rep)
	}

	// A changed value, a negative zero, a missing and an unexpected row.
	f := newDB()
	f.sink[7] = 70
	f.src[8], f.sink[8] = math.Copysign(0, -1), 0
	delete(f.sink, 9)
	f.sink[1000] = 1
	rep := run(f)
	r := rep.Results[0]
	if rep.Outcome() != 1 || r.Differing != 4 || !r.Rechecked {
		t.Fatalf("different: %+v", rep)
	}
	kinds := map[string]string{}
	for _, d := range r.Diffs {
		kinds[d.Key] = d.Kind
		if d.Kind == "values" && (len(d.Columns) != 1 || d.Columns[0].Column != "score") {
			t.Fatalf("diff %+v", d)
		}
	}
	k := func(n int64) string { return Key([]any{n}) }
	if kinds[k(7)] != "values" || kinds[k(8)] != "values" || kinds[k(9)] != "missing" || kinds[k(1000)] != "unexpected" {
		t.Fatalf("kinds %v", kinds)
	}

	// A change the pipeline has not delivered yet: the first pass sees
	// it, the recheck waits for the checkpoint to pass the position and
	// finds the sink caught up.
	f = newDB()
	f.src[5], f.pos, f.cp = 555, 10, 9
	f.onCheckpnt = func() { f.sink[5], f.cp = 555, 10 } // the pipeline catches up
	if rep := run(f); rep.Outcome() != 0 || !rep.Results[0].Rechecked {
		t.Fatalf("in flight: %+v", rep)
	}
}

func TestUnreadableSinkCannotCompare(t *testing.T) {
	f := &fakeDB{src: map[int64]float64{1: 1}, sink: map[int64]float64{1: 1}}
	rep, err := Run(context.Background(), f, []NamedSink{{Name: "kafka", Err: ErrNotSupported}}, Options{})
	if err != nil || rep.Outcome() != 2 || rep.Results[0].Error == "" {
		t.Fatalf("%+v %v", rep, err)
	}
}

// genDB streams n rows generated on the fly on both sides (nothing held
// in memory), with chosen differences in the sink; it reads by key too,
// counting scans and keyed reads.
type genDB struct {
	mu          sync.Mutex
	n           int64
	changed     map[int64]float64 // sink values that differ
	missing     map[int64]bool
	srcOverride map[int64]float64 // source values not yet in the sink
	scans       int
	keyed       int
	onSettle    func()
}

func (g *genDB) value(id int64) float64 { return float64(id) / 8 }

func (g *genDB) Tables() []pipeline.TableID { return []pipeline.TableID{people.ID} }
func (g *genDB) Scan(_ context.Context, _ pipeline.TableID, shape func(*pipeline.Table) error, row func([]any) error) error {
	g.mu.Lock()
	g.scans++
	g.mu.Unlock()
	if err := shape(people); err != nil {
		return err
	}
	for id := range g.n {
		v := g.value(id)
		g.mu.Lock()
		if o, ok := g.srcOverride[id]; ok {
			v = o
		}
		g.mu.Unlock()
		if err := row([]any{id, v}); err != nil {
			return err
		}
	}
	return nil
}
func (g *genDB) Now(context.Context) (Mark, error)      { return intMark(1), nil }
func (g *genDB) MarkOf(pipeline.Position) (Mark, error) { return intMark(1), nil }
func (g *genDB) KeyRows(_ context.Context, _ pipeline.TableID, keys [][]any) (*pipeline.Table, [][]any, Mark, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.keyed++
	var out [][]any
	for _, k := range keys {
		id := k[0].(int64)
		if id < g.n {
			v := g.value(id)
			if o, ok := g.srcOverride[id]; ok {
				v = o
			}
			out = append(out, []any{id, v})
		}
	}
	return people, out, intMark(1), nil
}

type genSink struct{ g *genDB }

func (s genSink) sinkRow(id int64) ([]any, bool) {
	g := s.g
	if g.missing[id] {
		return nil, false
	}
	v := g.value(id)
	if c, ok := g.changed[id]; ok {
		v = c
	}
	return []any{id, v}, true
}
func (s genSink) Rows(context.Context, *pipeline.Table) ([][]any, error) {
	return nil, fmt.Errorf("Rows must not be used when Scan is there")
}
func (s genSink) Scan(_ context.Context, _ *pipeline.Table, row func([]any) error) error {
	for id := range s.g.n + 1 { // one unexpected row past the source's end
		s.g.mu.Lock()
		r, ok := s.sinkRow(id)
		s.g.mu.Unlock()
		if ok {
			if err := row(r); err != nil {
				return err
			}
		}
	}
	return nil
}
func (s genSink) RowsByKey(_ context.Context, _ *pipeline.Table, keys [][]any) ([][]any, error) {
	s.g.mu.Lock()
	defer s.g.mu.Unlock()
	var out [][]any
	for _, k := range keys {
		if r, ok := s.sinkRow(k[0].(int64)); ok && k[0].(int64) <= s.g.n {
			out = append(out, r)
		}
	}
	return out, nil
}

// A large table is compared by bucket sums: only the rows of the
// differing buckets are held and compared key by key, and the recheck
// reads only the differing keys.
func TestRunNarrowsToDifferingBucketsAndRechecksByKey(t *testing.T) {
	g := &genDB{n: 100_000, changed: map[int64]float64{17: -1, 75_000: 0.5}, missing: map[int64]bool{99_999: true},
		srcOverride: map[int64]float64{123: 9.75}} // 123: in flight, the sink catches up at the recheck
	cp := 0
	checkpoint := func(context.Context) (pipeline.Position, error) {
		if cp++; cp == 1 {
			g.mu.Lock()
			g.changed[123] = 9.75
			g.mu.Unlock()
		}
		return pipeline.Position("1"), nil
	}
	rep, err := Run(context.Background(), g, []NamedSink{{Name: "s", Sink: genSink{g}}}, Options{Checkpoint: checkpoint, Buckets: 4096})
	if err != nil {
		t.Fatal(err)
	}
	r := rep.Results[0]
	kinds := map[string]string{}
	for _, d := range r.Diffs {
		kinds[d.Key] = d.Kind
	}
	k := func(n int64) string { return Key([]any{n}) }
	if r.Differing != 4 || kinds[k(17)] != "values" || kinds[k(75_000)] != "values" || kinds[k(99_999)] != "missing" ||
		kinds[k(100_000)] != "unexpected" || !r.Rechecked || r.SourceRows != 100_000 || r.SinkRows != 100_000 {
		t.Fatalf("%+v", r)
	}
	// Five differing buckets of about 24 rows each, on both sides.
	if r.Narrowed > 5*2*60 {
		t.Fatalf("narrowed to %d rows: the second pass held more than the differing buckets", r.Narrowed)
	}
	if g.scans != 2 || g.keyed != 3 {
		t.Fatalf("%d source scans and %d keyed reads; want the first pass, the narrowing pass, then three keyed rechecks", g.scans, g.keyed)
	}
}
