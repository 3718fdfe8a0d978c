package window

import (
	"encoding/binary"
	"fmt"
	"slices"

	"go.etcd.io/bbolt"

	"github.com/sluice-cdc/sluice/pipeline/binform"
)

// The rows an engine holds are stored as logs, one per window, not one
// key per row: a state write appends one value per window that has rows
// changed since the last write (rowlog/<start><end><seq>), holding each
// changed row's contribution, and a window that leaves the state (dropped,
// or retained without its rows) takes its log with it: a handful of keys,
// not one delete per row.
//
// A row is logged in its home window: the latest-ending of its windows, so
// its log outlives the row. On load the latest entry of each row (highest
// seq) is the row, and only the windows still in the state (those with
// groups) are kept of its windows: a window that left the state was left
// by its rows too (forgetRows).
//
// Invariant (R1): a row's latest entry is in a log that is still stored
// only while the row is held, or is a "gone" entry. A row that moves to a
// window ending earlier than its home, or that is forgotten while its home
// log stays, has a gone entry written to the old log with the same seq as
// the write that moved it; at one seq a row's contribution wins over a
// gone entry.
//
// Each write's entries are new keys: the log grows by what changed. A log
// holding many more entries than rows at home in it (a row changed again
// and again) is rewritten whole at the next write (compactLogs), so its
// size stays within a constant factor of the rows.

var bucketRowLog = []byte("rowlog")

// entryGone is the first byte of a gone entry (a contribution's is 0 or 1:
// its tombstone flag).
const entryGone = 2

// logSlack is how many entries more than four per row at home a log may
// hold before it is rewritten.
var logSlack = 4096

// rowLog is what the engine knows of a window's log.
type rowLog struct {
	seqs    []uint64 // the writes that added to it, oldest first
	entries int      // entries in it
	homed   int      // rows whose latest entry is in it
}

// rowHome is a row whose latest entry is in the log of window home.
type rowHome struct {
	row  string
	home Bounds
}

// deadLog is the log of a window that left the state: its keys are
// deleted at the next write.
type deadLog struct {
	b    Bounds
	seqs []uint64
}

// homeOf is the latest-ending of c's windows; false when it has none.
func (c *contribution) homeOf() (Bounds, bool) {
	if len(c.windows) == 0 {
		return Bounds{}, false
	}
	h := c.windows[0]
	for _, b := range c.windows[1:] {
		if b.End > h.End || b.End == h.End && b.Start > h.Start {
			h = b
		}
	}
	return h, true
}

// leaveLog notes that window w's log goes with it.
func (e *Engine) leaveLog(w *window) {
	if len(w.log.seqs) > 0 {
		e.deadLogs = append(e.deadLogs, deadLog{w.b, w.log.seqs})
	}
	w.log = rowLog{}
}

// forget drops row c's hold: its latest entry stays only where the log
// goes too, or is marked gone at the next write (R1).
func (e *Engine) forget(row string, c *contribution, leaving Bounds) {
	delete(e.rows, row)
	if c.homed && c.home != leaving {
		e.leaving = append(e.leaving, rowHome{row, c.home})
	}
	c.homed = false
}

// logBlob is one write's entries for one log.
type logBlob struct {
	b []byte
	n int
}

// rowChanges adds to cs the logs' changes since the last write: the keys
// of logs gone, rewrites of logs grown too long, and one value per log
// with the rows changed.
func (e *Engine) rowChanges(cs *changeSet) error {
	if e.legacyRows {
		cs.clear(bucketRows) // every row is dirty: now in the logs
		e.legacyRows = false
	}
	var k []byte
	for _, d := range e.deadLogs {
		for _, s := range d.seqs {
			cs.delCopy(bucketRowLog, appendLogKey(k[:0], d.b, s))
		}
	}
	e.deadLogs = e.deadLogs[:0]
	e.compactLogs(cs)
	if len(e.dirtyRows) == 0 && len(e.leaving) == 0 {
		return nil
	}
	e.logSeq++
	blobs := map[Bounds]*logBlob{}
	blob := func(b Bounds) *logBlob {
		l := blobs[b]
		if l == nil {
			l = &logBlob{}
			blobs[b] = l
		}
		return l
	}
	gone := func(row string, home Bounds) {
		w := e.windows[home]
		if w == nil || w.retained {
			return // its log is gone with it
		}
		l := blob(home)
		l.b = append(binform.AppendString(l.b, row), 1, entryGone)
		l.n++
		w.log.homed--
	}
	for _, rh := range e.leaving {
		gone(rh.row, rh.home)
	}
	e.leaving = e.leaving[:0]
	var err error
	for row, c := range e.dirtyRows {
		h, held := c.homeOf()
		if c.homed && (!held || c.home != h) {
			gone(row, c.home)
			c.homed = false
		}
		if !held {
			continue
		}
		if e.scratch, err = c.appendTo(e.scratch[:0]); err != nil {
			return err
		}
		l := blob(h)
		l.b = binform.AppendString(l.b, row)
		l.b = append(binary.AppendUvarint(l.b, uint64(len(e.scratch))), e.scratch...)
		l.n++
		if !c.homed {
			e.windows[h].log.homed++
		}
		c.home, c.homed = h, true
	}
	clear(e.dirtyRows)
	for b, l := range blobs {
		w := e.windows[b]
		cs.put(bucketRowLog, appendLogKey(nil, b, e.logSeq), l.b)
		w.log.seqs = append(w.log.seqs, e.logSeq)
		w.log.entries += l.n
	}
	return nil
}

