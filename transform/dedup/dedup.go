// Package dedup is the dedup transform: of the rows of its tables that
// carry the same key (an expression, such as an outbox table's
// after.event_id) within a TTL of source time, the first row passes and
// the others are dropped, with their later updates and deletes, and
// counted.
//
// What happens to each operation of a table it applies to:
//
//	insert, read, update  the key is evaluated on the new row. NULL: the
//	                      record passes. A key no row had within the TTL
//	                      (or that this row had): the record passes, and
//	                      the row holds the key for a TTL from now. A key
//	                      another row holds: the record is dropped, and
//	                      the row is remembered as a duplicate for a TTL
//	                      (its later changes are dropped too)
//	delete                dropped when the row is a remembered duplicate,
//	                      else passes (the row that held a key keeps it
//	                      until its TTL runs out: an outbox row deleted
//	                      right after it was written still dedups the
//	                      event)
//	truncate, heartbeat, shape   pass
//
// The clock of the TTLs is the records' event time (the source's commit
// time), so a replay decides as the first run did. Records pass through
// untouched: versions, positions and acknowledgements are the input's
// (Invariants 1, 4).
//
// Effectively-once (Invariant 5): the state is written, in one
// transaction with the batch's decisions, before the batch leaves
// Process, so it may run ahead of the checkpoint. A replay is decided
// from it as before: the row that holds a key passes again (the same
// record; sinks take it idempotently) and a duplicate is dropped again
// (D3).
// Invariant D2: a write sweeps only keys expired before the earliest
// event time of the batches a restart could hand again (those after the
// last stored checkpoint: pipeline.Checkpointed), so a replayed change
// finds every key it found the first time, expired or not by its own
// clock as before. Invariant D3: what later changes did is in the state
// too, so a replayed change is not decided again: each change's decision
// is kept under its version and row until a stored checkpoint covers
// every change below it (a version floor, as D2's is of event times),
// and a replay gets that decision. Invariant D4: the same holds for a
// replay from another server. It comes a generation up (docs/versions.md),
// with positions of that server's own, so its versions find nothing; a
// change is then known by what the servers share — its transaction's id
// (the GTID's sequence number, the Postgres xid), its index in the
// transaction, its row, operation and commit time — and the decision kept
// for it in an earlier generation is carried over to its new version.
// The version floor is of the new generation, below which every earlier
// generation's decision sorts, replayed yet or not: while decisions are
// carried, none is forgotten until a stored checkpoint covers the first
// change decided anew, before which the replay is over.
package dedup

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/pipeline/binform"
	"github.com/sluice-cdc/sluice/transform/eval"
	"github.com/sluice-cdc/sluice/transform/scope"
	"github.com/sluice-cdc/sluice/transform/state"
	"github.com/sluice-cdc/sluice/verify"
)

// Options define a dedup.
type Options struct {
	// Name names it in errors, logs and metrics ("transforms[2].dedup").
	Name   string
	Tables scope.Tables
	// Key is the expression whose value identifies an event.
	Key string
	// TTL is how long, in source time, a row holds its key after its
	// last change, and a duplicate is remembered.
	TTL time.Duration
	// Policy is what a record whose key cannot be evaluated does.
	Policy scope.Policy
	// Dir holds the state file.
	Dir string
	// MaxStateBytes caps the state (0: no cap), named by
	// MaxStateSetting; StateSized is told its size after every write.
	MaxStateBytes   int64
	MaxStateSetting string
	StateSized      func(bytes int64)
	// Dropped, when set, counts the records dropped.
	Dropped func(n int)
	Log     *zap.Logger
}

// The key spaces: seen holds, per table and key, the row that holds it;
// dups, per table and row, the duplicates (Invariant D1: a row is in
// dups only if another row held its key when it came, and then every
// later change of it is dropped until its TTL runs out); decided, per
// change (its version, then row: in version order), whether it passed,
// kept until no replay can hand it again (D3).
const (
	spaceSeen    = "seen"
	spaceDups    = "dups"
	spaceDecided = "decided"
	spaceMeta    = "meta"
)

// Dedup is the operator. It is used by one goroutine (the runtime's
// transform stage); Close releases its state.
type Dedup struct {
	opts    Options
	st      *state.Store
	progs   scope.Shapes[*eval.Program]
	rejects scope.Rejects
	begun   bool

	// floor is the earliest event time a replay can carry: what a write
	// may sweep (D2); vfloor the least version: the decisions below it
	// go (D3).
	floor  state.Floor[time.Time]
	vfloor state.Floor[pipeline.Version]
	// decidedTo is the highest version with a decision kept: a change
	// above it is new, and is not looked up (D3).
	decidedTo pipeline.Version
	// carried holds the decisions kept under versions of an earlier
	// generation than decidedTo's, by what identifies their change on
	// any server: a replay from another server finds them there (D4).
	// nil when there are none.
	carried map[string]carriedDecision
	// fresh is the first change this run decided anew while decisions
	// were carried: the replay from another server is over before it.
	// Until a stored checkpoint covers it, no decision is forgotten: the
	// version floor is of the new generation, below which every earlier
	// generation's decision sorts, replayed yet or not (D4).
	fresh pipeline.Version
}

