package window

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/pipeline/binform"
	"github.com/sluice-cdc/sluice/transform/scope"
	"github.com/sluice-cdc/sluice/transform/state"
	"github.com/sluice-cdc/sluice/verify"
)

// AggDef is one output column of a window: As = Func(Column). Column is
// empty for count().
type AggDef struct {
	As     string
	Func   Func
	Column string
}

// LatePolicy is what happens to a change too late for its window (its
// state is gone: the watermark passed the window's end plus the allowed
// lateness).
type LatePolicy string

const (
	LateDrop       LatePolicy = "drop"        // counted, not applied
	LateSideOutput LatePolicy = "side_output" // to the dead-letter queue, or SideOutput, with its window and lateness
	// LateCorrect keeps a window's groups' aggregates for CorrectWithin
	// past the lateness, so a later change still corrects the window;
	// past that, as side_output.
	LateCorrect LatePolicy = "correct"
)

// Options define a window operator.
type Options struct {
	// Name names the operator in errors and the dead-letter queue.
	Name string
	// Output is the results' table; Input the captured table windowed.
	Output, Input pipeline.TableID
	// EventTime is the column holding the event time (timestamp,
	// timestamptz, date or a number of seconds since the epoch); empty:
	// the source commit time.
	EventTime string
	Spec      Spec
	// OutOfOrder is how far behind the newest event time seen the
	// watermark stays; Lateness how long after a window's end its state
	// stays to take late changes; IdleTimeout how long (in source time,
	// by the heartbeats) without a change of the input before the
	// watermark follows the heartbeats' time.
	OutOfOrder, Lateness, IdleTimeout time.Duration
	// Early, when positive, also writes the open windows' results that
	// changed, marked partial, at most this often (wall clock).
	Early      time.Duration
	GroupBy    []string
	Aggregates []AggDef
	Late       LatePolicy
	// CorrectWithin, with LateCorrect, is how long past the lateness a
	// window's aggregates are kept.
	CorrectWithin time.Duration
	// SideOutput, with LateSideOutput or LateCorrect, names the sink that takes the late
	// changes, as rows of <Output>_late (LateTable); empty: the
	// dead-letter queue.
	SideOutput string
	// Dir holds the state file.
	Dir string
	// MaxStateBytes caps the state file (0: no cap): past it the
	// pipeline stops, naming MaxStateSetting. StateSized is told its size
	// after every write.
	MaxStateBytes   int64
	MaxStateSetting string
	StateSized      func(bytes int64)
	// Backfilling lists the tables whose existing rows are being read
	// for the first time (pipeline.Backfiller); nil: none. The watermark
	// holds while the input is among them: historical rows arrive in key
	// order, not time order.
	Backfilling func() []pipeline.TableID
	// Observer receives the window's measurements; nil: none.
	Observer Observer
	// Covers, set for a source whose positions name transactions on
	// every server (mysql.Covers), lets a replay of a later generation (a
	// run resumed on another server) be known as one too (applied).
	Covers pipeline.PositionOrder
	Log    *zap.Logger
}

// Observer receives a window's measurements (obs.WindowMetrics).
type Observer interface {
	// Late counts n changes of window too late for their windows, handled
	// under policy.
	Late(window, policy string, n int)
	// Progress reports after each batch: the watermark's lag behind the
	// wall clock (0 before the first watermark), the windows, groups and
	// rows held, the state file's size, and how long the batch's state
	// write took. It must not block.
	Progress(window string, lag time.Duration, windows, groups, rows int, stateBytes int64, write time.Duration)
}

