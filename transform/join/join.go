package join

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/transform/state"
)

// Lookup is one table joined to the from table.
type Lookup struct {
	// Table is the looked-up table, "schema.table".
	Table string
	// On lists the from table's columns that hold the looked-up row's
	// primary key, in the order of that key.
	On []string
	// As is the name of the output column that holds the looked-up row.
	As string
	// Columns selects the looked-up row's columns; empty: all of them.
	Columns []string
}

// Options configures a join.
type Options struct {
	// Output names the joined rows' table, "schema.table".
	Output string
	// From is the table whose rows become output rows, "schema.table".
	From string
	// With lists the looked-up tables (many-to-one) and Children the
	// nested ones (one-to-many); at least one of the two is set.
	With     []Lookup
	Children []Child
	// Overflowed, when set, counts the outputs whose arrays held only the
	// first Max of their children (OverflowTruncate).
	Overflowed func(n int)
	// Dir holds the state store; created when absent.
	Dir string
	// Covers, set for a source whose positions name transactions on
	// every server (mysql.Covers), tells which moves of an earlier
	// generation a replay from another server still needs (N1).
	Covers pipeline.PositionOrder
	// MaxStateBytes caps the state file (0: no cap): past it the
	// pipeline stops, naming MaxStateSetting. StateSized is told its size
	// after every write.
	MaxStateBytes   int64
	MaxStateSetting string
	StateSized      func(bytes int64)
	Log             *zap.Logger
}

// Join is the operator. It is used by one goroutine (the runtime's
// transform stage); Close releases the state store.
type Join struct {
	opts    Options
	log     *zap.Logger
	st      *state.Store
	outName [2]string // schema, table

	from   *pipeline.Table            // the from table's latest shape
	shapes map[string]*pipeline.Table // the looked-up and child tables' latest shapes
	out    *pipeline.Table            // the output shape, rebuilt when an input shape changes
	gen    int

	begun bool // Begin was called
	// inputs holds the joined tables' (schema, table), so Process tells
	// joined records apart without building names.
	inputs map[[2]string]bool
	// floor is the least version a replay can carry: moves below it are
	// pruned (N1).
	floor state.Floor[pipeline.Applied]
	// warm keeps the rows committed lately, decoded; barriers, the
	// truncate barriers read or written (both mirror committed state).
	warm     *rowCache
	barriers map[string]pipeline.Version
	// refresh holds the rewrites of outputs after a new shape (N2).
	refresh refreshes
	// childFields holds, per child, the columns its rows are rendered
	// with (nil while its table's shape is unknown).
	childFields [][]pipeline.Column
}

// warmRows bounds the rows a join keeps decoded between batches.
const warmRows = 200_000

// maxLookups bounds a join's lookups: each has an index bucket named by
// its number in one byte.
const maxLookups = 255

