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
	// keys are the chunk's keys (and keyed's), made only once touched
	// outgrows the chunk or an unchanged value needs them (needKeys):
	// while the stream touches few keys of the table, no key of the
	// chunk's rows is computed.
	keys map[string]struct{}
	high *pipeline.Table // the table's shape at H

	// keyed: a window reading only these keys again (no range); then, the
	// range's move it makes once no key needs another read.
	keyed [][]any
	then  outcome
	// unchanged holds the keys whose change in the window carried an
	// unchanged value (Postgres unchanged TOAST): dropped from the chunk
	// like every touched key, the sink may hold no value to keep for
	// them, so they are read again in a window of their own.
	unchanged map[string][]any

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
	// read is the chunk's rows emitted before any repair deletes, and
	// their records' sizes (took is the worker's to fill in).
	read chunkRead
	err  error
	// refetch: keys to read again (window.unchanged); the range moves on
	// to last (or is done, short) only once they are.
	refetch [][]any
	last    Cursor
	short   bool
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

// changeKeys are the keys a change touches, computed once per change
// however many windows of its table are open.
type changeKeys struct {
	old, new  string // "" when the image is absent
	unchanged []any  // the new key's values when the change sent an unchanged value
}

func keysOf(r *pipeline.Record) changeKeys {
	var k changeKeys
	if r.Before != nil {
		k.old = verify.RowKey(r.Table, r.Before)
	}
	if r.After != nil {
		k.new = verify.RowKey(r.Table, r.After)
		if hasUnchanged(r.After) {
			k.unchanged = r.Key()
		}
	}
	return k
}

// touch records the keys of a change of the window's table. Once the
// chunk is read and the set outgrows it, only the chunk's own keys are
// kept, so the set stays within about the chunk's size however many
// changes the window sees (Invariant 6).
func (w *window) touch(k changeKeys) {
	defer func() {
		if w.chunk != nil && w.keys == nil && len(w.touched) > max(len(w.chunk.Rows)+len(w.keyed), minTouched) {
			w.needKeys()
		}
	}()
	for _, key := range [2]string{k.old, k.new} {
		if key == "" {
			continue
		}
		if w.keys != nil {
			if _, in := w.keys[key]; !in {
				continue
			}
		}
		w.touched[key] = struct{}{}
		if key == k.new && k.unchanged != nil {
			if w.unchanged == nil {
				w.unchanged = map[string][]any{}
			}
			w.unchanged[key] = k.unchanged
		}
	}
}

func hasUnchanged(img []any) bool {
	for _, v := range img {
		if v == pipeline.UnchangedValue {
			return true
		}
	}
	return false
}

// minTouched is the touched keys a window keeps without filtering them by
// its chunk's keys, however small the chunk.
const minTouched = 1024

// setChunk registers the chunk (before H is written).
func (w *window) setChunk(c *Chunk) {
	w.chunk = c
	if len(w.touched) > max(len(c.Rows)+len(w.keyed), minTouched) {
		w.needKeys()
	}
}

// needKeys makes the set of the chunk's keys (and of the keys a keyed
// window asked for, whose changes count even without a row) and forgets
// the touched keys that are not among them.
func (w *window) needKeys() {
	if w.keys != nil || w.chunk == nil {
		return
	}
	keys := make(map[string]struct{}, len(w.chunk.Rows)+len(w.keyed))
	for _, row := range w.chunk.Rows {
		keys[verify.RowKey(w.chunk.Table, row)] = struct{}{}
	}
	for _, k := range w.keyed {
		keys[verify.Key(k)] = struct{}{}
	}
	w.keys = keys
	for k := range w.touched {
		if _, in := w.keys[k]; !in {
			delete(w.touched, k)
			delete(w.unchanged, k)
		}
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
	vers []pipeline.Version // vers[i] is at[ids[i]], for scans (atOrAbove)
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
		// Grown as transactions arrive, not sized for ringSize at once:
		// a stream of few large transactions keeps it small (4 MiB).
		c.at = make(map[uint64]pipeline.Version)
	}
	if _, ok := c.at[txid]; ok {
		return
	}
	if len(c.ids) < ringSize {
		c.ids, c.vers = append(c.ids, txid), append(c.vers, v)
	} else {
		delete(c.at, c.ids[c.next])
		c.ids[c.next], c.vers[c.next] = txid, v
		c.next = (c.next + 1) % ringSize
	}
	c.at[txid] = v
}

// atOrAbove returns a transaction the stream showed committing below v
// whose id is at or above from in circular 32-bit order (within 2^31 of
// it, which every id the ring holds is).
func (c *commitRing) atOrAbove(from uint64, v pipeline.Version) (uint64, bool) {
	for i, id := range c.ids {
		if int32(uint32(id)-uint32(from)) >= 0 && c.vers[i].Less(v) {
			return id, true
		}
	}
	return 0, false
}

// before reports whether the stream showed txid committing below v.
func (c *commitRing) before(txid uint64, v pipeline.Version) bool {
	at, ok := c.at[txid]
	return ok && at.Less(v)
}