// Operator is the window transform: a stateful pipeline.Operator,
// pipeline.StateOwner and pipeline.Syncer. Records of other tables, and
// the input's own, pass through; the window's results are added as
// records of Output.
//
// State: the engine's (store.go, sessions_store.go), in Dir, written in
// one bbolt transaction with what changed since the last write: at every
// checkpoint (Sync), so a row or group changed by a thousand batches
// between two checkpoints is written once, and before a batch's own
// outputs (results, side-output rows, dead letters) leave, so every result
// in a sink is in the state a restart starts from, to be corrected or
// deleted there (a replay need not pass through the intermediate states
// a result came from: a session's bounds, a group that emptied). The
// state is never behind the checkpoint (Invariant 5) and may be ahead of
// it: rows carry their versions and the newest change applied is stored
// with them, so a replay changes nothing; the changes after the last
// write are applied again in the same order, and each result's version
// counts the changes applied to its group, so a version-guarded sink
// never takes a result that misses changes over one that has them.
type Operator struct {
	opts Options
	log  *zap.Logger
	st   *state.Store
	eng  engine
	// out is the results' shape; outDirty: not yet stored.
	out      *pipeline.Table
	outDirty bool
	plans    scope.Shapes[*plan]
	rejects  scope.Rejects
	// maxSeen is the newest event time of a stream change of the input;
	// lastInput the source time of the last one, for idleness.
	maxSeen, lastInput int64
	begun              bool
	// batches counts Process calls in this run; settled how many of their
	// outputs are durable (Settled).
	batches uint64
	settled atomic.Uint64
	// applied is the newest version of a stream change (not a snapshot
	// row) the window processed, stored with the state: stream changes
	// arrive in version order, so one at or below it is a replay after a
	// restart, even when the window it went to has expired since; a
	// replay from another server, a generation up, by its position
	// (pipeline.Applied).
	applied pipeline.Applied
	// reemitAt, while reemitDue, is where a resumed run's replay must
	// reach before every result held is written again: the newest change
	// the state holds. origins are of this run's records: the newest
	// OrderVersion is the Origin of the results.
	reemitAt  pipeline.Version
	reemitDue bool
	origins   pipeline.Origins
	// barrier: the run started over (no checkpoint: every table is read
	// again), and the results' table is still to be truncated below the
	// run's generation before its first result. barrierGen is that
	// generation once known (gen: the highest of the run's changes), and
	// barrierTag the batch the truncate went out with in this run, until
	// it is durable: the state keeps the barrier until then, so a restart
	// that finds it there writes it again (barrierDirty: not yet stored).
	barrier, barrierDirty bool
	barrierGen, gen       uint64
	barrierTag            uint64
	late                  int64 // changes too late, by policy, since the start
	// lastEarly is when the partial results were last written.
	lastEarly time.Time
	// side holds the batch's late changes for SideOutput.
	side []pipeline.Record
	// pending are the late stream changes whose side output may not be
	// durable yet (late.go).
	pending      map[pipeline.Version]*pendingLate
	pendingDirty map[pipeline.Version]bool
	prunedLate   bool
	// mu serialises Process and the encoding of the state's changes;
	// unsynced: Process ran since they were last taken. wmu orders the
	// state writes (taken while mu is held); retry, under wmu, is a
	// change set a write could not write.
	mu       sync.Mutex
	unsynced bool
	wmu      sync.Mutex
	retry    *changeSet
}

// PartialColumn is the results' column saying a row is a partial result
// (Options.Early).
const PartialColumn = "partial"

// engine is what the operator needs of the windows' state: Engine for
// tumbling and hopping windows, Sessions for sessions. Nothing blocks;
// not safe for concurrent use.
type engine interface {
	// Upsert sets a row's contribution (retracting its earlier one); it
	// reports the windows too late to take it, nil when none. A version
	// not above the row's last one changes nothing.
	Upsert(Input) *Late
	// Delete retracts a row's contribution at a version.
	Delete(row string, version pipeline.Version)
	// Truncate retracts every row older than version.
	Truncate(version pipeline.Version)
	// AdvanceTagged moves the watermark and returns the results to write;
	// what became final is tagged and goes with Release.
	AdvanceTagged(wm int64, tag uint64) []Emission
	// Release drops what Advances tagged up to upTo, once their results
	// are durable.
	Release(upTo uint64)
	// Reemit writes every result held again with the next Advance (or
	// Early, for a partial one), at the version it had.
	Reemit()
	// Early returns the partial results of the open windows that changed
	// since they were last written.
	Early() []Emission
	// RetractPrior retracts, from windows past the lateness, what a row
	// no longer held contributed, as a before image gives it (late:
	// correct).
	RetractPrior(prior Input, version pipeline.Version)
	// Contribution is a row's current contribution (a copy); false: none
	// held.
	Contribution(row string) (*Input, bool)
	// Held reports whether a row's contribution is held (Contribution
	// without the copy).
	Held(row string) bool
	MaxOrigin() pipeline.Version
	Watermark() int64
	// Open reports the windows, groups and rows held.
	Open() (windows, groups, rows int)
	// Changes adds what changed since the last Changes to cs, which must
	// then be written.
	Changes(cs *changeSet) error
}