// Open opens (or creates) the join's state in opts.Dir. Begin must be
// called before the first Process.
func Open(opts Options) (*Join, error) {
	if opts.Log == nil {
		opts.Log = zap.NewNop()
	}
	schema, table, ok := strings.Cut(opts.Output, ".")
	if !ok || schema == "" || table == "" {
		return nil, fmt.Errorf("join: output %q is not schema.table", opts.Output)
	}
	what := kind(opts) + " " + opts.Output
	if len(opts.With) == 0 && len(opts.Children) == 0 {
		return nil, fmt.Errorf("%s: no lookups and no children", what)
	}
	if len(opts.With) > maxLookups || len(opts.Children) > maxLookups {
		return nil, fmt.Errorf("%s: %d lookups and %d children; at most %d of each", what, len(opts.With), len(opts.Children), maxLookups)
	}
	st, err := state.Open(state.Spec{What: what, Dir: opts.Dir, File: "join.pebble", Replaces: "join.db", Engine: state.Pebble,
		Spaces: []state.Space{{Name: string(bucketRows)}, {Name: string(bucketIndex)}, {Name: string(bucketMeta)},
			{Name: spaceChildren}, {Name: spaceMoves}, {Name: spaceMoveOrder}},
		Meta: string(bucketMeta), Needs: "every row of " + strings.Join(inputTables(opts), ", "),
		MaxBytes: opts.MaxStateBytes, Setting: opts.MaxStateSetting, Sized: opts.StateSized})
	if err != nil {
		return nil, err
	}
	j := &Join{opts: opts, log: opts.Log, st: st, outName: [2]string{schema, table}, shapes: map[string]*pipeline.Table{},
		inputs: map[[2]string]bool{}, barriers: map[string]pipeline.Version{}, floor: state.Floor[pipeline.Applied]{Less: func(a, b pipeline.Applied) bool { return a.Version.Less(b.Version) }}, warm: newRowCache(warmRows),
		childFields: make([][]pipeline.Column, len(opts.Children))}
	for _, name := range inputTables(opts) {
		id := tableID(name)
		j.inputs[[2]string{id.Schema, id.Table}] = true
	}
	if err := st.View(time.Time{}, j.load); err != nil {
		_ = st.Close()
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return j, nil
}

// kind names the operator in errors: a nest when it has children.
func kind(opts Options) string {
	if len(opts.Children) > 0 {
		return "nest"
	}
	return "join"
}

// inputTables lists the from table, then the looked-up and child tables,
// each once.
func inputTables(opts Options) []string {
	names := []string{opts.From}
	for _, l := range opts.With {
		if !slices.Contains(names, l.Table) {
			names = append(names, l.Table)
		}
	}
	for _, c := range opts.Children {
		if !slices.Contains(names, c.Table) {
			names = append(names, c.Table)
		}
	}
	return names
}

// definition is what the state and the outputs already written were
// built for: the from table and, per lookup, the table, the on columns,
// the output column and the selected columns. Begin refuses to resume
// with state built for another definition.
func (j *Join) definition() []byte {
	type lookup struct {
		Table   string   `json:"table"`
		On      []string `json:"on"`
		As      string   `json:"as"`
		Columns []string `json:"columns,omitempty"`
	}
	type child struct {
		Table   string   `json:"table"`
		On      []string `json:"on"`
		As      string   `json:"as"`
		OrderBy []string `json:"order_by,omitempty"`
		Columns []string `json:"columns,omitempty"`
	}
	def := struct {
		From     string   `json:"from"`
		With     []lookup `json:"with"`
		Children []child  `json:"children,omitempty"`
	}{From: j.opts.From}
	for _, l := range j.opts.With {
		def.With = append(def.With, lookup{l.Table, l.On, l.As, l.Columns})
	}
	for _, c := range j.opts.Children {
		def.Children = append(def.Children, child{c.Table, c.On, c.As, c.OrderBy, c.Columns})
	}
	b, _ := json.Marshal(def) // strings and slices of strings always marshal
	return b
}

// load reads the stored shapes.
func (j *Join) load(tx *state.Tx) error {
	st, err := newState(tx)
	if err != nil {
		return err
	}
	if j.from, err = st.shape(j.fromID()); err != nil {
		return err
	}
	for _, name := range inputTables(j.opts)[1:] {
		t, err := st.shape(tableID(name))
		if err != nil {
			return err
		}
		if t != nil {
			j.setShape(name, t)
		}
	}
	j.rebuildOut()
	return nil
}

// Begin implements pipeline.StateOwner. Without a checkpoint the source
// delivers every input again, so the state starts over: state left by an
// initial load that was interrupted and is now redone from a new snapshot
// would keep rows deleted in between alive in the outputs. With one, the
// state must have been built for this definition from the start of the
// pipeline: a join added to a running pipeline, or whose state was
// removed or built for other tables, columns or names, has no way to
// produce (or correct) the outputs of rows that do not change again, so
// it refuses to run and says how to rebuild.
func (j *Join) Begin(_ context.Context, resumed bool) error {
	clear(j.warm.m) // the state may start over below
	clear(j.barriers)
	startedOver, err := j.st.Begin(resumed, j.definition())
	if err != nil {
		return err
	}
	if err := j.st.View(time.Time{}, func(tx *state.Tx) error {
		st, err := newState(tx)
		if err != nil {
			return err
		}
		return j.refresh.load(st, resumed)
	}); err != nil {
		return fmt.Errorf("%s: %w", j.what(), err)
	}
	if resumed {
		j.begun = true
		return nil
	}
	if startedOver {
		j.log.Info("join state started over: the pipeline has no checkpoint, so every table is read again",
			zap.String("join", j.opts.Output))
	}
	j.from, j.out = nil, nil
	clear(j.shapes)
	j.begun = true
	return nil
}

func tableID(name string) pipeline.TableID {
	s, t, _ := strings.Cut(name, ".")
	return pipeline.TableID{Schema: s, Table: t}
}

func (j *Join) fromID() pipeline.TableID { return tableID(j.opts.From) }

// Close releases the state store.
func (j *Join) Close() error { return j.st.Close() }

// Snapshot returns nil: the join's state is its own durable store, written
// before its outputs leave Process and guarded by row versions (Invariant 5).
func (j *Join) Snapshot() ([]byte, error) { return nil, nil }

// Restore accepts only the nil state Snapshot returns.
func (j *Join) Restore(b []byte) error {
	if len(b) > 0 {
		return fmt.Errorf("%s: unexpected checkpoint state", j.what())
	}
	return nil
}

// Process passes every input record through and appends, after each
// record of the from table or a looked-up table, the joined rows it
// changes. The state transaction commits (fsync) before Process returns,
// so the state is durable before any output can be (Invariant 5); a
// batch without a record of a joined table opens no transaction.
func (j *Join) Process(ctx context.Context, in []pipeline.Record) ([]pipeline.Record, error) {
	if !j.begun {
		return nil, fmt.Errorf("%s: Process before Begin", j.what())
	}
	floor, floored := j.note(in)
	pruning := floored && len(j.opts.Children) > 0
	if !slices.ContainsFunc(in, j.joins) {
		return in, nil
	}
	out := make([]pipeline.Record, 0, len(in)+len(in)/2)
	var landed map[string]*entry
	// The join's key spaces have no TTL: the clock is not read.
	err := j.st.Update(time.Time{}, func(tx *state.Tx) error {
		st, err := newState(tx)
		if err != nil {
			return err
		}
		st.warm, landed, st.barriers = j.warm, st.landed, j.barriers
		for i := range in {
			if err := ctx.Err(); err != nil {
				return err
			}
			r := &in[i]
			out = append(out, *r)
			if !j.joins(*r) {
				continue
			}
			var err error
			if out, err = j.apply(st, r, out); err != nil {
				return fmt.Errorf("%s: %s %s at version %s: %w", j.what(), r.Table.ID, r.Op, r.Version, err)
			}
		}
		if pruning {
			if err := st.pruneMoves(floor, pruneBatch, j.opts.Covers); err != nil {
				return err
			}
		}
		if floored {
			if err := j.refresh.forget(st, floor.Version); err != nil {
				return err
			}
		}
		return st.flush()
	})
	if err != nil {
		clear(j.warm.m) // they may hold rows of the transaction that failed
		clear(j.barriers)
		return nil, err
	}
	j.warm.add(landed)
	return out, nil
}

// note counts batch in and returns the replay floor (N1, N2); false
// while no checkpoint has set one.
func (j *Join) note(in []pipeline.Record) (pipeline.Applied, bool) {
	var least pipeline.Applied
	has := false
	for i := range in {
		if v := in[i].Version; v != (pipeline.Version{}) && (!has || v.Less(least.Version)) {
			least, has = pipeline.AppliedOf(&in[i]), true
		}
	}
	j.refresh.replayFrom(least.Version, has)
	return j.floor.Note(least, has)
}

// Checkpointed implements pipeline.Checkpointed: the replay floor follows
// the stored checkpoints (N1).
func (j *Join) Checkpointed(n uint64) { j.floor.Checkpointed(n) }

func (j *Join) what() string { return kind(j.opts) + " " + j.opts.Output }

// joins reports whether r is a data record of a joined table.
func (j *Join) joins(r pipeline.Record) bool {
	return r.Table != nil && r.Op.IsData() && j.inputs[[2]string{r.Table.ID.Schema, r.Table.ID.Table}]
}
