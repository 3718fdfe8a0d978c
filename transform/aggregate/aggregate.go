package aggregate

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/pipeline/binform"
	"github.com/sluice-cdc/sluice/transform/eval"
	"github.com/sluice-cdc/sluice/transform/scope"
	"github.com/sluice-cdc/sluice/transform/state"
	"github.com/sluice-cdc/sluice/transform/window"
)

// Options define an aggregate.
type Options struct {
	// Name names the operator in errors, metrics and the dead-letter
	// queue.
	Name string
	// Output is the results' table; Input the captured table aggregated.
	Output, Input pipeline.TableID
	// GroupBy lists the group columns (at least one): the output's key.
	GroupBy []string
	// Aggregates are the output's other columns. First and last, which
	// need an event time, are a window's.
	Aggregates []window.AggDef
	// Dir holds the state store; created when absent.
	Dir string
	// Covers, set for a source whose positions name transactions on
	// every server (mysql.Covers), lets a replay of a later generation (a
	// run resumed on another server) be known as one too (A1).
	Covers pipeline.PositionOrder
	// MaxStateBytes caps the state (0: no cap): past it the pipeline
	// stops, naming MaxStateSetting. StateSized is told its size after
	// every write.
	MaxStateBytes   int64
	MaxStateSetting string
	StateSized      func(bytes int64)
	Log             *zap.Logger
}

// Aggregate is the operator: a pipeline.Operator, StateOwner and
// Checkpointed. Every record passes through; the groups' rows are added
// after the batch's records. It is used by one goroutine (the runtime's
// transform stage), except Checkpointed; Close releases the state store.
type Aggregate struct {
	opts    Options
	log     *zap.Logger
	st      *state.Store
	plans   scope.Shapes[*plan]
	rejects scope.Rejects
	multi   []bool // per aggregate: it keeps a multiset (min, max, count_distinct)

	out      *pipeline.Table // the output's shape (nil: no input shape seen)
	outDirty bool            // out changed since it was stored
	applied  pipeline.Applied
	floor    state.Floor[pipeline.Version]
	// reemit holds the groups Begin found recorded (A2), in the order of
	// the Origins they were recorded under: each is written again by the
	// first batch that reaches its Origin.
	reemit []recorded
	begun  bool
}

// plan is where an input shape keeps the columns the aggregate reads.
type plan struct {
	groups []int
	args   []int // per aggregate, its column; -1: count()
}

// Open opens (or creates) the state in opts.Dir. Begin must be called
// before the first Process.
func Open(opts Options) (*Aggregate, error) {
	if opts.Log == nil {
		opts.Log = zap.NewNop()
	}
	if len(opts.GroupBy) == 0 {
		return nil, fmt.Errorf("%s: no group columns", opts.Name)
	}
	if len(opts.Aggregates) == 0 {
		return nil, fmt.Errorf("%s: no aggregates", opts.Name)
	}
	if len(opts.Aggregates) > 255 {
		return nil, fmt.Errorf("%s: %d aggregates; at most 255", opts.Name, len(opts.Aggregates))
	}
	a := &Aggregate{opts: opts, log: opts.Log, rejects: scope.Rejects{Op: opts.Name, Policy: scope.DLQ},
		floor: state.Floor[pipeline.Version]{Less: pipeline.Version.Less}}
	for _, d := range opts.Aggregates {
		switch d.Func {
		case window.First, window.Last:
			return nil, fmt.Errorf("%s: %s = %s(%s): first and last need an event time; use a window", opts.Name, d.As, d.Func, d.Column)
		case window.Min, window.Max, window.CountDistinct:
			a.multi = append(a.multi, true)
		default:
			a.multi = append(a.multi, false)
		}
	}
	st, err := state.Open(state.Spec{What: opts.Name, Dir: opts.Dir, File: "aggregate.pebble", Engine: state.Pebble,
		Spaces: []state.Space{{Name: spaceRows}, {Name: spaceGroups}, {Name: spaceVals}, {Name: spacePending},
			{Name: spaceTombs}, {Name: spaceMeta}},
		Meta: spaceMeta, Needs: "every row of " + opts.Input.String(),
		MaxBytes: opts.MaxStateBytes, Setting: opts.MaxStateSetting, Sized: opts.StateSized})
	if err != nil {
		return nil, err
	}
	a.st = st
	return a, nil
}

// definition is what the state and the outputs already written were
// built for; Begin refuses to resume with state built for another.
func (a *Aggregate) definition() []byte {
	type agg struct{ As, Func, Column string }
	def := struct {
		Input      string
		GroupBy    []string
		Aggregates []agg
	}{Input: a.opts.Input.String(), GroupBy: a.opts.GroupBy}
	for _, d := range a.opts.Aggregates {
		def.Aggregates = append(def.Aggregates, agg{d.As, d.Func.String(), d.Column})
	}
	b, _ := json.Marshal(def) // strings always marshal
	return b
}

