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
// and a replay gets that decision.
package dedup

import (
	"bytes"
	"context"
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
		return decided.Scan(nil, func(k, _ []byte) error {
			if len(k) >= 32 {
				d.decidedTo = binform.NewReader(k[:32]).Version()
			}
			return nil
		})
	})
	if err != nil {
		return err
	}
	d.begun = true
	return nil
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
		if prune {
			if err := forget(decided, below); err != nil {
				return err
			}
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
// that passed when the mark had run out.
func (d *Dedup) replayed(r *pipeline.Record, row []byte, decided *state.Keys, decide func() (bool, error)) (bool, error) {
	k := append(binform.AppendVersion(make([]byte, 0, 32+len(row)), r.Version), row...)
	if !d.decidedTo.Less(r.Version) {
		if v := decided.Get(k); len(v) == 1 {
			return v[0] == 1, nil
		}
	} else {
		d.decidedTo = r.Version
	}
	keep, err := decide()
	if err != nil {
		return keep, err
	}
	b := byte(0)
	if keep {
		b = 1
	}
	return keep, decided.Put(k, []byte{b})
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
