package window

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"
	"time"

	"go.etcd.io/bbolt"
	"go.uber.org/zap"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/pipeline/binform"
	"github.com/sluice-cdc/sluice/transform/state"
)

// Late changes. A change too late for its windows is counted, and under
// side_output (or correct, past the retention) sent to the dead-letter
// queue or the side output's sink; either way it still reaches its own
// sinks. Under correct, one within the retention corrected its windows.
//
// The state runs ahead of the outputs (a batch's state is written before
// its outputs leave), and a stream change at or below the newest applied
// is a replay the window skips. So a late change whose side output was
// lost in a kill would be skipped on its replay and never side-output.
// The window therefore keeps each late stream change's version with its
// windows (bucket late/<version>) until the batch that sent it is
// settled; a replay of one of them sends it again. A row of the side
// output is an upsert at the change's version and a dead letter may be
// stored twice, so sending again is harmless where the first one landed.
//
// A replay from another server (a later generation, known as a replay by
// Options.Covers) carries other versions: a late change is kept with what
// names it on every server (its TxID, index in the transaction, operation
// and commit time) and its position, so the replay finds it (replayLate)
// and the first change of the run tells, by position, which were before
// it (pruneLate).

var bucketLate = []byte("late")

// stateBuckets are the buckets of a window's state file.
var stateBuckets = [][]byte{bucketRows, bucketRowLog, bucketGroups, bucketMeta, bucketEntries, bucketLate}

// stateSpaces are stateBuckets as the state store's key spaces (none
// with a TTL: windows expire by the watermark).
func stateSpaces() []state.Space {
	out := make([]state.Space, len(stateBuckets))
	for i, b := range stateBuckets {
		out[i] = state.Space{Name: string(b)}
	}
	return out
}

// pendingLate is a late stream change whose side output may not be
// durable: its windows, and the batch that sent it (math.MaxUint64: sent
// before the restart, not again yet).
type pendingLate struct {
	late *Late
	tag  uint64
	id   changeID
	pos  pipeline.Position
}

// changeID names a stream change on every server that replicated it.
type changeID struct {
	txID  uint64
	index uint64 // Version[3]
	op    pipeline.Op
	at    int64 // EventTime, Unix µs
}

func idOf(r *pipeline.Record) changeID {
	return changeID{txID: r.TxID, index: r.Version[3], op: r.Op, at: r.EventTime.UnixMicro()}
}

// onLate handles change r, late for late's windows.
func (o *Operator) onLate(r *pipeline.Record, p *plan, late *Late, stream bool) error {
	o.late++
	policy := o.opts.Late
	if policy == LateCorrect && len(late.Windows) > 0 {
		policy = LateSideOutput // past the retention too
	}
	if o.opts.Observer != nil {
		o.opts.Observer.Late(o.opts.Name, string(policy), 1)
	}
	if policy == LateCorrect {
		return nil // windows past the lateness took it
	}
	if policy == LateDrop {
		o.log.Debug("late change dropped", zap.String("window", o.opts.Name), zap.Stringer("version", r.Version))
		return nil
	}
	if stream {
		o.pending[r.Version] = &pendingLate{late: late, tag: o.batches, id: idOf(r), pos: r.Pos}
		o.pendingDirty[r.Version] = true
	}
	return o.sendLate(r, p, late)
}

// sendLate sends r to the side output.
func (o *Operator) sendLate(r *pipeline.Record, p *plan, late *Late) error {
	if o.opts.SideOutput != "" {
		// To the side output's sink, once per window it was too late for.
		return o.sideOutput(r, p, late)
	}
	// Invariant 7: to the dead-letter queue with its windows and lateness.
	return &lateError{late: late}
}

// replayLate sends a replayed stream change again when it was late: found
// by its version, or, replayed from another server, by its changeID
// among the late changes of earlier generations.
func (o *Operator) replayLate(r *pipeline.Record) error {
	pl := o.pending[r.Version]
	if pl == nil && r.TxID != 0 {
		id := idOf(r)
		for k, p := range o.pending {
			if k[0] < r.Version[0] && p.id == id {
				pl = p
				break
			}
		}
	}
	if pl == nil {
		return nil
	}
	p, err := o.plans.Get(r.Table, o.plan)
	if err != nil {
		return err
	}
	pl.tag = o.batches
	return o.sendLate(r, p, pl.late)
}

