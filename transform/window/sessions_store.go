package window

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"slices"

	"go.etcd.io/bbolt"

	"github.com/sluice-cdc/sluice/pipeline/binform"
)

// The session engine's state, written with what changed (Changes)
// and read back whole on start (LoadSessions), in the same file layout as
// Engine's with one more bucket:
//
//	rows/<row key>          the row's place: tombstone flag, version,
//	                        event time and group values
//	entries/<group><t><row> one event of a group: version and arguments
//	                        (a row retracted from a final session keeps
//	                        its event there until the session goes)
//	groups/<group key>      changes applied, generation, origin, horizon,
//	                        group values and the results in the sinks
//	meta/watermark          the watermark
//
// A write costs what the batch changed; tags of final sessions are not
// stored: the first Advance after a load finds them again.

var bucketEntries = []byte("entries")

func entryStoreKey(r entryRef) []byte {
	b := binary.AppendUvarint(nil, uint64(len(r.group)))
	b = append(b, r.group...)
	b = binary.BigEndian.AppendUint64(b, uint64(r.t)^(1<<63))
	return append(b, r.row...)
}

func parseEntryStoreKey(k []byte) (entryRef, bool) {
	n, w := binary.Uvarint(k)
	if w <= 0 || uint64(len(k)-w) < n+8 {
		return entryRef{}, false
	}
	k = k[w:]
	return entryRef{group: string(k[:n]), t: int64(binary.BigEndian.Uint64(k[n:]) ^ (1 << 63)), row: string(k[n+8:])}, true
}

// Flush writes what changed since the last Flush (or load) into tx.
func (s *Sessions) Flush(tx *bbolt.Tx) error { return flush(tx, s.Changes) }

// Changes adds what changed since the last Changes (or load) to cs and
// forgets it: cs must be written.
func (s *Sessions) Changes(cs *changeSet) error {
	for row := range s.dirtyRows {
		r := s.rows[row]
		if r == nil {
			cs.del(bucketRows, []byte(row))
			continue
		}
		flag := byte(0)
		if r.deleted {
			flag = 1
		}
		b, err := appendValues(binary.AppendVarint(binform.AppendVersion([]byte{flag}, r.ver), r.t), r.gvals)
		if err != nil {
			return err
		}
		cs.put(bucketRows, []byte(row), b)
	}
	for ref := range s.dirtyEntries {
		k := entryStoreKey(ref)
		var e *sentry
		if g := s.groups[ref.group]; g != nil {
			if i, ok := slices.BinarySearchFunc(g.entries, ref, func(e sentry, r entryRef) int { return e.cmp(r.t, r.row) }); ok {
				e = &g.entries[i]
			}
		}
		if e == nil {
			cs.del(bucketEntries, k)
			continue
		}
		b, err := appendValues(binform.AppendVersion(nil, e.ver), e.args)
		if err != nil {
			return err
		}
		cs.put(bucketEntries, k, b)
	}
	for key := range s.dirtyGroups {
		g := s.groups[key]
		if g == nil {
			cs.del(bucketGroups, []byte(key))
			continue
		}
		b, err := g.encode()
		if err != nil {
			return err
		}
		cs.put(bucketGroups, []byte(key), b)
	}
	clear(s.dirtyRows)
	clear(s.dirtyEntries)
	clear(s.dirtyGroups)
	cs.put(bucketMeta, keyWatermark, binary.AppendVarint(nil, s.watermark))
	return nil
}

func (g *sgroup) encode() ([]byte, error) {
	b := binary.AppendUvarint(binary.AppendUvarint(nil, g.changes), g.gen)
	b = binary.AppendVarint(binform.AppendVersion(b, g.origin), g.horizon)
	b, err := appendValues(b, g.vals)
	if err != nil {
		return nil, err
	}
	bounds := make([]Bounds, 0, len(g.results))
	for bd := range g.results {
		bounds = append(bounds, bd)
	}
	slices.SortFunc(bounds, func(a, b Bounds) int { return cmp.Compare(a.Start, b.Start) })
	b = binary.AppendUvarint(b, uint64(len(bounds)))
	for _, bd := range bounds {
		r := g.results[bd]
		b = binary.AppendVarint(binary.AppendVarint(b, bd.Start), bd.End)
		b = binary.BigEndian.AppendUint64(binform.AppendVersion(b, r.ver), r.stamp)
		flags := byte(0)
		if r.deleted {
			flags |= 1
		}
		if r.partial {
			flags |= 2
		}
		b = append(b, flags)
	}
	return b, nil
}

// LoadSessions rebuilds a session engine from what Flush wrote into tx.
func LoadSessions(tx *bbolt.Tx, o EngineOptions) (*Sessions, error) {
	s := NewSessions(o)
	rows, groups, meta, err := buckets(tx)
	if err != nil {
		return nil, err
	}
	if s.watermark, err = loadWatermark(meta); err != nil {
		return nil, err
	}
	err = groups.ForEach(func(k, v []byte) error {
		r := binform.NewReader(v)
		g := &sgroup{key: string(k), tombs: map[string]bool{}, results: map[Bounds]*sresult{}, next: NoWatermark}
		g.changes, g.gen = r.Uvarint(), r.Uvarint()
		g.origin = r.Version()
		g.horizon = r.Varint()
		g.vals = readValues(r)
		n := r.Uvarint()
		if r.Err() != nil || n > uint64(r.Len()) {
			return fmt.Errorf("window state: group %q: corrupt", k)
		}
		for range n {
			b := Bounds{r.Varint(), r.Varint()}
			res := &sresult{ver: r.Version()}
			if st := r.Fixed(8); st != nil {
				res.stamp = binary.BigEndian.Uint64(st)
			}
			flags := r.Byte()
			res.deleted, res.partial = flags&1 != 0, flags&2 != 0
			g.results[b] = res
		}
		if r.Err() != nil {
			return fmt.Errorf("window state: group %q: %w", k, r.Err())
		}
		s.results += len(g.results)
		s.groups[g.key] = g
		if s.maxOrigin.Less(g.origin) {
			s.maxOrigin = g.origin
		}
		s.changed[g.key] = true // the first Advance looks at every group
		return nil
	})
	if err != nil {
		return nil, err
	}
	if entries := tx.Bucket(bucketEntries); entries != nil {
		err = entries.ForEach(func(k, v []byte) error {
			ref, ok := parseEntryStoreKey(k)
			g := s.groups[ref.group]
			if !ok || g == nil {
				return fmt.Errorf("window state: corrupt event key %q", k)
			}
			r := binform.NewReader(v)
			e := sentry{t: ref.t, row: ref.row, ver: r.Version(), args: readValues(r)}
			if r.Err() != nil {
				return fmt.Errorf("window state: event %q: %w", k, r.Err())
			}
			g.entries = append(g.entries, e) // in key order: by time, then row
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	err = rows.ForEach(func(k, v []byte) error {
		r := binform.NewReader(v)
		row := &srow{deleted: r.Byte() == 1, ver: r.Version(), t: r.Varint()}
		row.gvals = readValues(r)
		if r.Err() != nil {
			return fmt.Errorf("window state: row %q: %w", k, r.Err())
		}
		row.group = groupKey(row.gvals)
		g := s.groups[row.group]
		if g == nil {
			return fmt.Errorf("window state: row %q of a group not held", k)
		}
		if row.deleted {
			g.tombs[string(k)] = true
		}
		s.rows[string(k)] = row
		return nil
	})
	if err != nil {
		return nil, err
	}
	clear(s.dirtyRows)
	clear(s.dirtyEntries)
	clear(s.dirtyGroups)
	return s, nil
}
