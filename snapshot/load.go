package snapshot

import (
	"slices"

	"github.com/sluice-cdc/sluice/pipeline"
)

// Loader is a source whose own initial load (the fast path of a new
// pipeline: an exported snapshot, consistent-snapshot readers) a restart
// can finish with the engine instead of starting over.
//
// The engine gives each batch of the load a position: the stream
// position the load's rows are versioned below, with the load's progress
// as incremental snapshot progress. That stream position is where the
// stream starts after the load (Invariant 3) and a transaction boundary
// (Invariant 2), and the runtime checkpoints it only once every earlier
// batch is durable (Invariant 1), so what it says was handed over is in
// every sink. Once a checkpoint holds one, a
// restart opens the source there, streams every change since, and reads
// the ranges the load had not handed over in chunks, each versioned at
// its high watermark, above every change before it (Invariant 12). The
// rows the load handed over stay: versioned at the load's snapshot, below
// every change the stream replays.
type Loader interface {
	// LoadState describes what a restart would still have to read, as
	// of the load batches Read has returned so far. ok is false when no
	// load runs, or when the load cannot be resumed (a table without a
	// key to order chunks by): its batches then carry no position, and a
	// restart loads again. Called on Read's goroutine, right after Read
	// returned a batch without a position; it does not block.
	LoadState() (st LoadState, ok bool)
}

// LoadState is an initial load's progress.
type LoadState struct {
	// Stream is the position the stream starts at after the load.
	Stream pipeline.Position
	// Tables are the load's tables not completely handed over.
	Tables []LoadTable
}

// LoadTable is one table whose load is not complete.
type LoadTable struct {
	Table pipeline.TableID
	// Started: the table's truncate barrier was handed over, and Ranges
	// are what remains. Otherwise a restart snapshots the table whole,
	// barrier first.
	Started bool
	// Ranges are the key ranges not completely handed over, (After,
	// UpTo] in the Reader's cursors; After is the last row handed over,
	// UpTo nil for no upper bound.
	Ranges   []LoadRange
	Rows     int64 // rows handed over
	Estimate int64
}

// LoadRange is one key range of a load.
type LoadRange struct{ After, UpTo Cursor }

// RangeProgress is what of one key range of a load Read handed over: the
// rows up to After, or all of them (Done). A source keeps one per range
// and calls Handed as Read hands each batch of the range over.
type RangeProgress struct {
	After, UpTo Cursor
	Done        bool
}

// Handed records a batch of the range handed over: last is the key of
// its last row (nil: it had none), final whether it ends the range.
func (r *RangeProgress) Handed(last Cursor, final bool) {
	if last != nil {
		r.After = last
	}
	r.Done = r.Done || final
}

// Remaining lists the ranges not Done.
func Remaining(ranges []*RangeProgress) []LoadRange {
	var out []LoadRange
	for _, r := range ranges {
		if !r.Done {
			out = append(out, LoadRange{After: r.After, UpTo: r.UpTo})
		}
	}
	return out
}

// loadPosition is the position of a load batch, or nil.
func (e *Engine) loadPosition() pipeline.Position {
	l, ok := e.src.(Loader)
	if !ok {
		return nil
	}
	st, ok := l.LoadState()
	if !ok {
		e.loading = nil
		return nil
	}
	e.loading = e.loading[:0:0]
	for _, t := range st.Tables {
		e.loading = append(e.loading, t.Table)
	}
	p := progress{Tables: append([]*tableProgress(nil), e.prog.Tables...)}
	var open []*tableProgress
	for _, lt := range st.Tables {
		t := &tableProgress{Database: lt.Table.Database, Schema: lt.Table.Schema, Name: lt.Table.Table, Run: e.loadRun,
			Barrier: !lt.Started, Requested: e.opened}
		if lt.Started {
			t.Planned, t.Rows, t.Estimate = true, lt.Rows, lt.Estimate
			for _, r := range lt.Ranges {
				t.Ranges = append(t.Ranges, &keyRange{After: r.After, UpTo: r.UpTo})
			}
			if len(t.Ranges) == 0 {
				continue // every row handed over: it stays known
			}
		}
		open = append(open, t)
	}
	for _, k := range e.prog.Known {
		if !slices.ContainsFunc(open, func(t *tableProgress) bool { return t.id().String() == k }) {
			p.Known = append(p.Known, k)
		}
	}
	p.Tables = append(p.Tables, open...)
	return wrap(st.Stream, p.marshal())
}