// pruneLate forgets, at the first stream change after the start (r,
// replayed or not), the late changes before it: they are not replayed,
// so their batches were settled. Those from after it are replayed and
// sent again (replayLate), and forgotten once that batch is settled.
// Across generations "before" is the source's position order, and
// without one a replay is not known as one (so it is judged again, and
// the late changes of earlier generations are never looked up).
func (o *Operator) pruneLate(r *pipeline.Record) {
	if o.prunedLate {
		return
	}
	o.prunedLate = true
	for k, pl := range o.pending {
		if o.before(k, pl, r) {
			delete(o.pending, k)
			o.pendingDirty[k] = true
		}
	}
}

// before reports whether late change pl, at version k, came before
// stream change r in the source (unknown: kept, sent again if replayed).
func (o *Operator) before(k pipeline.Version, pl *pendingLate, r *pipeline.Record) bool {
	return pipeline.Applied{Version: k, Pos: pl.pos, TxID: pl.id.txID}.Before(r, o.opts.Covers)
}

// settleLate forgets the late changes sent in the first n batches: their
// side output is durable.
func (o *Operator) settleLate(n uint64) {
	for k, pl := range o.pending {
		if pl.tag <= n {
			delete(o.pending, k)
			o.pendingDirty[k] = true
		}
	}
}

// lateChanges adds the pending late changes' changes to cs.
func (o *Operator) lateChanges(cs *changeSet) {
	for k := range o.pendingDirty {
		key := binform.AppendVersion(nil, k)
		pl := o.pending[k]
		if pl == nil {
			cs.del(bucketLate, key)
			continue
		}
		v := binary.AppendUvarint(binary.AppendVarint(nil, pl.late.By), uint64(len(pl.late.Windows)))
		for _, w := range pl.late.Windows {
			v = binary.AppendVarint(binary.AppendVarint(v, w.Start), w.End)
		}
		// Then the changeID and the position (absent in older states).
		v = binary.AppendUvarint(v, pl.id.txID)
		v = binary.AppendVarint(append(v, byte(pl.id.op)), pl.id.at)
		cs.put(bucketLate, key, append(v, pl.pos...))
	}
	clear(o.pendingDirty)
}

func (o *Operator) loadLate(tx *bbolt.Tx) error {
	b := tx.Bucket(bucketLate)
	if b == nil {
		return nil
	}
	return b.ForEach(func(k, v []byte) error {
		kr, r := binform.NewReader(k), binform.NewReader(v)
		ver := kr.Version()
		late := &Late{By: r.Varint()}
		n := r.Uvarint()
		if n > uint64(r.Len()) {
			return fmt.Errorf("window state: corrupt late change %x", k)
		}
		for range n {
			late.Windows = append(late.Windows, Bounds{r.Varint(), r.Varint()})
		}
		pl := &pendingLate{late: late, tag: math.MaxUint64}
		if r.Len() > 0 {
			pl.id = changeID{txID: r.Uvarint(), index: ver[3], op: pipeline.Op(r.Byte()), at: r.Varint()}
			if rest := r.Rest(); len(rest) > 0 {
				pl.pos = append(pipeline.Position(nil), rest...)
			}
		}
		if kr.Err() != nil || r.Err() != nil {
			return fmt.Errorf("window state: corrupt late change %x", k)
		}
		o.pending[ver] = pl
		return nil
	})
}

// lateError is a change too late for its windows, side-output to the
// dead-letter queue.
type lateError struct{ late *Late }

func (e *lateError) Error() string {
	var ws []string
	for _, w := range e.late.Windows {
		ws = append(ws, fmt.Sprintf("[%s, %s)", time.UnixMicro(w.Start).UTC().Format(time.RFC3339Nano), time.UnixMicro(w.End).UTC().Format(time.RFC3339Nano)))
	}
	return fmt.Sprintf("late: the change belongs to window %s, whose state is gone; the watermark is %s past its end (beyond the allowed lateness)",
		strings.Join(ws, ", "), time.Duration(e.late.By)*time.Microsecond)
}
