package join

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/pipeline/binform"
	"github.com/sluice-cdc/sluice/transform/state"
)

// The state store (pebble, one per join or nest; transform/state):
//
//	rows/<schema.table>/<key>      entry: the row's latest values and version
//	index/<n>/<len><lookup key><from key>
//	                               the from-table rows that refer to a row of
//	                               lookup n (empty value; a prefix scan lists them)
//	children/<n>/<len><from key><child key>
//	                               the rows of child n (nest) that belong to a
//	                               from-table row: each one's order_by values
//	                               and its rendered object (nestedValue)
//	moves/<n>/<len><child key><version>
//	                               the from-table key a change of the child row
//	                               at version took it from (N1)
//	moveorder/<version><n><len><child key>
//	                               the same moves by version, to prune them
//	meta/barrier:<schema.table>    the version of the table's latest truncate
//	meta/shape:<schema.table>      the table's latest shape (database, columns, key)
//	meta/definition                what the index was built for (from, lookups, on)
//
// Every row write is guarded by the row's version, like a sink's
// (Invariant 4), so replaying inputs the state already holds changes
// nothing: the state may run ahead of the checkpoint (Invariant 5).

var (
	bucketRows  = []byte("rows")
	bucketIndex = []byte("index")
	bucketMeta  = []byte("meta")

	spaceChildren  = "children"
	spaceMoves     = "moves"
	spaceMoveOrder = "moveorder"
)

// entry is one row in the state.
type entry struct {
	version pipeline.Version
	// emitted is the version of the last output record for this row's
	// joined document (from-table rows only).
	emitted pipeline.Version
	// moved is the version of the last change that took this child row
	// from a from-table row (zero: none); a replay at a later version
	// finds no moves to follow (N1).
	moved   pipeline.Version
	deleted bool
	names   []string
	values  []any
}

func (e *entry) value(name string) (any, bool) {
	for i, n := range e.names {
		if n == name {
			return e.values[i], true
		}
	}
	return nil, false
}

// An entry's flags.
const (
	flagDeleted = 1 << iota
	flagMoved   // a moved version follows
)

func (e *entry) encode() ([]byte, error) {
	b := binform.AppendVersion(binform.AppendVersion(make([]byte, 0, 96), e.version), e.emitted)
	flag := byte(0)
	if e.deleted {
		flag |= flagDeleted
	}
	if e.moved != (pipeline.Version{}) {
		flag |= flagMoved
	}
	b = append(b, flag)
	if flag&flagMoved != 0 {
		b = binform.AppendVersion(b, e.moved)
	}
	b = binary.AppendUvarint(b, uint64(len(e.names)))
	for i, n := range e.names {
		b = binform.AppendString(b, n)
		var err error
		if b, err = binform.Append(b, e.values[i]); err != nil {
			return nil, fmt.Errorf("column %s: %w", n, err)
		}
	}
	return b, nil
}

func decodeEntry(b []byte) (*entry, error) {
	r := binform.NewReader(b)
	e := &entry{version: r.Version(), emitted: r.Version()}
	flag := r.Byte()
	e.deleted = flag&flagDeleted != 0
	if flag&flagMoved != 0 {
		e.moved = r.Version()
	}
	n := r.Uvarint()
	if r.Err() != nil || n > uint64(r.Len()) {
		return nil, binform.ErrCorrupt
	}
	e.names = make([]string, n)
	e.values = make([]any, n)
	for i := range e.names {
		e.names[i] = string(r.Bytes())
		e.values[i] = r.Value()
	}
	return e, r.Err()
}

// state is the store seen through one write transaction, with the rows
// it reads and writes cached: a row is decoded once and written once per
// transaction however often the batch touches it (flush writes them).
type joinState struct {
	rows, index, meta        *state.Keys // the key spaces
	nested, moves, moveOrder *state.Keys
	cache                    map[string]*cachedRow
	// warm holds rows committed by earlier transactions (nil: none kept);
	// landed, the rows this transaction read or wrote, which join warm
	// once it commits (Join.Process).
	warm   *rowCache
	landed map[string]*entry
	// barriers holds the tables' truncate barriers read or written (the
	// Join's, across transactions; emptied with warm on a failure).
	barriers map[string]pipeline.Version
}

