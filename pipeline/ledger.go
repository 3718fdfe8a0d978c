package pipeline

import (
	"context"
	"sync"
)

// ledger tracks every source batch from the moment it leaves the source until
// it is durable in every sink, and yields the highest checkpointable position
// below which everything is durable (the contiguous low-water mark).
//
// Invariant 6: acquire blocks while the records or bytes in flight are at
// the cap, which stops the reader goroutine and so the source: backpressure,
// never dropping. A single batch larger than the cap is admitted alone.
type ledger struct {
	maxRecords int
	maxBytes   int64

	mu       sync.Mutex
	cond     chan struct{} // closed and replaced on every release
	records  int
	bytes    int64
	nextSeq  uint64
	entries  []ledgerEntry // in seq order, from the oldest not yet committed
	firstSeq uint64        // seq of entries[0]
}

type ledgerEntry struct {
	pos     Position
	records int
	bytes   int64
	done    bool
}

func newLedger(maxRecords int, maxBytes int64) *ledger {
	return &ledger{maxRecords: maxRecords, maxBytes: maxBytes, cond: make(chan struct{}), nextSeq: 1, firstSeq: 1}
}

// acquire registers a batch of n records weighing bytes and returns its
// sequence number. It blocks while the caps are reached; ctx cancels the wait.
func (l *ledger) acquire(ctx context.Context, n int, bytes int64, pos Position) (uint64, error) {
	for {
		l.mu.Lock()
		empty := l.records == 0 && l.bytes == 0
		if empty || (l.records+n <= l.maxRecords && l.bytes+bytes <= l.maxBytes) {
			seq := l.nextSeq
			l.nextSeq++
			l.records += n
			l.bytes += bytes
			l.entries = append(l.entries, ledgerEntry{pos: pos, records: n, bytes: bytes})
			l.mu.Unlock()
			return seq, nil
		}
		wait := l.cond
		l.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// grow adds n records and bytes to batch seq, which has not been handed to
// the sinks yet: what its operators added (a join's fan-out). Like acquire
// it blocks while the caps are reached, until the batch is alone in flight
// (earlier batches drain through the sinks meanwhile), so operator output
// counts against the cap too (Invariant 6).
func (l *ledger) grow(ctx context.Context, seq uint64, n int, bytes int64) error {
	for {
		l.mu.Lock()
		i := int(seq - l.firstSeq)
		if i < 0 || i >= len(l.entries) {
			l.mu.Unlock()
			return nil
		}
		e := &l.entries[i]
		alone := l.records == e.records && l.bytes == e.bytes
		if alone || (l.records+n <= l.maxRecords && l.bytes+bytes <= l.maxBytes) {
			e.records += n
			e.bytes += bytes
			l.records += n
			l.bytes += bytes
			l.mu.Unlock()
			return nil
		}
		wait := l.cond
		l.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// done marks batch seq durable in every sink and releases its weight.
func (l *ledger) done(seq uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	i := int(seq - l.firstSeq)
	if i < 0 || i >= len(l.entries) || l.entries[i].done {
		return
	}
	e := &l.entries[i]
	e.done = true
	l.records -= e.records
	l.bytes -= e.bytes
	close(l.cond)
	l.cond = make(chan struct{})
}

// lowWater pops the contiguous durable prefix and returns the newest
// checkpointable position in it (nil when the prefix holds none), and the
// seq of the last popped entry.
//
// Invariant 1 and 2: only positions whose batch and every earlier batch are
// durable are returned, and only positions the source marked as transaction
// boundaries (non-nil Pos).
func (l *ledger) lowWater() Position {
	l.mu.Lock()
	defer l.mu.Unlock()
	var pos Position
	n := 0
	for n < len(l.entries) && l.entries[n].done {
		if l.entries[n].pos != nil {
			pos = l.entries[n].pos
		}
		n++
	}
	if n == 0 {
		return nil
	}
	// Keep a non-nil position pending only if it was not returned: we
	// return it now, so the prefix can go.
	l.entries = append(l.entries[:0:0], l.entries[n:]...)
	l.firstSeq += uint64(n)
	return pos
}

// inFlight returns the records and bytes not yet durable.
func (l *ledger) inFlight() (int, int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.records, l.bytes
}

// pending reports whether any batch is not yet durable.
func (l *ledger) pending() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range l.entries {
		if !e.done {
			return true
		}
	}
	return false
}