// carriedDecision is a decision of an earlier generation and the key it
// is kept under.
type carriedDecision struct {
	keep bool
	key  []byte
}

// Open opens (or creates) the state in opts.Dir; Begin must be called
// before the first Process.
func Open(o Options) (*Dedup, error) {
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	if o.TTL <= 0 {
		return nil, fmt.Errorf("%s: the ttl must be positive", o.Name)
	}
	st, err := state.Open(state.Spec{What: o.Name, Dir: o.Dir, File: "dedup.db",
		Spaces: []state.Space{{Name: spaceSeen, TTL: o.TTL}, {Name: spaceDups, TTL: o.TTL}, {Name: spaceDecided},
			{Name: spaceMeta}}, Meta: spaceMeta,
		Needs: "the rows of its tables changed within the ttl", MaxBytes: o.MaxStateBytes, Setting: o.MaxStateSetting, Sized: o.StateSized})
	if err != nil {
		return nil, err
	}
	return &Dedup{opts: o, st: st, rejects: scope.Rejects{Op: o.Name, Policy: o.Policy},
		floor: state.Floor[time.Time]{Less: time.Time.Before}, vfloor: state.Floor[pipeline.Version]{Less: pipeline.Version.Less}}, nil
}

// definition is what the state was built for: the key and the TTL.
func (d *Dedup) definition() []byte {
	b, _ := json.Marshal(struct {
		Key string `json:"key"`
		TTL string `json:"ttl"`
	}{d.opts.Key, d.opts.TTL.String()})
	return b
}

// Begin starts the state over without a checkpoint (every row is read
// again), and with one refuses state built for another key or TTL.
func (d *Dedup) Begin(_ context.Context, resumed bool) error {
	startedOver, err := d.st.Begin(resumed, d.definition())
	if err != nil {
		return err
	}
	if startedOver {
		d.opts.Log.Info("dedup state started over: the pipeline has no checkpoint, so every table is read again", zap.String("dedup", d.opts.Name))
	}
	// The highest version decided: its key is the space's last.
	err = d.st.View(time.Time{}, func(tx *state.Tx) error {
		decided, err := tx.Space(spaceDecided)
		if err != nil {
			return err
		}
		if err := decided.Scan(nil, func(k, _ []byte) error {
			if len(k) >= 32 {
				d.decidedTo = binform.NewReader(k[:32]).Version()
			}
			return nil
		}); err != nil {
			return err
		}
		// A run of a new generation stopped before a checkpoint: what it
		// did not replay yet of the earlier one's is still carried (D4).
		return d.carry(decided, d.decidedTo[0])
	})
	if err != nil {
		return err
	}
	d.begun = true
	return nil
}

// carry indexes the decisions kept under versions of a generation below
// gen by their change's identity (D4).
func (d *Dedup) carry(decided *state.Keys, gen uint64) error {
	d.carried, d.fresh = nil, pipeline.Version{} // a new replay: not over before a change is decided anew
	err := decided.Scan(nil, func(k, v []byte) error {
		if len(k) < 32 || len(v) != decisionLen {
			return nil // a decision written before D4: not carried
		}
		ver := binform.NewReader(k[:32]).Version()
		if ver[0] >= gen {
			return errStop // the rest sort above
		}
		if d.carried == nil {
			d.carried = map[string]carriedDecision{}
		}
		d.carried[identity(ver, k[32:], v[1:])] = carriedDecision{keep: v[0] == 1, key: bytes.Clone(k)}
		return nil
	})
	if errors.Is(err, errStop) {
		return nil
	}
	return err
}

// decisionLen is the length of a kept decision: whether the change
// passed, then what identifies it beside its version and row (change).
const decisionLen = 1 + 1 + 8 + 8

// change appends what identifies r on any server beside its row and its
// index in the transaction: its operation, its transaction's id and its
// commit time (D4).
func change(dst []byte, r *pipeline.Record) []byte {
	dst = append(dst, byte(r.Op))
	dst = binary.BigEndian.AppendUint64(dst, r.TxID)
	var at int64
	if !r.EventTime.IsZero() {
		at = r.EventTime.UnixNano()
	}
	return binary.BigEndian.AppendUint64(dst, uint64(at))
}