// rowCache keeps decoded rows across transactions, so the rows a change
// reads again and again (a document's parent, its customer) are not
// fetched and decoded each time. It holds at most max rows, dropping one
// at random past it. It mirrors committed state only: a transaction's
// rows join it after the commit; a failed one or a truncate empties it.
type rowCache struct {
	m   map[string]*entry
	max int
}

func newRowCache(max int) *rowCache { return &rowCache{m: make(map[string]*entry), max: max} }

func (c *rowCache) add(landed map[string]*entry) {
	for k, e := range landed {
		if _, ok := c.m[k]; !ok && len(c.m) >= c.max {
			for old := range c.m { // a random row makes room
				delete(c.m, old)
				break
			}
		}
		c.m[k] = e
	}
}

type cachedRow struct {
	table string
	key   []byte
	e     *entry // nil: not in the store
	dirty bool
}

func newState(tx *state.Tx) (joinState, error) {
	s := joinState{cache: map[string]*cachedRow{}, landed: map[string]*entry{}}
	var err error
	if s.rows, err = tx.Space(string(bucketRows)); err != nil {
		return s, err
	}
	if s.index, err = tx.Space(string(bucketIndex)); err != nil {
		return s, err
	}
	if s.meta, err = tx.Space(string(bucketMeta)); err != nil {
		return s, err
	}
	if s.nested, err = tx.Space(spaceChildren); err != nil {
		return s, err
	}
	if s.moves, err = tx.Space(spaceMoves); err != nil {
		return s, err
	}
	s.moveOrder, err = tx.Space(spaceMoveOrder)
	return s, err
}

func cacheKey(table string, key []byte) string { return table + "\x00" + string(key) }

func (s joinState) table(name string) (*state.Keys, error) {
	return s.rows.Nested([]byte(name))
}

// get returns the row, nil when the store has none. The entry is shared
// with the cache: change it only to put it back.
func (s joinState) get(table string, key []byte) (*entry, error) {
	ck := cacheKey(table, key)
	if c, ok := s.cache[ck]; ok {
		return c.e, nil
	}
	// A row this transaction flushed already is newer than warm's.
	if e, ok := s.landed[ck]; ok {
		s.cache[ck] = &cachedRow{table: table, key: key, e: e}
		return e, nil
	}
	if s.warm != nil {
		if e, ok := s.warm.m[ck]; ok {
			s.cache[ck] = &cachedRow{table: table, key: key, e: e}
			return e, nil
		}
	}
	var e *entry
	if b := s.rows.Lookup([]byte(table)); b != nil {
		if v := b.Get(key); v != nil {
			var err error
			if e, err = decodeEntry(v); err != nil {
				return nil, fmt.Errorf("row of %s: %w", table, err)
			}
		}
	}
	s.cache[ck] = &cachedRow{table: table, key: key, e: e}
	return e, nil
}

func (s joinState) put(table string, key []byte, e *entry) error {
	s.cache[cacheKey(table, key)] = &cachedRow{table: table, key: key, e: e, dirty: true}
	return nil
}