// Begin implements pipeline.StateOwner: without a checkpoint the state
// starts over (every row is read again); with one, the state must exist
// and be built for this definition, and the groups written after the
// checkpoint are written again (A2).
func (a *Aggregate) Begin(_ context.Context, resumed bool) error {
	startedOver, err := a.st.Begin(resumed, a.definition())
	if err != nil {
		return err
	}
	if startedOver {
		a.log.Info("aggregate state started over: the pipeline has no checkpoint, so every row is read again", zap.String("aggregate", a.opts.Name))
	}
	a.out, a.applied, a.reemit = nil, pipeline.Applied{}, nil
	err = a.st.View(time.Time{}, func(tx *state.Tx) error {
		s, err := open(tx)
		if err != nil {
			return err
		}
		if a.applied, a.out, err = s.loadMeta(a.opts.Output); err != nil {
			return err
		}
		if resumed {
			a.reemit, err = s.recorded()
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("%s: load the state: %w", a.opts.Name, err)
	}
	a.begun = true
	return nil
}

// Checkpointed implements pipeline.Checkpointed: recorded groups (A2)
// and tombstones (A3) below the floor are forgotten.
func (a *Aggregate) Checkpointed(n uint64) { a.floor.Checkpointed(n) }

// Close releases the state store.
func (a *Aggregate) Close() error { return a.st.Close() }

// Snapshot returns nil: the state is the aggregate's own store
// (StateOwner).
func (*Aggregate) Snapshot() ([]byte, error) { return nil, nil }

// Restore accepts only the nil state Snapshot returns.
func (a *Aggregate) Restore(b []byte) error {
	if len(b) > 0 {
		return fmt.Errorf("%s: unexpected checkpoint state", a.opts.Name)
	}
	return nil
}

// pruneBatch bounds the recorded groups and tombstones one batch forgets.
const pruneBatch = 10_000

// Process applies the batch's changes of the input table and returns the
// batch with, after its records, the rows of the groups it changed (and
// those Begin found recorded). The state commits (fsync) before Process
// returns (Invariant 5); a batch with nothing of the input opens no
// transaction. A record the aggregate cannot read (a value it needs and
// the change does not carry) goes to the dead-letter queue and changes
// nothing.
func (a *Aggregate) Process(ctx context.Context, in []pipeline.Record) ([]pipeline.Record, error) {
	if !a.begun {
		return nil, fmt.Errorf("%s: Process before Begin", a.opts.Name)
	}
	floor, pruning := a.note(in)
	// The groups' rows leave after the batch's records, with the newest
	// Origin among them, so Origins never go down in the order records
	// leave the operator (the exactly-once Kafka sink skips a record whose
	// Origin is below one it wrote).
	// Groups whose Origin comes from the batch's snapshot records alone
	// leave as snapshot records (pipeline.Origins).
	var origins pipeline.Origins
	touches := false
	for i := range in {
		if a.input(&in[i]) {
			touches = true
		}
		origins.Note(&in[i])
	}
	origin := origins.All
	// A2: the groups recorded under an Origin this batch reaches.
	due := 0
	for due < len(a.reemit) && !origin.Less(a.reemit[due].origin) && origin != (pipeline.Version{}) {
		due++
	}
	if !touches && due == 0 {
		return in, nil
	}
	out := in
	applied := a.applied
	err := a.st.Update(time.Time{}, func(tx *state.Tx) error {
		s, err := open(tx)
		if err != nil {
			return err
		}
		b := newBatch(a, s, origin)
		out = out[:len(in):len(in)]
		a.rejects = scope.Rejects{Op: a.opts.Name, Policy: scope.DLQ}
		applied = a.applied
		for _, rec := range a.reemit[:due] {
			if err := b.rewrite(rec.gk); err != nil {
				return err
			}
		}
		for i := range in {
			if err := ctx.Err(); err != nil {
				return err
			}
			r := &in[i]
			if !a.input(r) {
				continue
			}
			stream := r.IsStream()
			if stream && applied.Replayed(r, a.opts.Covers) {
				continue // a replay (A1): the state holds it; A2 writes its groups again
			}
			if r.Op == pipeline.OpTruncate {
				if out, err = b.truncate(r, out); err != nil {
					return err
				}
			} else if err := b.apply(r); err != nil {
				if pipeline.IsFatal(err) {
					return err
				}
				if err := a.rejects.Add(r, fmt.Errorf("%s: %w", a.opts.Name, err)); err != nil {
					return err
				}
			}
			if stream {
				applied = pipeline.AppliedOf(r)
			}
		}
		if out, err = b.emit(out); err != nil {
			return err
		}
		if origins.Ahead() {
			for i := len(in); i < len(out); i++ {
				out[i].Snapshot = true
			}
		}
		if pruning {
			if err := s.prune(floor, pruneBatch); err != nil {
				return err
			}
		}
		return s.storeMeta(applied, a.out, a.outDirty)
	})
	if err != nil {
		return nil, err
	}
	a.applied, a.reemit, a.outDirty = applied, a.reemit[due:], false
	return a.rejects.Result(out)
}

// input reports whether r is a data record of the input table.
func (a *Aggregate) input(r *pipeline.Record) bool {
	return r.Table != nil && r.Op.IsData() && r.Table.ID.Schema == a.opts.Input.Schema && r.Table.ID.Table == a.opts.Input.Table
}

// note counts batch in for the replay floor and returns it; false while
// no checkpoint has set one.
func (a *Aggregate) note(in []pipeline.Record) (pipeline.Version, bool) {
	var least pipeline.Version
	has := false
	for i := range in {
		if v := in[i].Version; v != (pipeline.Version{}) && (!has || v.Less(least)) {
			least, has = v, true
		}
	}
	return a.floor.Note(least, has)
}

// Shape checks an input shape against the aggregate (its group and
// argument columns and their types) and returns t: every record passes
// through.
func (a *Aggregate) Shape(t *pipeline.Table) (*pipeline.Table, error) {
	if t.ID.Schema != a.opts.Input.Schema || t.ID.Table != a.opts.Input.Table {
		return t, nil
	}
	if _, err := a.plans.Get(t, a.plan); err != nil {
		return nil, err
	}
	return t, nil
}

// plan finds the columns the aggregate reads in shape t and builds the
// output's shape from them: the group columns (the key, as the input
// declares them), then the aggregates (window.ResultColumn).
func (a *Aggregate) plan(t *pipeline.Table) (*plan, error) {
	fail := func(field string, err error) (*plan, error) {
		return nil, &scope.FieldError{Field: field, Table: t.ID, Err: err}
	}
	index := func(name string) int {
		for i := range t.Columns {
			if t.Columns[i].Name == name {
				return i
			}
		}
		return -1
	}
	p := &plan{}
	out := &pipeline.Table{ID: a.opts.Output, Generation: t.Generation}
	for _, g := range a.opts.GroupBy {
		i := index(g)
		if i < 0 {
			return fail("group_by", fmt.Errorf("%s", eval.UnknownColumn(t, g)))
		}
		p.groups = append(p.groups, i)
		c := t.Columns[i]
		c.Key, c.Missing = true, nil
		out.KeyIdx = append(out.KeyIdx, len(out.Columns))
		out.Columns = append(out.Columns, c)
	}
	for _, d := range a.opts.Aggregates {
		var in *pipeline.Column
		arg := -1
		if d.Func != window.CountRows {
			if arg = index(d.Column); arg < 0 {
				return fail("aggregates", fmt.Errorf("%s = %s(%s): %s", d.As, d.Func, d.Column, eval.UnknownColumn(t, d.Column)))
			}
			in = &t.Columns[arg]
		}
		p.args = append(p.args, arg)
		col, err := window.ResultColumn(d.Func, d.As, in)
		if err != nil {
			return fail("aggregates", fmt.Errorf("%s = %s(%s): %w", d.As, d.Func, d.Column, err))
		}
		out.Columns = append(out.Columns, col)
	}
	if a.out == nil || !pipeline.SameColumns(a.out, out) {
		a.out, a.outDirty = out, true
	}
	return p, nil
}

// loadMeta reads what storeMeta wrote.
func (s *store) loadMeta(output pipeline.TableID) (applied pipeline.Applied, out *pipeline.Table, err error) {
	if v := s.meta.Get(keyApplied); v != nil {
		if applied, err = pipeline.ParseApplied(v); err != nil {
			return applied, nil, fmt.Errorf("the newest change applied: %w", err)
		}
	}
	if v := s.meta.Get(keyShape); v != nil {
		if out, err = binform.ReadShape(binform.NewReader(v), output); err != nil {
			return applied, nil, fmt.Errorf("the output's shape: %w", err)
		}
	}
	return applied, out, nil
}

// storeMeta writes the newest stream change applied and, when it
// changed, the output's shape.
func (s *store) storeMeta(applied pipeline.Applied, out *pipeline.Table, outDirty bool) error {
	if err := s.meta.Put(keyApplied, applied.AppendBinary(nil)); err != nil {
		return err
	}
	if !outDirty || out == nil {
		return nil
	}
	b, err := binform.AppendShape(nil, out)
	if err != nil {
		return err
	}
	return s.meta.Put(keyShape, b)
}