// identity is the change's key in carried: change (its operation,
// transaction and commit time), its index in the transaction (the last
// component of a streamed change's version on every source) and its row.
func identity(v pipeline.Version, row, change []byte) string {
	b := make([]byte, 0, len(change)+8+len(row))
	b = append(b, change...)
	b = binary.BigEndian.AppendUint64(b, v[3])
	return string(append(b, row...))
}

// Close releases the state file.
func (d *Dedup) Close() error { return d.st.Close() }

// Snapshot returns nil: the state is its own durable store, written
// before the batch leaves Process (Invariant 5).
func (*Dedup) Snapshot() ([]byte, error) { return nil, nil }

// Restore accepts only the nil state Snapshot returns.
func (d *Dedup) Restore(b []byte) error {
	if len(b) > 0 {
		return fmt.Errorf("%s: unexpected checkpoint state", d.opts.Name)
	}
	return nil
}

func (d *Dedup) program(t *pipeline.Table) (*eval.Program, error) {
	return d.progs.Get(t, func(t *pipeline.Table) (*eval.Program, error) { return eval.Compile(d.opts.Key, t, nil) })
}

// Shape returns t unchanged, or the error its records get (the key does
// not compile against it, or the table has no primary key).
func (d *Dedup) Shape(t *pipeline.Table) (*pipeline.Table, error) {
	if !d.opts.Tables.Match(t.ID) {
		return t, nil
	}
	if _, err := d.program(t); err != nil {
		return nil, &scope.FieldError{Field: "key", Table: t.ID, Err: err}
	}
	if len(t.KeyIdx) == 0 {
		return nil, &scope.FieldError{Field: "tables", Table: t.ID, Err: fmt.Errorf("table %s has no primary key: a duplicate row cannot be told from the row itself", t.ID)}
	}
	return t, nil
}