// plan is where an input shape keeps what the window reads.
type plan struct {
	time   int   // the event time column; -1: commit time
	groups []int // the group columns
	args   []int // per aggregate, its column; -1: count()
	// late is the side output's shape for this input shape (side.go);
	// nil until a change is late.
	late *pipeline.Table
}

// Open opens (or creates) the state; Begin must be called before the
// first Process.
func Open(o Options) (*Operator, error) {
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	if err := o.Spec.Check(); err != nil {
		return nil, fmt.Errorf("%s: %w", o.Name, err)
	}
	if len(o.Aggregates) == 0 {
		return nil, fmt.Errorf("%s: no aggregates", o.Name)
	}
	if o.Late == LateCorrect && (o.Spec.Gap > 0 || o.EventTime == "" || o.CorrectWithin <= 0) {
		return nil, fmt.Errorf("%s: late: correct needs a tumbling or hopping window, an event_time column and a positive correct_within", o.Name)
	}
	st, err := state.Open(state.Spec{What: o.Name, Dir: o.Dir, File: "window.db",
		Spaces: stateSpaces(), Meta: string(bucketMeta), Needs: "every row of " + o.Input.String(),
		MaxBytes: o.MaxStateBytes, Setting: o.MaxStateSetting, Sized: o.StateSized})
	if err != nil {
		return nil, err
	}
	return &Operator{opts: o, log: o.Log, st: st, rejects: scope.Rejects{Op: o.Name, Policy: scope.DLQ},
		maxSeen: NoWatermark, lastInput: NoWatermark,
		pending: map[pipeline.Version]*pendingLate{}, pendingDirty: map[pipeline.Version]bool{}}, nil
}

var (
	keyApplied = []byte("applied")
	keyBarrier = []byte("barrier")
)

// definition is what the state and the results already written were
// built for; Begin refuses to resume with state built for another.
func (o *Operator) definition() []byte {
	type agg struct {
		As, Func, Column string
	}
	def := struct {
		Input, EventTime        string
		Size, Advance, Lateness time.Duration
		Gap                     time.Duration `json:",omitempty"`
		Partial                 bool          `json:",omitempty"` // the results have the partial column
		Retain                  time.Duration `json:",omitempty"` // late: correct keeps aggregates that long
		GroupBy                 []string
		Aggregates              []agg
	}{Input: o.opts.Input.String(), EventTime: o.opts.EventTime, Size: o.opts.Spec.Size, Advance: o.opts.Spec.Advance,
		Lateness: o.opts.Lateness, Gap: o.opts.Spec.Gap, Partial: o.opts.Early > 0,
		GroupBy: o.opts.GroupBy}
	if o.opts.Late == LateCorrect {
		def.Retain = o.opts.CorrectWithin
	}
	for _, a := range o.opts.Aggregates {
		def.Aggregates = append(def.Aggregates, agg{a.As, a.Func.String(), a.Column})
	}
	b, _ := json.Marshal(def) // strings and numbers always marshal
	return b
}

