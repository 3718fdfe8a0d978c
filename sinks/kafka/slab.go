package kafka

import (
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-cdc/sluice/schema"
)

// slab hands out the memory of one batch's Kafka records from a few large
// blocks instead of several small allocations per record: the framed key
// and value bytes, the version header's text, the headers and the records
// themselves. Everything it hands out lives until the batch's last record
// is acknowledged, as the records would anyway; nothing handed out is
// ever written again.
type slab struct {
	bytes []byte
	hdrs  []kgo.RecordHeader
	recs  []kgo.Record
	ptrs  []*kgo.Record
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
		s.bytes = make([]byte, 0, slabBytes)
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
		s.hdrs = make([]kgo.RecordHeader, 0, max(2*slabRecords, n))
	}
	h := s.hdrs[len(s.hdrs) : len(s.hdrs)+n : len(s.hdrs)+n]
	s.hdrs = s.hdrs[:len(s.hdrs)+n]
	return h
}

// record returns a new zeroed record.
func (s *slab) record() *kgo.Record {
	if len(s.recs) == cap(s.recs) {
		s.recs = make([]kgo.Record, 0, slabRecords)
	}
	s.recs = s.recs[:len(s.recs)+1]
	return &s.recs[len(s.recs)-1]
}

// list returns a list of the given records.
func (s *slab) list(recs ...*kgo.Record) []*kgo.Record {
	n := len(recs)
	if len(s.ptrs)+n > cap(s.ptrs) {
		s.ptrs = make([]*kgo.Record, 0, max(slabRecords, n))
	}
	l := append(s.ptrs[len(s.ptrs):len(s.ptrs):len(s.ptrs)+n], recs...)
	s.ptrs = s.ptrs[:len(s.ptrs)+n]
	return l
}