// Process drops the duplicates of the batch, writing what it learnt
// before it returns (one transaction, synced).
func (d *Dedup) Process(_ context.Context, in []pipeline.Record) ([]pipeline.Record, error) {
	if !d.begun {
		return nil, fmt.Errorf("%s: Process before Begin", d.opts.Name)
	}
	horizon, below, prune := d.note(in)
	applies := false
	for i := range in {
		if d.applies(&in[i]) {
			applies = true
			break
		}
	}
	if !applies {
		return in, nil
	}
	out := in[:0]
	dropped := 0
	err := d.st.Update(time.Time{}, func(tx *state.Tx) error {
		seen, err := tx.Space(spaceSeen)
		if err != nil {
			return err
		}
		dups, err := tx.Space(spaceDups)
		if err != nil {
			return err
		}
		decided, err := tx.Space(spaceDecided)
		if err != nil {
			return err
		}
		if prune && (d.carried == nil || d.fresh != (pipeline.Version{}) && d.fresh.Less(below)) {
			if err := forget(decided, below); err != nil {
				return err
			}
			d.uncarry(below)
		}
		tx.SweepUntil(horizon) // D2
		for i := range in {
			r := &in[i]
			if !d.applies(r) {
				out = scope.Pass(out, in, i)
				continue
			}
			tx.At(r.EventTime)
			row := rowKey(r)
			keep, err := d.replayed(r, row, decided, func() (bool, error) { return d.decide(r, row, seen, dups) })
			if err != nil {
				if err := d.rejects.Add(r, err); err != nil {
					return err
				}
				continue
			}
			if keep {
				out = scope.Pass(out, in, i)
			} else {
				dropped++
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if dropped > 0 && d.opts.Dropped != nil {
		d.opts.Dropped(dropped)
	}
	return d.rejects.Result(out)
}

// note counts batch in and returns the sweep horizon (D2), and the
// version below which no decision can be asked for again (D3; prune
// false while no checkpoint says).
func (d *Dedup) note(in []pipeline.Record) (horizon time.Time, below pipeline.Version, prune bool) {
	var first time.Time
	var least pipeline.Version
	has := false
	for i := range in {
		if t := in[i].EventTime; !t.IsZero() && (first.IsZero() || t.Before(first)) {
			first = t
		}
		if d.applies(&in[i]) && (!has || in[i].Version.Less(least)) {
			least, has = in[i].Version, true
		}
	}
	horizon, _ = d.floor.Note(first, !first.IsZero())
	below, prune = d.vfloor.Note(least, has)
	return horizon, below, prune
}

// forget deletes the decisions of changes below version v (D3): their
// keys lead with the version, so they are a prefix of the space.
func forget(decided *state.Keys, v pipeline.Version) error {
	bound := binform.AppendVersion(nil, v)
	var gone [][]byte
	err := decided.Scan(nil, func(k, _ []byte) error {
		if bytes.Compare(k[:min(len(k), len(bound))], bound) >= 0 {
			return errStop
		}
		gone = append(gone, bytes.Clone(k))
		return nil
	})
	if err != nil && !errors.Is(err, errStop) {
		return err
	}
	for _, k := range gone {
		if err := decided.Delete(k); err != nil {
			return err
		}
	}
	return nil
}

// uncarry drops from carried the decisions forget deleted: those below
// version v.
func (d *Dedup) uncarry(v pipeline.Version) {
	bound := binform.AppendVersion(nil, v)
	for id, c := range d.carried {
		if bytes.Compare(c.key[:len(bound)], bound) < 0 {
			delete(d.carried, id)
		}
	}
	if len(d.carried) == 0 {
		d.carried = nil
	}
}

// errStop ends a Scan.
var errStop = errors.New("stop")

// Checkpointed learns that a stored checkpoint covers the first n batches:
// the horizon moves to the earliest event time from the last of them on
// (D2).
func (d *Dedup) Checkpointed(n uint64) {
	d.floor.Checkpointed(n)
	d.vfloor.Checkpointed(n)
}

// applies reports whether r is a data record of one of the tables.
func (d *Dedup) applies(r *pipeline.Record) bool {
	return r.Table != nil && r.Op.IsData() && d.opts.Tables.Match(r.Table.ID)
}

// replayed is decide for r, recorded under its version and row (D3,
// what Invariant 5's state ahead of the checkpoint needs): a
// change handed again after a restart gets the decision it had, and
// changes nothing. The state may hold what later changes did (it runs
// ahead of the checkpoint), and deciding again from it could differ: a
// duplicate mark a later change of the row renewed would drop a delete
// that passed when the mark had run out. A change replayed from another
// server finds its decision by identity in carried instead (D4).
func (d *Dedup) replayed(r *pipeline.Record, row []byte, decided *state.Keys, decide func() (bool, error)) (bool, error) {
	k := append(binform.AppendVersion(make([]byte, 0, 32+len(row)), r.Version), row...)
	val := change(make([]byte, 1, decisionLen), r)
	var keep bool
	var err error
	carried := false
	if !d.decidedTo.Less(r.Version) {
		if v := decided.Get(k); len(v) > 0 {
			return v[0] == 1, nil
		}
	} else {
		if r.Version[0] > d.decidedTo[0] {
			// A new generation: the earlier ones' decisions are carried
			// (D4).
			if err := d.carry(decided, r.Version[0]); err != nil {
				return false, err
			}
		}
		d.decidedTo = r.Version
	}
	if d.carried != nil {
		id := identity(r.Version, row, val[1:])
		if c, ok := d.carried[id]; ok {
			// Replayed from another server: the decision moves to the
			// change's new version.
			delete(d.carried, id)
			if err := decided.Delete(c.key); err != nil {
				return false, err
			}
			keep, carried = c.keep, true
		}
	}
	if !carried {
		if d.carried != nil && d.fresh == (pipeline.Version{}) {
			d.fresh = r.Version
		}
		if keep, err = decide(); err != nil {
			return keep, err
		}
	}
	if keep {
		val[0] = 1
	}
	return keep, decided.Put(k, val)
}

// rowKey is r's table and row key, the row's identity in the state (nil
// for a change without an image).
func rowKey(r *pipeline.Record) []byte {
	img := r.After
	if r.Op == pipeline.OpDelete {
		img = r.Before
	}
	if img == nil {
		return nil
	}
	return []byte(r.Table.ID.String() + "\x00" + verify.RowKey(r.Table, img))
}

// decide reports whether r, whose rowKey is row, passes, and records
// what it learnt.
func (d *Dedup) decide(r *pipeline.Record, row []byte, seen, dups *state.Keys) (bool, error) {
	if row == nil {
		return true, nil
	}
	table := r.Table.ID.String()
	if dups.Get(row) != nil {
		// A duplicate's later change (D1); the mark lives on from now.
		return false, dups.Put(row, []byte{1})
	}
	if r.Op == pipeline.OpDelete {
		return true, nil
	}
	p, err := d.program(r.Table)
	if err != nil {
		return false, &scope.FieldError{Field: "key", Table: r.Table.ID, Err: err}
	}
	v, err := p.Eval(r)
	if err != nil {
		return false, err
	}
	if v == nil {
		return true, nil // no key: not an event to dedup
	}
	key := []byte(table + "\x00" + verify.Canon(v))
	holder := seen.Get(key)
	if holder == nil || string(holder) == string(row) {
		return true, seen.Put(key, row) // this row holds the key from now
	}
	return false, dups.Put(row, []byte{1})
}
