package window

import (
	"encoding/binary"
	"fmt"
	"slices"

	"go.etcd.io/bbolt"

	"github.com/sluice-cdc/sluice/pipeline/binform"
)

// The engine's state in a bbolt file, written with what changed
// (Changes, Flush) and read back whole on start (Load):
//
//	rowlog/<start><end><seq>       the rows changed at write seq whose
//	                               home is the window (rowlog.go): per row
//	                               its key and contribution (tombstone
//	                               flag, version, event time, group
//	                               values, one argument per aggregate, its
//	                               windows and the retained windows it
//	                               reached), or a gone mark
//	rows/<row key>                 a contribution, in a state written
//	                               before the row logs (read, then moved
//	                               into them)
//	groups/<start><end><group key> a group's emission state: changes
//	                               applied, generation, origin, whether its
//	                               result is written (partial or final) and
//	                               whether it changed since, its group
//	                               values; in a retained window (late:
//	                               correct) also its rows and aggregates
//	meta/watermark                 the watermark
//
// The accumulators of windows with rows are not stored: Load adds every
// live contribution again, so a write costs what changed, never the
// state's size; a retained window's are stored (accstate.go).
// Rows carry their versions, so the state may run ahead of the checkpoint
// (a replay changes nothing; Invariant 5 as the join keeps it).

var (
	bucketRows   = []byte("rows")
	bucketGroups = []byte("groups")
	bucketMeta   = []byte("meta")
	keyWatermark = []byte("watermark")
)

// Flush writes what changed since the last Flush (or Load) into tx.
func (e *Engine) Flush(tx *bbolt.Tx) error { return flush(tx, e.Changes) }

// flush writes into tx the changes an engine's Changes gives.
func flush(tx *bbolt.Tx, changes func(*changeSet) error) error {
	if _, _, _, err := buckets(tx); err != nil {
		return err
	}
	var cs changeSet
	if err := changes(&cs); err != nil {
		return err
	}
	return cs.apply(tx)
}

// Changes adds what changed since the last Changes (or Load) to cs and
// forgets it: cs must be written.
func (e *Engine) Changes(cs *changeSet) error {
	if err := e.encodeErr; err != nil {
		return err
	}
	if err := e.rowChanges(cs); err != nil {
		return err
	}
	cs.grow(bucketGroups, len(e.stale))
	var k, b []byte
	var err error
	for _, sg := range e.stale {
		w, g := sg.w, sg.g
		g.stale = false
		k = appendGroupStoreKey(k[:0], groupRef{w.b, g.name})
		if w.dropped {
			cs.delCopy(bucketGroups, k)
			continue
		}
		if b, err = g.appendTo(b[:0], w.retained); err != nil {
			return err
		}
		cs.putCopy(bucketGroups, k, b)
	}
	e.stale = e.stale[:0]
	cs.put(bucketMeta, keyWatermark, binary.AppendVarint(nil, e.watermark))
	return nil
}

