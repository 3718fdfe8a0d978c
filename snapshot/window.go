package snapshot

import (
	"strings"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/verify"
)

// window is one chunk between its low and high watermark. The worker
// fills chunk and high before it commits H; Read's goroutine does the
// rest; both under Engine.mu.
type window struct {
	stem  string // token without its ":L"/":H" suffix
	table *tableProgress
	rng   *keyRange
	limit int

	started bool             // L seen
	low     pipeline.Version // L's version
	touched map[string]struct{}
	cleared bool // a truncate of the table in the window

	chunk *Chunk
	high  *pipeline.Table // the table's shape at H

	done chan outcome // buffered; receives once
	over bool

	// barrierOnly: the watermark placing a fresh snapshot's truncate
	// barrier (no chunk).
	barrierOnly bool
}

// outcome is what became of a window.
type outcome struct {
	emitted int    // rows emitted
	redo    string // why the chunk must be read again ("" when emitted)
	err     error
}

func (w *window) finish(o outcome) {
	if !w.over {
		w.over = true
		w.done <- o
	}
}

const (
	lowSuffix     = ":L"
	highSuffix    = ":H"
	barrierSuffix = ":B"
)

// splitToken returns a watermark token's stem and its suffix; ok false
// for a token of no window of this engine.
func splitToken(tok string) (stem, kind string, ok bool) {
	for _, k := range []string{lowSuffix, highSuffix, barrierSuffix} {
		if strings.HasSuffix(tok, k) {
			return strings.TrimSuffix(tok, k), k, true
		}
	}
	return "", "", false
}

// touch records the keys of a change of the window's table.
func (w *window) touch(r *pipeline.Record) {
	for _, img := range [2][]any{r.Before, r.After} {
		if img == nil {
			continue
		}
		w.touched[verify.RowKey(r.Table, img)] = struct{}{}
	}
}

// sameShape reports whether two shapes have the same columns, in order,
// with the same types and key.
func sameShape(a, b *pipeline.Table) bool {
	if a == b {
		return true
	}
	if a == nil || b == nil || len(a.Columns) != len(b.Columns) || len(a.KeyIdx) != len(b.KeyIdx) {
		return false
	}
	for i := range a.Columns {
		x, y := a.Columns[i], b.Columns[i]
		if x.Name != y.Name || x.Type != y.Type || x.Elem != y.Elem || x.Key != y.Key ||
			x.Precision != y.Precision || x.Scale != y.Scale || x.SourceType != y.SourceType {
			return false
		}
	}
	for i := range a.KeyIdx {
		if a.KeyIdx[i] != b.KeyIdx[i] {
			return false
		}
	}
	return true
}

// sameColumns reports whether two shapes have the same column names,
// types and key: a chunk's catalog shape and the stream's shape built
// from the log may differ in metadata only.
func sameColumns(a, b *pipeline.Table) bool {
	if len(a.Columns) != len(b.Columns) {
		return false
	}
	for i := range a.Columns {
		x, y := a.Columns[i], b.Columns[i]
		if x.Name != y.Name || x.Type != y.Type || x.Elem != y.Elem || x.Key != y.Key {
			return false
		}
	}
	return true
}

// commitRing remembers the version of the first record of the most
// recent transactions the stream showed, by transaction id: enough to
// tell whether a transaction a chunk's read could not see had committed
// before the window's low watermark.
type commitRing struct {
	at   map[uint64]pipeline.Version
	ids  []uint64
	next int
	last uint64
}

const ringSize = 1 << 16

func (c *commitRing) add(txid uint64, v pipeline.Version) {
	if txid == 0 || txid == c.last {
		return
	}
	c.last = txid
	if c.at == nil {
		c.at = make(map[uint64]pipeline.Version, ringSize)
		c.ids = make([]uint64, 0, ringSize)
	}
	if _, ok := c.at[txid]; ok {
		return
	}
	if len(c.ids) < ringSize {
		c.ids = append(c.ids, txid)
	} else {
		delete(c.at, c.ids[c.next])
		c.ids[c.next] = txid
		c.next = (c.next + 1) % ringSize
	}
	c.at[txid] = v
}

// before reports whether the stream showed txid committing below v.
func (c *commitRing) before(txid uint64, v pipeline.Version) bool {
	at, ok := c.at[txid]
	return ok && at.Less(v)
}
