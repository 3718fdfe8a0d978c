package state

import "sync"

// Floor tracks, for an operator that may forget what only replayed inputs
// could ask for (a dedup's expired keys, a nest's record of where a child
// row was moved from), the least value of some order (event time,
// version) that an input a restart could hand again can carry: that of
// the batches after the last stored checkpoint, and of the last batch it
// covers. It assumes what the sources guarantee of it: an input later in
// the stream carries a value no lower than those of the batches before it
// (commit times and versions grow along the stream; docs/versions.md).
//
// Note is called by Process, Checkpointed by the checkpoint goroutine;
// both are safe to call concurrently.
type Floor[T any] struct {
	// Less orders the values.
	Less func(a, b T) bool

	mu      sync.Mutex
	batches uint64        // Note calls in this run
	mins    []batchMin[T] // per batch with a value, not yet covered (and the last covered)
	floor   T
	set     bool
}

type batchMin[T any] struct {
	n   uint64
	min T
}

// Note counts one batch (a Process call) whose least value is min (ok:
// false when its inputs carry none) and returns the floor as the last
// Checkpointed call left it (ok: false while no checkpoint covers a batch
// with a value): what lies below it no replay can ask for.
func (f *Floor[T]) Note(min T, has bool) (floor T, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.batches++
	if has {
		f.mins = append(f.mins, batchMin[T]{f.batches, min})
	}
	return f.floor, f.set
}

// Checkpointed learns that a stored checkpoint covers the first n batches
// (pipeline.Checkpointed): the floor moves to the least value from the
// last of them on. A restart hands again only the batches after n, whose
// inputs carry values no lower than batch n's.
func (f *Floor[T]) Checkpointed(n uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	i := 0
	for i+1 < len(f.mins) && f.mins[i+1].n <= n {
		i++
	}
	if len(f.mins) == 0 || f.mins[i].n > n {
		return // no batch with a value is covered yet
	}
	f.mins = f.mins[i:]
	m := f.mins[0].min
	for _, b := range f.mins[1:] {
		if f.Less(b.min, m) {
			m = b.min
		}
	}
	f.floor, f.set = m, true
}