// compactLogs rewrites the logs that hold many more entries than rows at
// home: their keys are deleted and their rows made dirty, so this write
// logs each of them once.
func (e *Engine) compactLogs(cs *changeSet) {
	var k []byte
	for _, w := range e.windows {
		if w.retained || w.log.entries <= 4*w.log.homed+logSlack {
			continue
		}
		for _, s := range w.log.seqs {
			cs.delCopy(bucketRowLog, appendLogKey(k[:0], w.b, s))
		}
		w.log = rowLog{}
		// Rows that left it have no entry left there to mark gone.
		e.leaving = slices.DeleteFunc(e.leaving, func(rh rowHome) bool { return rh.home == w.b })
		for _, row := range w.rows {
			if c := e.rows[row]; c != nil && c.homed && c.home == w.b {
				c.homed = false
				e.dirtyRows[row] = c
			}
		}
	}
}

// appendLogKey appends the key of window b's log value of write seq: the
// window as in the groups bucket, then seq, big-endian.
func appendLogKey(k []byte, b Bounds, seq uint64) []byte {
	k = binary.BigEndian.AppendUint64(k, uint64(b.Start)^(1<<63))
	k = binary.BigEndian.AppendUint64(k, uint64(b.End)^(1<<63))
	return binary.BigEndian.AppendUint64(k, seq)
}

func parseLogKey(k []byte) (Bounds, uint64, bool) {
	if len(k) != 24 {
		return Bounds{}, 0, false
	}
	return Bounds{int64(binary.BigEndian.Uint64(k) ^ (1 << 63)), int64(binary.BigEndian.Uint64(k[8:]) ^ (1 << 63))},
		binary.BigEndian.Uint64(k[16:]), true
}

// logged is a row's latest entry found so far by loadLogs.
type logged struct {
	seq  uint64
	home Bounds
	v    []byte // nil: gone
}

// loadLogs reads the logs into e, whose windows (from the groups) are
// loaded: each row's latest entry, kept when it holds the row in windows
// still in the state. A log of a window not in the state (never left by
// a write that stored its groups) is deleted at the next write.
func (e *Engine) loadLogs(tx *bbolt.Tx) error {
	logs := tx.Bucket(bucketRowLog)
	if logs == nil {
		return nil
	}
	latest := map[string]logged{}
	err := logs.ForEach(func(k, v []byte) error {
		b, seq, ok := parseLogKey(k)
		if !ok {
			return fmt.Errorf("window state: corrupt row log key %x", k)
		}
		e.logSeq = max(e.logSeq, seq)
		w := e.windows[b]
		if w == nil || w.retained {
			e.deadLogs = append(e.deadLogs, deadLog{b: b, seqs: []uint64{seq}})
			return nil
		}
		w.log.seqs = append(w.log.seqs, seq)
		r := binform.NewReader(v)
		for r.Len() > 0 && r.Err() == nil {
			row, entry := r.Bytes(), r.Bytes()
			if r.Err() != nil || len(entry) == 0 {
				break
			}
			w.log.entries++
			if entry[0] == entryGone {
				entry = nil
			}
			if prev, ok := latest[string(row)]; ok && (prev.seq > seq || prev.seq == seq && entry == nil) {
				continue
			}
			latest[string(row)] = logged{seq: seq, home: b, v: entry}
		}
		if r.Err() != nil {
			return fmt.Errorf("window state: row log of %v: %w", b, r.Err())
		}
		return nil
	})
	if err != nil {
		return err
	}
	for row, l := range latest {
		if l.v == nil {
			continue
		}
		c, err := decodeContribution(l.v)
		if err != nil {
			return fmt.Errorf("window state: row %q: %w", row, err)
		}
		c.home, c.homed = l.home, true
		e.windows[l.home].log.homed++
		e.hold(row, c)
	}
	return nil
}

// hold puts loaded row c in e: its windows still in the state (a retained
// one among its retained windows), its live contribution added to their
// groups.
func (e *Engine) hold(row string, c *contribution) {
	var windows, retained []Bounds
	for _, b := range c.windows {
		switch w := e.windows[b]; {
		case w == nil:
		case w.retained:
			retained = append(retained, b)
		default:
			windows = append(windows, b)
		}
	}
	for _, b := range c.retained {
		if w := e.windows[b]; w != nil && w.retained && !containsBounds(retained, b) {
			retained = append(retained, b)
		}
	}
	c.windows, c.retained = windows, retained
	if len(c.windows) == 0 {
		return // left with its windows
	}
	e.rows[row] = c
	group, args, _ := c.values() // decoded by decodeContribution
	for _, b := range c.windows {
		w := e.windows[b]
		w.rows = append(w.rows, row)
		if c.deleted {
			continue
		}
		g := e.group(w, []byte(c.group), group)
		for i, a := range g.accs {
			a.add(args[i], c.time, c.version)
		}
		g.rows++
	}
}

func containsBounds(bs []Bounds, b Bounds) bool {
	for _, x := range bs {
		if x == b {
			return true
		}
	}
	return false
}