// flush writes the rows put since the last flush, in key order, and
// empties the cache (a truncate then reads the bucket directly).
func (s joinState) flush() error {
	keys := make([]string, 0, len(s.cache))
	for k, c := range s.cache {
		if c.dirty {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		c := s.cache[k]
		b, err := s.table(c.table)
		if err != nil {
			return err
		}
		v, err := c.e.encode()
		if err != nil {
			return fmt.Errorf("row of %s: %w", c.table, err)
		}
		if err := b.Put(c.key, v); err != nil {
			return err
		}
	}
	for k, c := range s.cache {
		if c.e != nil {
			s.landed[k] = c.e
		}
	}
	clear(s.cache)
	return nil
}

// forget drops every cached row: the transaction removed rows behind the
// cache (a truncate).
func (s joinState) forget() {
	clear(s.landed)
	if s.warm != nil {
		clear(s.warm.m)
	}
}

func (s joinState) barrier(table string) pipeline.Version {
	if v, ok := s.barriers[table]; ok {
		return v
	}
	var b pipeline.Version
	if v := s.meta.Get([]byte("barrier:" + table)); v != nil {
		b = binform.NewReader(v).Version()
	}
	if s.barriers != nil {
		s.barriers[table] = b
	}
	return b
}

func (s joinState) setBarrier(table string, v pipeline.Version) error {
	if s.barriers != nil {
		s.barriers[table] = v
	}
	return s.meta.Put([]byte("barrier:"+table), binform.AppendVersion(nil, v))
}

func indexKey(lk, fk []byte) []byte {
	b := binary.AppendUvarint(make([]byte, 0, 10+len(lk)+len(fk)), uint64(len(lk)))
	return append(append(b, lk...), fk...)
}

func (s joinState) lookupIndex(n int) (*state.Keys, error) {
	return s.index.Nested([]byte{byte(n)})
}

func (s joinState) link(n int, lk, fk []byte, on bool) error {
	b, err := s.lookupIndex(n)
	if err != nil {
		return err
	}
	if on {
		return b.Put(indexKey(lk, fk), nil)
	}
	return b.Delete(indexKey(lk, fk))
}

// referrers returns the from-table keys whose rows refer to lookup n's row lk.
func (s joinState) referrers(n int, lk []byte) ([][]byte, error) {
	b, err := s.lookupIndex(n)
	if err != nil {
		return nil, err
	}
	prefix := indexKey(lk, nil)
	var out [][]byte
	err = b.Scan(prefix, func(k, _ []byte) error {
		out = append(out, append([]byte{}, k[len(prefix):]...))
		return nil
	})
	return out, err
}

// putShape stores a table's columns, so a restarted join knows the shapes
// before the source sends a row of every table again.
func (s joinState) putShape(t *pipeline.Table) error {
	b, err := binform.AppendShape(nil, t)
	if err != nil {
		return err
	}
	return s.meta.Put([]byte("shape:"+t.ID.String()), b)
}

func (s joinState) shape(id pipeline.TableID) (*pipeline.Table, error) {
	v := s.meta.Get([]byte("shape:" + id.String()))
	if v == nil {
		return nil, nil
	}
	return binform.ReadShape(binform.NewReader(v), id)
}

// child puts the child row ck of child n under the from row fk, with its
// encoded entry, or removes it (row nil).
func (s joinState) child(n int, fk, ck, row []byte) error {
	b, err := s.nested.Nested([]byte{byte(n)})
	if err != nil {
		return err
	}
	if row != nil {
		return b.Put(indexKey(fk, ck), row)
	}
	return b.Delete(indexKey(fk, ck))
}

// children calls fn with the key and index value (nestedValue's) of each
// of child n's rows under the from row fk; the value is valid during the
// call.
func (s joinState) children(n int, fk []byte, fn func(ck, v []byte) error) error {
	b := s.nested.Lookup([]byte{byte(n)})
	if b == nil {
		return nil
	}
	prefix := indexKey(fk, nil)
	return b.Scan(prefix, func(k, v []byte) error {
		return fn(append([]byte{}, k[len(prefix):]...), v)
	})
}

// parents returns the from keys that have a row of child n, once each.
func (s joinState) parents(n int) ([][]byte, error) {
	b := s.nested.Lookup([]byte{byte(n)})
	if b == nil {
		return nil, nil
	}
	var out [][]byte
	err := b.Scan(nil, func(k, _ []byte) error {
		fk := lookupKeyOf(k)
		if fk != nil && (len(out) == 0 || !bytes.Equal(out[len(out)-1], fk)) {
			out = append(out, fk)
		}
		return nil
	})
	return out, err
}

// recordMove records that change r of child n's row ck took it from the
// from row fk (N1).
func (s joinState) recordMove(n int, ck []byte, r *pipeline.Record, fk []byte) error {
	b, err := s.moves.Nested([]byte{byte(n)})
	if err != nil {
		return err
	}
	if err := b.Put(moveKey(ck, r.Version), fk); err != nil {
		return err
	}
	return s.moveOrder.Put(moveOrderKey(n, ck, r.Version), append(binary.AppendUvarint(nil, r.TxID), r.Pos...))
}

// movesSince returns the from keys that changes of child n's row ck at or
// after v took it from, and those of changes of an earlier generation
// than v's (N1: a replay from another server comes a generation up, and
// which of them it replays no version tells).
func (s joinState) movesSince(n int, ck []byte, v pipeline.Version) ([][]byte, error) {
	b := s.moves.Lookup([]byte{byte(n)})
	if b == nil {
		return nil, nil
	}
	from := moveKey(ck, v)
	prefix := from[:len(from)-32]
	var out [][]byte
	err := b.Scan(prefix, func(k, fk []byte) error {
		if bytes.Compare(k, from) >= 0 || binary.BigEndian.Uint64(k[len(prefix):]) < v[0] {
			out = append(out, append([]byte{}, fk...))
		}
		return nil
	})
	return out, err
}

// pruneMoves removes at most max moves whose changes came before floor,
// the change a restart replays from: no restart hands them again (N1).
// Within floor's generation that is by version. A move of an earlier
// generation sorts below every floor of a later one, replayed yet or not
// (a run resumed on another server replays them with that server's
// versions): it goes once order finds its change before floor's, and
// stays while that is not known (pipeline.Applied.Before).
func (s joinState) pruneMoves(floor pipeline.Applied, max int, order pipeline.PositionOrder) error {
	limit := floor.Version.Bytes()
	var drop [][]byte
	// floor's generation: by version.
	err := s.moveOrder.Scan(limit[:8], func(k, _ []byte) error {
		if len(drop) == max || bytes.Compare(k[:32], limit) >= 0 {
			return errStopScan
		}
		drop = append(drop, append([]byte{}, k...))
		return nil
	})
	if err != nil && err != errStopScan {
		return err
	}
	// Earlier generations: by order, at most max of them looked at (those
	// kept come first every time).
	at := &pipeline.Record{Version: floor.Version, Pos: floor.Pos, TxID: floor.TxID}
	seen := 0
	err = s.moveOrder.Scan(nil, func(k, val []byte) error {
		if seen == max || binary.BigEndian.Uint64(k) >= floor.Version[0] {
			return errStopScan
		}
		seen++
		m := pipeline.Applied{Version: versionOf(k)}
		if len(val) > 0 {
			tx, n := binary.Uvarint(val)
			if n <= 0 {
				return binform.ErrCorrupt
			}
			m.TxID = tx
			if len(val) > n {
				m.Pos = pipeline.Position(val[n:])
			}
		}
		if m.Before(at, order) {
			drop = append(drop, append([]byte{}, k...))
		}
		return nil // otherwise a replay from another server may still need it
	})
	if err != nil && err != errStopScan {
		return err
	}
	for _, k := range drop {
		r := binform.NewReader(k[33:])
		ln := r.Uvarint()
		if r.Err() != nil || ln > uint64(r.Len()) {
			return binform.ErrCorrupt
		}
		ck := r.Fixed(int(ln))
		if b := s.moves.Lookup(k[32:33]); b != nil {
			if err := b.Delete(moveKey(ck, versionOf(k))); err != nil {
				return err
			}
		}
		if err := s.moveOrder.Delete(k); err != nil {
			return err
		}
	}
	return nil
}

// versionOf reads the version a moveOrder key starts with.
func versionOf(k []byte) pipeline.Version {
	var v pipeline.Version
	for i := range v {
		v[i] = binary.BigEndian.Uint64(k[i*8:])
	}
	return v
}

// errStopScan ends a scan early.
var errStopScan = errors.New("stop")
