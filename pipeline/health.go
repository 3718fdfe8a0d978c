package pipeline

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// SinkHealth is one sink's write health, for /status, `sluice status`
// and /readyz (Invariant 9).
type SinkHealth struct {
	Name string
	// FailingSince is when the sink's current run of failed writes began;
	// zero while its writes succeed.
	FailingSince time.Time
	LastError    string
	// BatchLimit is how many records the sink's next write may hold (see
	// adaptive).
	BatchLimit int
	// Undrained counts records handed to the sink's lane and not yet
	// durable in it.
	Undrained int64
	// Quarantined lists the tables the sink refused permanently (a
	// *TableError): their records go to the DLQ until a restart, or are
	// held (Config.QuarantineHold).
	Quarantined []Quarantine
	// Holding counts the records of items held for a quarantined table
	// (Config.QuarantineHold); they are part of Undrained.
	Holding int64
}

// Quarantine is one table a sink refused permanently.
type Quarantine struct {
	Table  TableID
	Since  time.Time
	Reason string
}

// sinkLane is the runtime's per-sink state: the lane's write sizing
// (used by the lane's goroutine only) and its health (read by Stats).
type sinkLane struct {
	ad        *adaptive
	undrained atomic.Int64
	holding   atomic.Int64
	limit     atomic.Int64

	mu           sync.Mutex
	failingSince time.Time
	lastErr      string
	// quarantined is written by the lane's goroutine under mu; the lane
	// reads it without the lock (it is the only writer).
	quarantined map[TableID]Quarantine
}

func newSinkLane(cfg Config) *sinkLane {
	l := &sinkLane{ad: newAdaptive(cfg.BatchMaxRecords, cfg.WriteTargetLatency)}
	l.limit.Store(int64(cfg.BatchMaxRecords))
	return l
}

// failing records a failed write.
func (l *sinkLane) failing(err error) {
	l.limit.Store(int64(l.ad.size()))
	l.mu.Lock()
	if l.failingSince.IsZero() {
		l.failingSince = time.Now()
	}
	l.lastErr = err.Error()
	l.mu.Unlock()
}

// healthy records a successful write.
func (l *sinkLane) healthy() {
	l.limit.Store(int64(l.ad.size()))
	l.mu.Lock()
	l.failingSince = time.Time{}
	l.mu.Unlock()
}

func (l *sinkLane) health(name string) SinkHealth {
	l.mu.Lock()
	defer l.mu.Unlock()
	h := SinkHealth{Name: name, FailingSince: l.failingSince, BatchLimit: int(l.limit.Load()),
		Undrained: l.undrained.Load(), Holding: l.holding.Load()}
	if !l.failingSince.IsZero() {
		h.LastError = l.lastErr
	}
	for _, q := range l.quarantined {
		h.Quarantined = append(h.Quarantined, q)
	}
	slices.SortFunc(h.Quarantined, func(a, b Quarantine) int { return strings.Compare(a.Table.String(), b.Table.String()) })
	return h
}

// quarantine records that the sink refused table permanently.
func (l *sinkLane) quarantine(table TableID, err error) Quarantine {
	q := Quarantine{Table: table, Since: time.Now(), Reason: err.Error()}
	l.mu.Lock()
	if l.quarantined == nil {
		l.quarantined = map[TableID]Quarantine{}
	}
	l.quarantined[table] = q
	l.mu.Unlock()
	return q
}

// holds reports whether records hold one of a table quarantined in this
// sink (lane goroutine only).
func (l *sinkLane) holds(records []Record) bool {
	if len(l.quarantined) == 0 {
		return false
	}
	for i := range records {
		if _, ok := l.held(&records[i]); ok {
			return true
		}
	}
	return false
}

// held returns the quarantine of r's table, if any (lane goroutine only).
func (l *sinkLane) held(r *Record) (Quarantine, bool) {
	if len(l.quarantined) == 0 || r.Table == nil {
		return Quarantine{}, false
	}
	q, ok := l.quarantined[r.Table.ID]
	return q, ok
}
