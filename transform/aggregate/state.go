package aggregate

import (
	"bytes"
	"encoding/binary"
	"errors"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/pipeline/binform"
	"github.com/sluice-cdc/sluice/transform/state"
)

// The key spaces (doc.go).
const (
	spaceRows    = "rows"
	spaceGroups  = "groups"
	spaceVals    = "vals"
	spacePending = "pending"
	spaceTombs   = "tombs"
	spaceMeta    = "meta"
)

var (
	keyApplied = []byte("applied")
	keyShape   = []byte("shape")
)

// store is the state seen through one transaction.
type store struct {
	rows, groups, vals, pending, tombs, meta *state.Keys
}

func open(tx *state.Tx) (*store, error) {
	s := &store{}
	for _, sp := range []struct {
		name string
		k    **state.Keys
	}{{spaceRows, &s.rows}, {spaceGroups, &s.groups}, {spaceVals, &s.vals}, {spacePending, &s.pending},
		{spaceTombs, &s.tombs}, {spaceMeta, &s.meta}} {
		var err error
		if *sp.k, err = tx.Space(sp.name); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// valKey is the key of value key vk in aggregate n's multiset of group gk.
func valKey(n int, gk, vk []byte) []byte {
	b := binary.AppendUvarint(append(make([]byte, 0, 12+len(gk)+len(vk)), byte(n)), uint64(len(gk)))
	return append(append(b, gk...), vk...)
}

// versioned is the key of a group under a version (pending, tombs).
func versioned(v pipeline.Version, gk []byte) []byte {
	return append(binform.AppendVersion(make([]byte, 0, 32+len(gk)), v), gk...)
}

// record notes that the batch with Origin origin wrote group gk (A2).
func (s *store) record(origin pipeline.Version, gk []byte) error {
	return s.pending.Put(versioned(origin, gk), nil)
}

// recorded is a group recorded under the Origin of the batch that wrote
// it (A2).
type recorded struct {
	origin pipeline.Version
	gk     []byte
}

// recorded returns the groups recorded (A2), in the order of their
// Origins, each once (under its newest).
func (s *store) recorded() ([]recorded, error) {
	var out []recorded
	err := s.pending.Scan(nil, func(k, _ []byte) error {
		if len(k) < 32 {
			return binform.ErrCorrupt
		}
		out = append(out, recorded{binform.NewReader(k).Version(), append([]byte{}, k[32:]...)})
		return nil
	})
	last := map[string]int{}
	for i, r := range out {
		last[string(r.gk)] = i
	}
	n := 0
	for i, r := range out {
		if last[string(r.gk)] == i {
			out[n] = r
			n++
		}
	}
	return out[:n], err
}

// tomb keeps group gk's tombstone (A3): the delete written at version v
// by the batch with Origin origin. It is kept under the later of the two:
// the floor passes v only when no change a restart hands again can bring
// the group back below it, and passes origin only when a stored
// checkpoint covers the batch, so the delete is durable (A2's rewrite
// finds the group until then). A rewrite after a crash writes the delete
// again just above its last version, which may lie below the floor: by
// its version alone the tombstone would go, and with it the group a
// second crash has to delete again.
func (s *store) tomb(v, origin pipeline.Version, gk []byte) error {
	at := v
	if at.Less(origin) {
		at = origin
	}
	return s.tombs.Put(versioned(at, gk), v.Bytes())
}

// errStop ends a scan early.
var errStop = errors.New("stop")

// prune forgets at most max recorded groups (A2) and max tombstones (A3)
// below floor: no restart replays a change below it, and every change
// still to come is at or above it.
func (s *store) prune(floor pipeline.Version, max int) error {
	limit := floor.Bytes()
	below := func(space *state.Keys) ([][]byte, error) {
		var keys [][]byte
		err := space.Scan(nil, func(k, _ []byte) error {
			if len(keys) == max || bytes.Compare(k[:32], limit) >= 0 {
				return errStop
			}
			keys = append(keys, append([]byte{}, k...))
			return nil
		})
		if err != nil && err != errStop {
			return nil, err
		}
		return keys, nil
	}
	pending, err := below(s.pending)
	if err != nil {
		return err
	}
	for _, k := range pending {
		if err := s.pending.Delete(k); err != nil {
			return err
		}
	}
	tombs, err := below(s.tombs)
	if err != nil {
		return err
	}
	for _, k := range tombs {
		gk := k[32:]
		// The delete's version; a tombstone stored before tomb kept it
		// under its origin has it in the key alone.
		at := s.tombs.Get(k)
		if len(at) != 32 {
			at = k[:32]
		}
		if v := s.groups.Get(gk); v != nil {
			g, err := decodeGroup(gk, v, nil)
			if err != nil {
				return err
			}
			// A group that came back, or was written since, is no longer
			// this tombstone.
			if g.rows == 0 && bytes.Equal(g.emitted.Bytes(), at) {
				if err := s.groups.Delete(gk); err != nil {
					return err
				}
			}
		}
		if err := s.tombs.Delete(k); err != nil {
			return err
		}
	}
	return nil
}

// clear deletes every key of space.
func clearSpace(space *state.Keys) error {
	var keys [][]byte
	if err := space.Scan(nil, func(k, _ []byte) error {
		keys = append(keys, append([]byte{}, k...))
		return nil
	}); err != nil {
		return err
	}
	for _, k := range keys {
		if err := space.Delete(k); err != nil {
			return err
		}
	}
	return nil
}
