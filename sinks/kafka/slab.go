package kafka

import (
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-cdc/sluice/schema"
)

// slab hands out the memory of one batch's Kafka records from a few large
// blocks instead of several small allocations per record: the framed key
// and value bytes, the version header's text, the headers and the records
// themselves. Everything it hands out lives until the batch's last record
// is acknowledged, as the records would anyway; nothing handed out is
// written again until release, which returns the blocks, cleared, for
// later batches: a batch's memory is then what the next ones write into
// instead of new garbage (the Kafka sink allocated about 400 bytes a
// record before, a third of the runtime's allocation while it snapshots).
type slab struct {
	bytes []byte
	hdrs  []kgo.RecordHeader
	recs  []kgo.Record
	ptrs  []*kgo.Record
	// The blocks handed out from, for release.
	byteBlocks [][]byte
	hdrBlocks  [][]kgo.RecordHeader
	recBlocks  [][]kgo.Record
	ptrBlocks  [][]*kgo.Record
	// at is when the batch's first record was encoded: every record's
	// timestamp and envelope ts_ms (one clock read per batch rather than
	// two per record), with src the envelope's source block.
	at  time.Time
	src schema.SourceInfo
}

// source returns the batch's source block, ts_ms set on first use.
func (s *slab) source(version string) *schema.SourceInfo {
	if s.at.IsZero() {
		s.at = time.Now()
		s.src = schema.SourceInfo{Version: version, ProcessedAt: s.at}
	}
	return &s.src
}

const (
	slabBytes   = 64 << 10 // a new byte block when less than slabReserve is left
	slabReserve = 4 << 10
	slabRecords = 256
)

// buf returns the byte block to append one value to; done then returns
// the value appended since from (its capacity ends with it).
func (s *slab) buf() []byte {
	if cap(s.bytes)-len(s.bytes) < slabReserve {
		s.bytes = take(&freeBytes, func() []byte { return make([]byte, 0, slabBytes) })
		s.byteBlocks = append(s.byteBlocks, s.bytes)
	}
	return s.bytes
}

func (s *slab) done(b []byte, from int) []byte {
	s.bytes = b // a value that outgrew the block continues in its new array
	return b[from:len(b):len(b)]
}

// headers returns n zeroed headers with room for more (appending beyond
// their capacity copies them out of the slab).
func (s *slab) headers(n int) []kgo.RecordHeader {
	if len(s.hdrs)+n > cap(s.hdrs) {
		if n > 2*slabRecords {
			s.hdrs = make([]kgo.RecordHeader, 0, n) // not kept
		} else {
			s.hdrs = take(&freeHdrs, func() []kgo.RecordHeader { return make([]kgo.RecordHeader, 0, 2*slabRecords) })
			s.hdrBlocks = append(s.hdrBlocks, s.hdrs)
		}
	}
	h := s.hdrs[len(s.hdrs) : len(s.hdrs)+n : len(s.hdrs)+n]
	s.hdrs = s.hdrs[:len(s.hdrs)+n]
	return h
}

// record returns a new zeroed record.
func (s *slab) record() *kgo.Record {
	if len(s.recs) == cap(s.recs) {
		s.recs = take(&freeRecs, func() []kgo.Record { return make([]kgo.Record, 0, slabRecords) })
		s.recBlocks = append(s.recBlocks, s.recs)
	}
	s.recs = s.recs[:len(s.recs)+1]
	return &s.recs[len(s.recs)-1]
}

// list returns a list of the given records.
func (s *slab) list(recs ...*kgo.Record) []*kgo.Record {
	n := len(recs)
	if len(s.ptrs)+n > cap(s.ptrs) {
		if n > slabRecords {
			s.ptrs = make([]*kgo.Record, 0, n) // not kept
		} else {
			s.ptrs = take(&freePtrs, func() []*kgo.Record { return make([]*kgo.Record, 0, slabRecords) })
			s.ptrBlocks = append(s.ptrBlocks, s.ptrs)
		}
	}
	l := append(s.ptrs[len(s.ptrs):len(s.ptrs):len(s.ptrs)+n], recs...)
	s.ptrs = s.ptrs[:len(s.ptrs)+n]
	return l
}

// release hands the slab's blocks back for later batches. Call it only
// once nothing refers to what the slab handed out any more: every
// promise of the batch fired (the client holds none of its records) and
// the batch's outcome was read. The record and header blocks are cleared
// (record and headers hand out zeroed memory, and a kept block must not
// hold the batch's values alive); the slab is empty afterwards.
func (s *slab) release() {
	for _, b := range s.byteBlocks {
		give(&freeBytes, b[:0])
	}
	for _, b := range s.hdrBlocks {
		clear(b[:cap(b)])
		give(&freeHdrs, b[:0])
	}
	for _, b := range s.recBlocks {
		clear(b[:cap(b)])
		give(&freeRecs, b[:0])
	}
	for _, b := range s.ptrBlocks {
		clear(b[:cap(b)])
		give(&freePtrs, b[:0])
	}
	*s = slab{}
}

// The released blocks, per kind. They add nothing to what Invariant 6
// bounds: a block is kept only after its batch was judged, in place of
// memory the batches in flight (capped by the runtime) held anyway, and a
// sync.Pool lets the garbage collector take it back when no batch needs
// it.
var freeBytes, freeHdrs, freeRecs, freePtrs sync.Pool

// take returns a released block of pool, or a new one.
func take[T any](pool *sync.Pool, fresh func() []T) []T {
	if b, ok := pool.Get().(*[]T); ok {
		return *b
	}
	return fresh()
}

// give keeps block in pool (its slice header boxed once).
func give[T any](pool *sync.Pool, block []T) {
	pool.Put(&block)
}