// Begin implements pipeline.StateOwner: without a checkpoint the state
// starts over (every row is read again); with one, the state must exist
// and be built for this definition.
func (o *Operator) Begin(_ context.Context, resumed bool) error {
	startedOver, err := o.st.Begin(resumed, o.definition())
	if err != nil {
		return err
	}
	if startedOver {
		o.log.Info("window state started over: the pipeline has no checkpoint, so every table is read again", zap.String("window", o.opts.Name))
	}
	o.pending, o.pendingDirty, o.prunedLate = map[pipeline.Version]*pendingLate{}, map[pipeline.Version]bool{}, false
	err = o.st.View(time.Time{}, func(stx *state.Tx) error {
		tx := stx.Bolt() // the window's own layout (store.go, rowlog.go)
		var err error
		eo := EngineOptions{Spec: o.opts.Spec, Aggs: o.aggs(), Lateness: o.opts.Lateness.Microseconds(), Early: o.opts.Early > 0}
		if o.opts.Late == LateCorrect {
			eo.Retain = o.opts.CorrectWithin.Microseconds()
		}
		if o.opts.Spec.Gap > 0 {
			o.eng, err = LoadSessions(tx, eo)
		} else {
			o.eng, err = Load(tx, eo)
		}
		if err != nil {
			return err
		}
		if v := tx.Bucket(bucketMeta).Get(keyApplied); v != nil {
			if o.applied, err = pipeline.ParseApplied(v); err != nil {
				return err
			}
		}
		if v := tx.Bucket(bucketMeta).Get(keyBarrier); v != nil {
			o.barrier, o.barrierGen = true, binform.NewReader(v).Uvarint()
		}
		if err := o.loadLate(tx); err != nil {
			return err
		}
		return o.loadShape(tx)
	})
	if err != nil {
		return fmt.Errorf("%s: load the state: %w", o.opts.Name, err)
	}
	// The results written last before the stop may not be durable, and
	// the changes they came from are not replayed into them (the state
	// holds them): every closed window's results are written again. Their
	// Origin is never ahead of the replay (the exactly-once Kafka sink
	// skips a record whose Origin is below one it wrote).
	// They are written with the first batch (an idle source brings no
	// replay), whose Origin may be below what the sinks already hold, and
	// again when the replay reaches the newest change the state holds,
	// with an Origin not below it.
	if !resumed {
		// Results an earlier attempt wrote may have no counterpart in
		// this one (a group or session the rows read again do not make):
		// a barrier in the results' table retires them.
		o.barrier, o.barrierGen, o.barrierDirty = true, 0, true
	}
	o.eng.Reemit()
	o.reemitDue, o.reemitAt, o.origins = o.applied.Version != pipeline.Version{}, o.applied.Version, pipeline.Origins{}
	o.begun = true
	return nil
}

// Settled implements pipeline.Settler: windows whose final results went
// out in the first n batches can be forgotten.
func (o *Operator) Settled(n uint64) { o.settled.Store(n) }

func (o *Operator) aggs() []Agg {
	out := make([]Agg, len(o.opts.Aggregates))
	for i, a := range o.opts.Aggregates {
		out[i] = Agg{Func: a.Func}
	}
	return out
}

// Close releases the state file.
func (o *Operator) Close() error { return o.st.Close() }

// Snapshot: the operator keeps its own durable state (StateOwner).
func (*Operator) Snapshot() ([]byte, error) { return nil, nil }

// Restore: the operator keeps its own durable state (StateOwner).
func (*Operator) Restore([]byte) error { return nil }

// Sync implements pipeline.Syncer: what changed since the last write —
// the engine's state, the newest version applied, the late changes
// pending and the results' shape — is encoded while Process waits, then
// written in one bbolt transaction while Process goes on.
func (o *Operator) Sync(context.Context) error {
	o.mu.Lock()
	if !o.begun {
		o.mu.Unlock()
		return nil
	}
	o.wmu.Lock() // taken before mu is let go: writes commit in the order their changes were taken
	defer o.wmu.Unlock()
	cs, p, err := o.takeChanges()
	o.mu.Unlock()
	return o.write(cs, p, err)
}

// progress is what a state write reports to the Observer.
type progress struct {
	lag                   time.Duration
	windows, groups, rows int
}

// takeChanges encodes what changed since the last write (mu held).
func (o *Operator) takeChanges() (*changeSet, progress, error) {
	var p progress
	if wm := o.eng.Watermark(); wm != NoWatermark {
		p.lag = time.Since(time.UnixMicro(wm))
	}
	p.windows, p.groups, p.rows = o.eng.Open()
	if !o.unsynced {
		return nil, p, nil
	}
	o.unsynced = false
	cs := &changeSet{}
	err := o.eng.Changes(cs)
	if err == nil {
		cs.put(bucketMeta, keyApplied, o.applied.AppendBinary(nil))
		if o.barrierDirty {
			o.barrierDirty = false
			if o.barrier || o.barrierTag > 0 {
				cs.put(bucketMeta, keyBarrier, binary.AppendUvarint(nil, o.barrierGen))
			} else {
				cs.del(bucketMeta, keyBarrier)
			}
		}
		o.lateChanges(cs)
		err = o.shapeChanges(cs)
	}
	return cs, p, err
}

