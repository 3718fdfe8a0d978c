package snaptest

import (
	"testing"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/snapshot"
)

// LoadWatch follows an initial load of one table whose integer keys are
// 1…rows (the first column), split every chunk rows, batch by batch, as a
// checkpoint would see it.
type LoadWatch struct {
	handed []bool
	chunk  int
	keyOf  func([]byte) int // a cursor's key; -1 for nil
	// States counts the states checked, Walking those taken while the
	// key was still being walked.
	States, Walking int
}

// NewLoadWatch watches a load of rows rows in ranges of chunk; keyOf
// reads a cursor's key (-1 for nil).
func NewLoadWatch(rows, chunk int, keyOf func([]byte) int) *LoadWatch {
	return &LoadWatch{handed: make([]bool, rows+1), chunk: chunk, keyOf: keyOf}
}

// After takes a batch the load handed over and the load state after it
// (ok false, or the table not started yet: only the rows count). The rows
// handed over so far plus the state's ranges must be the table, each row
// exactly once, and every range must end at a chunk-th row.
func (w *LoadWatch) After(t testing.TB, recs []pipeline.Record, st snapshot.LoadState, ok bool) {
	t.Helper()
	for _, rec := range recs {
		if rec.Op != pipeline.OpRead {
			continue
		}
		id := int(rec.After[0].(int64))
		if w.handed[id] {
			t.Fatalf("row %d handed over twice", id)
		}
		w.handed[id] = true
	}
	if !ok || len(st.Tables) == 0 || !st.Tables[0].Started {
		return
	}
	w.States++
	rows := len(w.handed) - 1
	covered := make([]int, rows+1)
	for _, rg := range st.Tables[0].Ranges {
		lo, hi := w.keyOf(rg.After), w.keyOf(rg.UpTo)
		if hi >= 0 && hi%w.chunk != 0 {
			t.Fatalf("a range ends at key %d, not at every %d-th row's", hi, w.chunk)
		}
		if hi < 0 {
			hi = rows
			// The tail, its lower end a boundary short of the end: the
			// walk was under way.
			if lo < rows-w.chunk && lo%w.chunk == 0 {
				w.Walking++
			}
		}
		for id := max(lo+1, 1); id <= hi; id++ {
			covered[id]++
		}
	}
	for id := 1; id <= rows; id++ {
		n := covered[id]
		if w.handed[id] {
			n++
		}
		if n != 1 {
			t.Fatalf("state %d: row %d is handed over (%v) and in %d ranges to read: %+v", w.States, id, w.handed[id], covered[id], st.Tables[0].Ranges)
		}
	}
}

// Done checks, once the load is over, that every row was handed over and
// that some state was taken while the key was walked.
func (w *LoadWatch) Done(t testing.TB) {
	t.Helper()
	for id := 1; id < len(w.handed); id++ {
		if !w.handed[id] {
			t.Fatalf("row %d not loaded", id)
		}
	}
	if w.Walking == 0 {
		t.Fatalf("none of %d states was taken while the key was walked", w.States)
	}
	t.Logf("%d states checked, %d of them while the walk went on", w.States, w.Walking)
}
