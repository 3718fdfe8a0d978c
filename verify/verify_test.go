package verify

import (
	"context"
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
func (f *fakeDB) Rows(_ context.Context, _ pipeline.TableID) (*pipeline.Table, [][]any, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return people, rowsOf(f.src), nil
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
