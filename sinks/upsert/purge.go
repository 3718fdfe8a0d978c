package upsert

import "time"

// maxPurgeEvery bounds the time between two tombstone purges.
const maxPurgeEvery = 10 * time.Minute

// Purge schedules the removal of expired tombstones in hard-delete mode:
// at most once per min(TTL, 10m). Tombstones must outlive the longest
// replay horizon (Invariant 4: an older record must not bring a purged
// row back), which is why soft delete, or a zero TTL, never purges.
type Purge struct {
	HardDelete bool
	TTL        time.Duration
	last       time.Time
}

// Due reports whether a purge should run at now and, if so, the cutoff:
// tombstones written before it may go. It records the run.
func (p *Purge) Due(now time.Time) (cutoff time.Time, ok bool) {
	if !p.HardDelete || p.TTL <= 0 {
		return time.Time{}, false
	}
	if !p.last.IsZero() && now.Sub(p.last) < min(p.TTL, maxPurgeEvery) {
		return time.Time{}, false
	}
	p.last = now
	return now.Add(-p.TTL), true
}
