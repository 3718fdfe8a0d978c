package join

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/pipeline/binform"
	"github.com/sluice-cdc/sluice/transform/state"
)

// The state store (bbolt, one file per join):
//
//	rows/<schema.table>/<key>      entry: the row's latest values and version
//	index/<n>/<len><lookup key><from key>
//	                               the from-table rows that refer to a row of
//	                               lookup n (empty value; a prefix scan lists them)
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
)

// entry is one row in the state.
type entry struct {
	version pipeline.Version
	// emitted is the version of the last output record for this row's
	// joined document (from-table rows only).
	emitted pipeline.Version
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

func (e *entry) encode() ([]byte, error) {
	b := binform.AppendVersion(binform.AppendVersion(make([]byte, 0, 96), e.version), e.emitted)
	flag := byte(0)
	if e.deleted {
		flag = 1
	}
	b = binary.AppendUvarint(append(b, flag), uint64(len(e.names)))
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
	e := &entry{version: r.Version(), emitted: r.Version(), deleted: r.Byte() == 1}
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
	rows, index, meta *state.Keys // the key spaces
	cache             map[string]*cachedRow
}

type cachedRow struct {
	table string
	key   []byte
	e     *entry // nil: not in the store
	dirty bool
}

func newState(tx *state.Tx) (joinState, error) {
	s := joinState{cache: map[string]*cachedRow{}}
	var err error
	if s.rows, err = tx.Space(string(bucketRows)); err != nil {
		return s, err
	}
	if s.index, err = tx.Space(string(bucketIndex)); err != nil {
		return s, err
	}
	s.meta, err = tx.Space(string(bucketMeta))
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
	clear(s.cache)
	return nil
}

func (s joinState) barrier(table string) pipeline.Version {
	v := s.meta.Get([]byte("barrier:" + table))
	if v == nil {
		return pipeline.Version{}
	}
	return binform.NewReader(v).Version()
}

func (s joinState) setBarrier(table string, v pipeline.Version) error {
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
