package upsert

import "github.com/sluice-cdc/sluice/pipeline"

// Generation is what a sink has recorded of the generations it wrote
// (Invariant 10): Gen is the highest, Held whether any was recorded. The
// sink loads it at Open, answers pipeline.GenerationKeeper from it, and
// before (or in the same transaction as) each write records Raise's
// answer when it has one.
type Generation struct {
	Gen  uint64
	Held bool
}

// Raise returns the generation a write of records must record first: the
// highest generation of its data records when that is above the recorded
// one or none is recorded yet; ok is false when nothing needs recording.
func (g Generation) Raise(records []pipeline.Record) (gen uint64, ok bool) {
	for i := range records {
		r := &records[i]
		if !r.Op.IsData() {
			continue
		}
		if v := r.Version[0]; !ok || v > gen {
			gen, ok = v, true
		}
	}
	if ok && g.Held && gen <= g.Gen {
		return 0, false
	}
	return gen, ok
}