// write writes a change set that could not be written before, then cs
// (wmu held); what fails is kept for the next write.
func (o *Operator) write(cs *changeSet, p progress, encodeErr error) error {
	all := o.retry
	switch {
	case all == nil && cs != nil:
		all = cs
	case all == nil:
		all = &changeSet{}
	case cs != nil:
		all.then(cs) // what Changes took is there even on an error
	}
	if encodeErr != nil {
		o.retry = all
		return fmt.Errorf("%s: encode the state: %w", o.opts.Name, encodeErr)
	}
	if len(all.buckets) == 0 {
		return nil
	}
	began := time.Now()
	// The window's key spaces have no TTL (windows expire by the
	// watermark): the clock is not read.
	err := o.st.Update(time.Time{}, func(tx *state.Tx) error { return all.apply(tx.Bolt()) })
	if err != nil && !pipeline.IsFatal(err) {
		o.retry = all
		return fmt.Errorf("%s: write the state: %w", o.opts.Name, err)
	}
	o.retry = nil
	if err != nil {
		return err // written, but past its cap: the pipeline stops before what the write covers leaves
	}
	if o.opts.Observer != nil {
		o.opts.Observer.Progress(o.opts.Name, p.lag, p.windows, p.groups, p.rows, o.st.Size(), time.Since(began))
	}
	return nil
}

// Process applies the batch's changes of the input table to the windows,
// moves the watermark, and returns the batch with the results of the
// windows that closed (or were corrected) added; when it adds any (or a
// side-output row, or a dead letter), it writes the state first.
func (o *Operator) Process(_ context.Context, in []pipeline.Record) ([]pipeline.Record, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.begun {
		return nil, fmt.Errorf("%s: Process before Begin", o.opts.Name)
	}
	o.batches++
	for i := range in {
		o.origins.Note(&in[i])
		if in[i].Op.IsData() {
			o.gen = max(o.gen, in[i].Version[0])
		}
	}
	if o.reemitDue && !o.origins.All.Less(o.reemitAt) {
		o.eng.Reemit()
		o.reemitDue = false
	}
	o.eng.Release(o.settled.Load())
	if o.barrierTag > 0 && o.settled.Load() >= o.barrierTag {
		o.barrierTag, o.barrierDirty = 0, true // durable: forgotten with the next write
	}
	o.settleLate(o.settled.Load())
	for i := range in {
		r := &in[i]
		if r.Op == pipeline.OpHeartbeat {
			o.heartbeat(r)
			continue
		}
		if r.Table == nil || r.Table.ID.Schema != o.opts.Input.Schema || r.Table.ID.Table != o.opts.Input.Table {
			continue
		}
		if err := o.apply(r); err != nil {
			if err := o.rejects.Add(r, err); err != nil {
				return nil, err
			}
		}
	}
	emissions := o.eng.AdvanceTagged(o.watermark(), o.batches)
	if o.opts.Early > 0 && time.Since(o.lastEarly) >= o.opts.Early {
		o.lastEarly = time.Now()
		emissions = append(emissions, o.eng.Early()...)
	}
	o.unsynced = true
	if len(emissions) > 0 && o.out == nil {
		return nil, fmt.Errorf("%s: results to write but no shape of %s known", o.opts.Name, o.opts.Input)
	}
	barrier := o.barrier && o.out != nil && max(o.barrierGen, o.gen) > 0
	switch {
	case barrier:
		// The run that started over writes its own generation; a resumed
		// run writes the stored one again, also when it resumed a
		// generation up on another server: raised, it would retire the
		// results the run that started over wrote, of windows forgotten
		// since, which nothing writes again.
		gen := o.barrierGen
		if gen == 0 {
			gen = o.gen
		}
		o.barrier, o.barrierGen, o.barrierTag, o.barrierDirty = false, gen, o.batches, true
	case o.barrier && o.barrierGen == 0 && o.gen == 0 && len(emissions) > 0:
		// Generation 0 is a first run's: no earlier attempt wrote results.
		o.barrier, o.barrierDirty = false, true
	}
	if len(emissions) > 0 || len(o.side) > 0 || o.rejects.Len() > 0 || barrier {
		// Invariants 4 and 5: what the window writes leaves only once
		// the state that knows it is written. A replay need not pass
		// through the states the results came from (a session's bounds,
		// a group that emptied and came back), so the results in the
		// sinks must be in the state it starts from, to be corrected or
		// deleted there.
		o.wmu.Lock()
		cs, p, err := o.takeChanges()
		err = o.write(cs, p, err)
		o.wmu.Unlock()
		if err != nil {
			return nil, err
		}
	}
	out := in
	// The results leave after the batch's records: their Origin is the
	// newest version this run has seen, so Origins never go down in the
	// order records leave the operator and never run ahead of a replay
	// (the exactly-once Kafka sink skips a record whose Origin is below
	// one it wrote). Before any versioned record (results a heartbeat
	// closed at the start of a run), the newest the state applied.
	// Results whose Origin comes from the run's snapshot records alone
	// leave as snapshot records (pipeline.Origins).
	origin, ahead := o.origins.All, o.origins.Ahead()
	if origin == (pipeline.Version{}) {
		// No record yet this run: the newest change the state applied,
		// ahead when it was a snapshot read.
		origin = o.eng.MaxOrigin()
		ahead = o.applied.Version.Less(origin)
	}
	if barrier {
		// Below every result of this run (their versions lead with its
		// generation, then count changes from 1), above every earlier
		// attempt's (Invariant 10). A load's barrier, as the snapshot's
		// truncate of a table is: sinks treat it alike.
		out = append(out, pipeline.Record{Op: pipeline.OpTruncate, Table: o.out, Version: pipeline.Version{o.barrierGen}, Origin: origin,
			Snapshot: true})
	}
	for _, e := range emissions {
		e.Origin = origin
		r := o.record(e)
		r.Snapshot = ahead
		out = append(out, r)
	}
	for _, r := range o.side {
		r.Origin, r.Snapshot = origin, r.Snapshot || ahead
		out = append(out, r)
	}
	o.side = o.side[:0]
	return o.rejects.Result(out)
}

