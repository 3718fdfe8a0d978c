package window

import (
	"fmt"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/pipeline/binform"
)

// Accumulator is the state of one count(), count, sum or avg aggregate,
// for an operator that keeps the multisets of min, max and
// count_distinct in a store of its own (transform/aggregate): the same
// exact arithmetic and the same results as a window's.
type Accumulator struct{ a acc }

// NewAccumulator returns an empty accumulator of f, one of CountRows,
// Count, Sum and Avg.
func NewAccumulator(f Func) (Accumulator, error) {
	switch f {
	case CountRows, Count, Sum, Avg:
		return Accumulator{newAcc(f)}, nil
	}
	return Accumulator{}, fmt.Errorf("%s keeps a multiset, not an accumulator", f)
}

// Add counts v (nil: NULL).
func (a Accumulator) Add(v any) { a.a.add(v, 0, pipeline.Version{}) }

// Remove takes out what Add(v) counted.
func (a Accumulator) Remove(v any) { a.a.remove(v, 0, pipeline.Version{}) }

// Result is the aggregate's value (nil: NULL).
func (a Accumulator) Result() any { return a.a.result() }

// Append appends the accumulator's state to b, as ReadAccumulator reads it.
func (a Accumulator) Append(b []byte) ([]byte, error) { return appendAcc(b, a.a) }

// ReadAccumulator reads an accumulator of f that Append wrote.
func ReadAccumulator(r *binform.Reader, f Func) (Accumulator, error) {
	a, err := NewAccumulator(f)
	if err != nil {
		return a, err
	}
	return a, readAcc(r, a.a)
}