// Load rebuilds an engine from what Flush wrote into tx (an empty file
// gives an empty engine).
func Load(tx *bbolt.Tx, o EngineOptions) (*Engine, error) {
	e := NewEngine(o)
	rows, groups, meta, err := buckets(tx)
	if err != nil {
		return nil, err
	}
	if e.watermark, err = loadWatermark(meta); err != nil {
		return nil, err
	}
	err = groups.ForEach(func(k, v []byte) error {
		ref, ok := parseGroupStoreKey(k)
		if !ok {
			return fmt.Errorf("window state: corrupt group key %q", k)
		}
		r := binform.NewReader(v)
		changes, gen := r.Uvarint(), r.Uvarint()
		origin := r.Version()
		flags := r.Byte()
		vals := readValues(r)
		if r.Err() != nil {
			return fmt.Errorf("window state: group %q: %w", k, r.Err())
		}
		w := e.window(ref.b)
		g := e.group(w, []byte(ref.key), vals)
		g.changes, g.gen, g.origin = changes, gen, origin
		e.seen(origin)
		g.emitted, g.dirty, g.partial = flags&1 != 0, flags&2 != 0, flags&4 != 0
		if flags&8 != 0 {
			w.retained = true
			g.rows = r.Varint()
			for _, a := range g.accs {
				if err := readAcc(r, a); err != nil {
					return fmt.Errorf("window state: group %q: %w", k, err)
				}
			}
		}
		if g.dirty {
			w.change(g)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	// A state written before the row logs holds a key per row: its rows
	// are held, made dirty so the next write logs them, and the bucket is
	// emptied then.
	err = rows.ForEach(func(k, v []byte) error {
		c, err := decodeContribution(v)
		if err != nil {
			return fmt.Errorf("window state: row %q: %w", k, err)
		}
		row := string(k)
		if e.hold(row, c); e.rows[row] == c {
			e.dirtyRows[row] = c
		}
		e.legacyRows = true
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := e.loadLogs(tx); err != nil {
		return nil, err
	}
	for _, w := range e.windows {
		w.closed = e.watermark != NoWatermark && w.b.End <= e.watermark
	}
	return e, nil
}

// loadWatermark reads the stored watermark (NoWatermark when none).
func loadWatermark(meta *bbolt.Bucket) (int64, error) {
	v := meta.Get(keyWatermark)
	if v == nil {
		return NoWatermark, nil
	}
	wm, n := binary.Varint(v)
	if n <= 0 {
		return 0, fmt.Errorf("window state: corrupt watermark")
	}
	return wm, nil
}

// group returns window w's group of key, made with its accumulators when
// new.
func (e *Engine) group(w *window, key []byte, vals []any) *group {
	g := w.groups[string(key)]
	if g == nil {
		g = &group{name: string(key), key: vals, accs: make([]acc, len(e.opts.Aggs))}
		for i, a := range e.opts.Aggs {
			g.accs[i] = newAcc(a.Func)
		}
		w.groups[g.name] = g
	}
	return g
}

func buckets(tx *bbolt.Tx) (rows, groups, meta *bbolt.Bucket, err error) {
	get := func(name []byte) *bbolt.Bucket {
		if b := tx.Bucket(name); b != nil || !tx.Writable() {
			return b
		}
		b, e := tx.CreateBucket(name)
		if e != nil && err == nil {
			err = e
		}
		return b
	}
	rows, groups, meta = get(bucketRows), get(bucketGroups), get(bucketMeta)
	if err == nil && (rows == nil || groups == nil || meta == nil) {
		err = fmt.Errorf("window state: the file has no state (an empty file must be opened for writing first)")
	}
	return rows, groups, meta, err
}

// appendGroupStoreKey appends r's key in the groups bucket to b: groups
// are ordered by window start, end, then group key (the times with their
// sign bit flipped, big-endian).
func appendGroupStoreKey(b []byte, r groupRef) []byte {
	b = binary.BigEndian.AppendUint64(b, uint64(r.b.Start)^(1<<63))
	b = binary.BigEndian.AppendUint64(b, uint64(r.b.End)^(1<<63))
	return append(b, r.key...)
}

func parseGroupStoreKey(k []byte) (groupRef, bool) {
	if len(k) < 16 {
		return groupRef{}, false
	}
	return groupRef{b: Bounds{int64(binary.BigEndian.Uint64(k) ^ (1 << 63)), int64(binary.BigEndian.Uint64(k[8:]) ^ (1 << 63))},
		key: string(k[16:])}, true
}

// appendTo appends c's encoding to b.
func (c *contribution) appendTo(b []byte) ([]byte, error) {
	flag := byte(0)
	if c.deleted {
		flag = 1
	}
	b = binform.AppendVersion(append(b, flag), c.version)
	b = binary.AppendVarint(b, c.time)
	b = append(b, c.vals...) // group values, then arguments
	for _, ws := range [][]Bounds{c.windows, c.retained} {
		b = binary.AppendUvarint(b, uint64(len(ws)))
		for _, w := range ws {
			b = binary.AppendVarint(binary.AppendVarint(b, w.Start), w.End)
		}
	}
	return b, nil
}

// readBounds reads a list of windows appended as a count and bounds.
func readBounds(r *binform.Reader) ([]Bounds, error) {
	n := r.Uvarint()
	if r.Err() != nil || n > uint64(r.Len()) {
		return nil, binform.ErrCorrupt
	}
	var out []Bounds
	for range n {
		out = append(out, Bounds{r.Varint(), r.Varint()})
	}
	return out, r.Err()
}

func decodeContribution(v []byte) (*contribution, error) {
	r := binform.NewReader(v)
	c := &contribution{deleted: r.Byte() == 1}
	c.version = r.Version()
	c.time = r.Varint()
	rest := r.Rest()
	group := readValues(r)
	readValues(r)
	c.vals = slices.Clone(rest[:len(rest)-r.Len()])
	var err error
	if c.windows, err = readBounds(r); err != nil {
		return nil, err
	}
	if r.Len() > 0 { // written before windows were retained: none
		if c.retained, err = readBounds(r); err != nil {
			return nil, err
		}
	}
	c.group = groupKey(group)
	return c, r.Err()
}

// encodeInput encodes in's group values and arguments as a contribution
// keeps them.
func encodeInput(in Input) ([]byte, error) {
	b, err := appendValues(make([]byte, 0, 16*(len(in.Group)+len(in.Args))), in.Group)
	if err != nil {
		return nil, err
	}
	return appendValues(b, in.Args)
}

// values decodes c's group values and arguments.
func (c *contribution) values() (group, args []any, err error) {
	r := binform.NewReader(c.vals)
	group, args = readValues(r), readValues(r)
	return group, args, r.Err()
}

// args decodes c's arguments (none when they do not decode: Changes
// reports the encoding's failure).
func (c *contribution) args() []any {
	_, args, err := c.values()
	if err != nil {
		return nil
	}
	return args
}

// appendTo appends g's encoding to b.
func (g *group) appendTo(b []byte, retained bool) ([]byte, error) {
	b = binary.AppendUvarint(binary.AppendUvarint(b, g.changes), g.gen)
	b = binform.AppendVersion(b, g.origin)
	flags := byte(0)
	if g.emitted {
		flags |= 1
	}
	if g.dirty {
		flags |= 2
	}
	if g.partial {
		flags |= 4
	}
	if retained {
		flags |= 8
	}
	b, err := appendValues(append(b, flags), g.key)
	if err != nil || !retained {
		return b, err
	}
	// A retained window's rows are gone: its aggregates are kept as they
	// are, with the count of rows they hold.
	b = binary.AppendVarint(b, g.rows)
	for _, a := range g.accs {
		if b, err = appendAcc(b, a); err != nil {
			return nil, err
		}
	}
	return b, nil
}

func appendValues(b []byte, vals []any) ([]byte, error) {
	b = binary.AppendUvarint(b, uint64(len(vals)))
	for _, v := range vals {
		var err error
		if b, err = binform.Append(b, v); err != nil {
			return nil, err
		}
	}
	return b, nil
}

func readValues(r *binform.Reader) []any {
	n := r.Uvarint()
	if n > uint64(r.Len()) {
		r.Fixed(-1) // fails the reader
		return nil
	}
	out := make([]any, n)
	for i := range out {
		out[i] = r.Value()
	}
	return out
}