// apply applies one change of the input table.
func (o *Operator) apply(r *pipeline.Record) error {
	stream := r.IsStream()
	if stream {
		o.pruneLate(r)
		if o.applied.Replayed(r, o.opts.Covers) {
			// A replay: the state holds it already; one that was late goes
			// to the side output again.
			return o.replayLate(r)
		}
		defer func() { o.applied = pipeline.AppliedOf(r) }()
	}
	p, err := o.plans.Get(r.Table, o.plan)
	if err != nil {
		return err
	}
	img := r.After
	switch r.Op {
	case pipeline.OpTruncate:
		o.eng.Truncate(r.Version)
		return nil
	case pipeline.OpDelete:
		if r.Before != nil {
			key := verify.RowKey(r.Table, r.Before)
			if !o.eng.Held(key) && o.opts.Late == LateCorrect {
				if err := o.retractPrior(r, p, key); err != nil {
					return err
				}
			}
			o.eng.Delete(key, r.Version)
		}
		return nil
	case pipeline.OpInsert, pipeline.OpUpdate, pipeline.OpRead:
		if img == nil {
			return nil
		}
	default:
		return nil // a shape: the plan follows it when its rows come
	}
	key := verify.RowKey(r.Table, img)
	if r.Op == pipeline.OpUpdate && o.opts.Late == LateCorrect && !o.eng.Held(key) {
		if err := o.retractPrior(r, p, key); err != nil {
			return err
		}
	}
	in, err := o.input(r, p, img, key, func() *Input {
		prev, _ := o.eng.Contribution(key)
		return prev
	})
	if err != nil {
		return err
	}
	// A snapshot row past the lateness may be counted in a retained
	// window already: it corrects nothing.
	in.Strict = !stream
	if r.IsStream() {
		// Snapshot rows arrive in key order, not time order: only stream
		// changes move the watermark.
		o.maxSeen = max(o.maxSeen, in.Time)
		o.lastInput = max(o.lastInput, r.EventTime.UnixMicro())
	}
	if late := o.eng.Upsert(in); late != nil {
		return o.onLate(r, p, late, stream)
	}
	return nil
}

