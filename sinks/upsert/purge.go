package upsert

import (
	"slices"
	"time"

	"github.com/sluice-cdc/sluice/pipeline"
)

// maxPurgeEvery bounds the time between two tombstone purges.
const maxPurgeEvery = 10 * time.Minute

// StampEvery bounds how far a target's stored snapshot time may lag
// behind its last snapshot record: the stamp is rewritten at most this
// often, and Allowed adds it back.
const StampEvery = time.Minute

// Purge schedules the removal of expired tombstones in hard-delete mode:
// at most once per min(TTL, 10m), and for each target only once no
// snapshot record of it was written for TTL (a tombstone lives at least
// until its table's snapshot is over, then TTL; Invariant 4: a late
// snapshot row must not bring a purged row back). Tombstones must also
// outlive the longest replay horizon, which is why soft delete, or a zero
// TTL, never purges.
//
// The sink stores each target's snapshot time (Stamps, before the batch
// that holds the snapshot records is written, so a crash can only leave
// it too new) and loads it back at open (Load).
type Purge struct {
	HardDelete bool
	TTL        time.Duration
	last       time.Time
	snapshots  map[string]time.Time
}

// On reports whether the sink purges at all.
func (p *Purge) On() bool { return p.HardDelete && p.TTL > 0 }

// Due reports whether a purge should run at now and, if so, the cutoff:
// tombstones written before it may go in the targets Allowed admits. It
// records the run.
func (p *Purge) Due(now time.Time) (cutoff time.Time, ok bool) {
	if !p.On() {
		return time.Time{}, false
	}
	if !p.last.IsZero() && now.Sub(p.last) < min(p.TTL, maxPurgeEvery) {
		return time.Time{}, false
	}
	p.last = now
	return now.Add(-p.TTL), true
}

// Load sets the stored snapshot times, by target.
func (p *Purge) Load(stamps map[string]time.Time) { p.snapshots = stamps }

// SnapshotTables returns the distinct shapes of records' snapshot records
// (OpRead, or marked Snapshot: an initial load's barriers too), in order.
func SnapshotTables(records []pipeline.Record) []*pipeline.Table {
	var out []*pipeline.Table
	for i := range records {
		r := &records[i]
		if r.Table == nil || !(r.Snapshot || r.Op == pipeline.OpRead) ||
			(len(out) > 0 && out[len(out)-1] == r.Table) || slices.Contains(out, r.Table) {
			continue
		}
		out = append(out, r.Table)
	}
	return out
}

// Stamps returns the targets of records' snapshot records whose stored
// snapshot time is absent or older than StampEvery at now: the sink
// stores now for each, durably, before it writes records, then calls
// Stamped. Nil when the sink never purges.
func (p *Purge) Stamps(records []pipeline.Record, target func(pipeline.TableID) string, now time.Time) []string {
	if !p.On() {
		return nil
	}
	var out []string
	for _, tb := range SnapshotTables(records) {
		t := target(tb.ID)
		if at, ok := p.snapshots[t]; (ok && now.Sub(at) < StampEvery) || slices.Contains(out, t) {
			continue
		}
		out = append(out, t)
	}
	return out
}

// Stamped records that targets' snapshot time now is stored.
func (p *Purge) Stamped(targets []string, now time.Time) {
	if p.snapshots == nil {
		p.snapshots = map[string]time.Time{}
	}
	for _, t := range targets {
		p.snapshots[t] = now
	}
}

// Allowed reports whether target's tombstones written before cutoff may
// go: no snapshot record of it was written after cutoff (its stored time
// plus the StampEvery it may lag is before cutoff).
func (p *Purge) Allowed(target string, cutoff time.Time) bool {
	at, ok := p.snapshots[target]
	return !ok || at.Add(StampEvery).Before(cutoff)
}
