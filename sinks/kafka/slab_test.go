package kafka

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Values handed out by a slab never change afterwards, whatever is
// appended later: each ends at its own capacity, a value larger than a
// block continues in an array of its own, and records and headers are
// distinct.
func TestSlabValuesStayPut(t *testing.T) {
	var s slab
	var vals [][]byte
	var want [][]byte
	for i := range 3000 {
		n := 10 + i%50
		if i%500 == 0 {
			n = slabBytes + 100 // outgrows a block
		}
		b := s.buf()
		from := len(b)
		for j := range n {
			b = append(b, byte(i+j))
		}
		v := s.done(b, from)
		if cap(v) != len(v) {
			t.Fatalf("value %d: capacity %d beyond its length %d", i, cap(v), len(v))
		}
		vals = append(vals, v)
		want = append(want, bytes.Clone(v))
	}
	for i := range vals {
		if !bytes.Equal(vals[i], want[i]) {
			t.Fatalf("value %d changed after later appends", i)
		}
	}
	seen := map[any]bool{}
	for i := range 1000 {
		r := s.record()
		h := s.headers(2)
		if seen[r] || seen[&h[0]] {
			t.Fatalf("record or headers %d handed out twice", i)
		}
		seen[r], seen[&h[0]] = true, true
		if l := s.list(r); len(l) != 1 || l[0] != r || cap(l) != 1 {
			t.Fatalf("list %d: %v", i, fmt.Sprint(l))
		}
	}
}

// A released slab's blocks come back cleared: a later batch's records and
// headers start zeroed whether or not they reuse the blocks, and the
// released slab holds nothing.
func TestSlabReleaseHandsBackClearedBlocks(t *testing.T) {
	for round := range 5 {
		var s slab
		for i := range 3 * slabRecords {
			r := s.record()
			if r.Topic != "" || r.Key != nil || r.Value != nil || len(r.Headers) != 0 {
				t.Fatalf("round %d: record %d handed out dirty: %+v", round, i, r)
			}
			h := s.headers(2)
			if h[0].Key != "" || h[1].Value != nil {
				t.Fatalf("round %d: headers %d handed out dirty: %+v", round, i, h)
			}
			b := s.buf()
			from := len(b)
			b = append(b, fmt.Sprintf("value %d", i)...)
			r.Topic, r.Value, r.Headers = "t", s.done(b, from), h
			h[0], h[1].Value = kgo.RecordHeader{Key: "k", Value: []byte("v")}, []byte("w")
			if l := s.list(r); l[0] != r {
				t.Fatalf("round %d: list %d", round, i)
			}
		}
		s.release()
		if s.bytes != nil || s.recs != nil || s.hdrs != nil || s.ptrs != nil || s.byteBlocks != nil || s.recBlocks != nil {
			t.Fatalf("round %d: a released slab still holds blocks", round)
		}
	}
}
