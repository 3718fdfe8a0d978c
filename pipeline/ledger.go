package pipeline

import (
	"context"
	"sync"
	"time"
)

// ledger tracks every source batch from the moment it leaves the source until
// it is durable in every sink, and yields the highest checkpointable position
// below which everything is durable (the contiguous low-water mark).
//
// Invariant 6: acquire blocks while the records or bytes in flight are at
// the cap, which stops the reader goroutine and so the source: backpressure,
// never dropping. A single batch larger than the cap is admitted alone.
//
// The record cap is paced by the sinks (Little's law): while the source
// waits at the cap, records beyond what the sinks make durable in pace.hold
// only queue, adding memory and latency, never throughput. So once a
// window of pace.window in which acquire waited has passed, the cap becomes
// the durable rate over that window times hold, between pace.floor and
// maxRecords; a window in which the source never waited lifts it back to
// maxRecords. A slow sink (a search index taking 4,500 records/s) then
// holds about 18,000 records in flight instead of 50,000; a fast one is
// not limited by it.
//
// hold is at least twice the longest sink write of the window (wrote): a
// sink whose every write takes longer than pace.hold would otherwise see
// its rate shrink with the cap and the cap with its rate, down to floor.
type ledger struct {
	maxRecords int
	maxBytes   int64
	pace       pacing

	mu       sync.Mutex
	limit    int // the record cap in force, paced
	waited   bool
	since    time.Time     // start of the pacing window
	durable  int           // records made durable in the window
	slowest  time.Duration // the longest sink write in the window
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

// pacing sets how the record cap follows the sinks (see ledger); a zero
// hold leaves the cap at maxRecords.
type pacing struct {
	hold, window time.Duration
	floor        int
	now          func() time.Time
}

func newLedger(maxRecords int, maxBytes int64, pace pacing) *ledger {
	if pace.now == nil {
		pace.now = time.Now
	}
	return &ledger{maxRecords: maxRecords, maxBytes: maxBytes, pace: pace, limit: maxRecords, since: pace.now(),
		cond: make(chan struct{}), nextSeq: 1, firstSeq: 1}
}

// acquire registers a batch of n records weighing bytes and returns its
// sequence number. It blocks while the caps are reached; ctx cancels the wait.
func (l *ledger) acquire(ctx context.Context, n int, bytes int64, pos Position) (uint64, error) {
	for {
		l.mu.Lock()
		empty := l.records == 0 && l.bytes == 0
		if empty || (l.records+n <= l.limit && l.bytes+bytes <= l.maxBytes) {
			seq := l.nextSeq
			l.nextSeq++
			l.records += n
			l.bytes += bytes
			l.entries = append(l.entries, ledgerEntry{pos: pos, records: n, bytes: bytes})
			l.mu.Unlock()
			return seq, nil
		}
		l.startWaitLocked()
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
		if alone || (l.records+n <= l.limit && l.bytes+bytes <= l.maxBytes) {
			e.records += n
			e.bytes += bytes
			l.records += n
			l.bytes += bytes
			l.mu.Unlock()
			return nil
		}
		l.startWaitLocked()
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
	l.durable += e.records
	l.paceLocked()
	close(l.cond)
	l.cond = make(chan struct{})
}

// startWaitLocked notes that the source waits at the cap. The first wait
// of a window restarts it, so that the rate it measures is the sinks'
// while the source had records waiting, not diluted by idle time before.
func (l *ledger) startWaitLocked() {
	if !l.waited {
		l.waited, l.since, l.durable, l.slowest = true, l.pace.now(), 0, 0
	}
}

// wrote notes a sink write that took d, for the pacing window.
func (l *ledger) wrote(d time.Duration) {
	l.mu.Lock()
	l.slowest = max(l.slowest, d)
	l.mu.Unlock()
}

// paceLocked ends the pacing window once it is pace.window old and sets
// the record cap from it (see ledger).
func (l *ledger) paceLocked() {
	if l.pace.hold <= 0 {
		return
	}
	now := l.pace.now()
	elapsed := now.Sub(l.since)
	if elapsed < l.pace.window {
		return
	}
	l.limit = l.maxRecords
	if l.waited {
		rate := float64(l.durable) / elapsed.Seconds()
		hold := max(l.pace.hold, 2*l.slowest)
		l.limit = min(l.maxRecords, max(l.pace.floor, int(rate*hold.Seconds())))
	}
	l.since, l.durable, l.waited, l.slowest = now, 0, false, 0
}

// lowWater pops the contiguous durable prefix and returns the newest
// checkpointable position in it (nil when the prefix holds none), and how
// many batches of the run that position covers (those up to its own).
//
// Invariant 1 and 2: only positions whose batch and every earlier batch are
// durable are returned, and only positions the source marked as transaction
// boundaries (non-nil Pos).
func (l *ledger) lowWater() (Position, uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var pos Position
	var covers uint64
	n := 0
	for n < len(l.entries) && l.entries[n].done {
		if l.entries[n].pos != nil {
			pos, covers = l.entries[n].pos, l.firstSeq+uint64(n)
		}
		n++
	}
	if n == 0 {
		return nil, 0
	}
	// Keep a non-nil position pending only if it was not returned: we
	// return it now, so the prefix can go.
	l.entries = append(l.entries[:0:0], l.entries[n:]...)
	l.firstSeq += uint64(n)
	return pos, covers
}

// settled is how many batches, counted from the first of the run, are
// durable (lowWater moves it).
func (l *ledger) settled() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.firstSeq - 1
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