// input reads image img of row key (r's After, or its Before) as the
// window's input: event time, group values and arguments. A value the
// change does not carry (an unchanged TOAST value) comes from the row's
// contribution held, which held gives (nil: none; held may be nil).
func (o *Operator) input(r *pipeline.Record, p *plan, img []any, key string, held func() *Input) (Input, error) {
	vals := make([]any, len(p.groups)+len(p.args)) // one allocation for both
	in := Input{Row: key, Version: r.Version, Group: vals[:len(p.groups):len(p.groups)], Args: vals[len(p.groups):]}
	var prev *Input
	fetched := false
	previous := func() *Input { // looked up only when a value needs it
		if !fetched && held != nil {
			prev, fetched = held(), true
		}
		return prev
	}
	value := func(col int, prior func(Input) any) (any, error) {
		v := img[col]
		if v != pipeline.UnchangedValue {
			return v, nil
		}
		if previous() == nil {
			return nil, fmt.Errorf("column %s of %s: the change does not carry its value and the window holds no earlier one (%s)",
				r.Table.Columns[col].Name, r.Table.ID, pipeline.NotCarried)
		}
		return prior(*prev), nil
	}
	var err error
	if p.time < 0 {
		in.Time = r.EventTime.UnixMicro()
	} else {
		v, err := value(p.time, func(c Input) any { return nil })
		if err != nil {
			return in, err
		}
		if v == nil && previous() != nil {
			in.Time = prev.Time
		} else if in.Time, err = eventTime(v); err != nil {
			return in, fmt.Errorf("column %s: %w", o.opts.EventTime, err)
		}
	}
	for i, col := range p.groups {
		if in.Group[i], err = value(col, func(c Input) any { return c.Group[i] }); err != nil {
			return in, err
		}
	}
	for i, col := range p.args {
		if col < 0 {
			in.Args[i] = true // count(): every row
			continue
		}
		if in.Args[i], err = value(col, func(c Input) any { return c.Args[i] }); err != nil {
			return in, err
		}
	}
	return in, nil
}

// retractPrior retracts, under late: correct, what a row the window no
// longer holds contributed to its retained windows, read from the
// change's before image (complete: plan refuses a table whose before
// images carry only the key). With the commit time as event time the
// before image says nothing of it: nothing is retracted.
func (o *Operator) retractPrior(r *pipeline.Record, p *plan, key string) error {
	if r.Before == nil || p.time < 0 {
		return nil
	}
	prior, err := o.input(r, p, r.Before, key, nil)
	if err != nil {
		return fmt.Errorf("before image: %w", err)
	}
	o.eng.RetractPrior(prior, r.Version)
	return nil
}

// heartbeat advances an idle input's clock: after IdleTimeout of source
// time without a change of the input, the watermark may follow the
// heartbeats.
func (o *Operator) heartbeat(r *pipeline.Record) {
	if o.opts.IdleTimeout <= 0 || r.EventTime.IsZero() {
		return
	}
	now := r.EventTime.UnixMicro()
	if o.lastInput == NoWatermark {
		// No change seen since the start: idleness counts from here.
		o.lastInput = now
		return
	}
	if now-o.lastInput >= o.opts.IdleTimeout.Microseconds() {
		o.maxSeen = max(o.maxSeen, now)
	}
}

// watermark is the newest event time seen minus the out-of-orderness,
// held while the input is being backfilled.
func (o *Operator) watermark() int64 {
	if o.maxSeen == NoWatermark {
		return NoWatermark
	}
	if o.opts.Backfilling != nil {
		for _, t := range o.opts.Backfilling() {
			if t.Schema == o.opts.Input.Schema && t.Table == o.opts.Input.Table {
				return o.eng.Watermark()
			}
		}
	}
	return o.maxSeen - o.opts.OutOfOrder.Microseconds()
}

// Late reports how many changes came too late since the start.
func (o *Operator) Late() int64 { return o.late }

// Shape checks an input shape against the window (the event time, group
// and aggregate columns and their types) and returns t: every record
// passes through.
func (o *Operator) Shape(t *pipeline.Table) (*pipeline.Table, error) {
	if t.ID.Schema != o.opts.Input.Schema || t.ID.Table != o.opts.Input.Table {
		return t, nil
	}
	if _, err := o.plans.Get(t, o.plan); err != nil {
		return nil, err
	}
	return t, nil
}
