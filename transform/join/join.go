package join

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/pipeline/binform"
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
	With []Lookup
	// Dir holds the state store; created when absent.
	Dir string
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

	from    *pipeline.Table            // the from table's latest shape
	lookups map[string]*pipeline.Table // the looked-up tables' latest shapes
	out     *pipeline.Table            // the output shape, rebuilt when an input shape changes
	gen     int

	begun bool // Begin was called
	// inputs holds the joined tables' (schema, table), so Process tells
	// joined records apart without building names.
	inputs map[[2]string]bool
}

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
	if len(opts.With) == 0 {
		return nil, fmt.Errorf("join %s: no lookups", opts.Output)
	}
	if len(opts.With) > maxLookups {
		return nil, fmt.Errorf("join %s: %d lookups; at most %d", opts.Output, len(opts.With), maxLookups)
	}
	st, err := state.Open(state.Spec{What: "join " + opts.Output, Dir: opts.Dir, File: "join.db",
		Spaces: []state.Space{{Name: string(bucketRows)}, {Name: string(bucketIndex)}, {Name: string(bucketMeta)}}, Meta: string(bucketMeta), Needs: "every row of " + strings.Join(append([]string{opts.From}, lookupTables(opts.With)...), ", "),
		MaxBytes: opts.MaxStateBytes, Setting: opts.MaxStateSetting, Sized: opts.StateSized})
	if err != nil {
		return nil, err
	}
	j := &Join{opts: opts, log: opts.Log, st: st, outName: [2]string{schema, table}, lookups: map[string]*pipeline.Table{},
		inputs: map[[2]string]bool{}}
	for _, name := range append([]string{opts.From}, lookupTables(opts.With)...) {
		id := tableID(name)
		j.inputs[[2]string{id.Schema, id.Table}] = true
	}
	if err := st.View(time.Time{}, j.load); err != nil {
		_ = st.Close()
		return nil, fmt.Errorf("join %s: %w", opts.Output, err)
	}
	return j, nil
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
	def := struct {
		From string   `json:"from"`
		With []lookup `json:"with"`
	}{From: j.opts.From}
	for _, l := range j.opts.With {
		def.With = append(def.With, lookup{l.Table, l.On, l.As, l.Columns})
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
	for _, l := range j.opts.With {
		t, err := st.shape(tableID(l.Table))
		if err != nil {
			return err
		}
		if t != nil {
			j.lookups[l.Table] = t
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
	startedOver, err := j.st.Begin(resumed, j.definition())
	if err != nil {
		return err
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
	clear(j.lookups)
	j.begun = true
	return nil
}

// tableList names the joined tables.
func (j *Join) tableList() string {
	var names []string
	for _, n := range append([]string{j.opts.From}, lookupTables(j.opts.With)...) {
		if !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	return strings.Join(names, ", ")
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
		return fmt.Errorf("join %s: unexpected checkpoint state", j.opts.Output)
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
		return nil, fmt.Errorf("join %s: Process before Begin", j.opts.Output)
	}
	if !slices.ContainsFunc(in, j.joins) {
		return in, nil
	}
	out := make([]pipeline.Record, 0, len(in)+len(in)/2)
	// The join's key spaces have no TTL: the clock is not read.
	err := j.st.Update(time.Time{}, func(tx *state.Tx) error {
		st, err := newState(tx)
		if err != nil {
			return err
		}
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
				return fmt.Errorf("join %s: %s %s at version %s: %w", j.opts.Output, r.Table.ID, r.Op, r.Version, err)
			}
		}
		return st.flush()
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// joins reports whether r is a data record of a joined table.
func (j *Join) joins(r pipeline.Record) bool {
	return r.Table != nil && r.Op.IsData() && j.inputs[[2]string{r.Table.ID.Schema, r.Table.ID.Table}]
}

func lookupTables(with []Lookup) []string {
	out := make([]string, len(with))
	for i, l := range with {
		out[i] = l.Table
	}
	return out
}

// fanOutWarn is the number of output rows one input may cause before the
// join logs it: they all travel in the input's batch (Invariant 9).
const fanOutWarn = 100_000

// apply updates the state with r and appends the output records it causes:
// the row itself when r is a from-table row, the rows that refer to it
// when r is a looked-up row, and every row that refers to a lookup whose
// embedded columns r's new shape changed. Each output row is emitted once
// per input (seen).
func (j *Join) apply(st joinState, r *pipeline.Record, out []pipeline.Record) ([]pipeline.Record, error) {
	name := r.Table.ID.String()
	isFrom := name == j.opts.From
	var lookupN []int
	for n, l := range j.opts.With {
		if l.Table == name {
			lookupN = append(lookupN, n)
		}
	}
	refresh, err := j.observeShape(st, r.Table, isFrom, lookupN)
	if err != nil {
		return out, err
	}
	var seen emitted
	if out, err = j.applyAndEmit(st, r, isFrom, lookupN, refresh, &seen, out); err != nil {
		return out, err
	}
	if len(seen) >= fanOutWarn {
		j.log.Warn("one change fans out to many joined rows, all in one batch past the in-flight cap",
			zap.String("join", j.opts.Output), zap.String("table", name), zap.Stringer("op", r.Op), zap.Int("rows", len(seen)))
	}
	return out, nil
}

// emitted is the set of from-table keys emitted for one input, allocated
// only when an input emits through more than one path.
type emitted map[string]bool

// add records k and reports whether it was new.
func (e *emitted) add(k []byte) bool {
	if (*e)[string(k)] {
		return false
	}
	if *e == nil {
		*e = emitted{}
	}
	(*e)[string(k)] = true
	return true
}

func (j *Join) applyAndEmit(st joinState, r *pipeline.Record, isFrom bool, lookupN, refresh []int, seen *emitted, out []pipeline.Record) ([]pipeline.Record, error) {
	var err error
	if r.Op == pipeline.OpTruncate {
		if out, err = j.truncate(st, r, isFrom, lookupN, seen, out); err != nil {
			return out, err
		}
	} else {
		keys, err := j.applyRow(st, r, isFrom)
		if err != nil {
			return out, err
		}
		if isFrom {
			// A from-table row joins itself; the set is needed only when
			// a lookup path may reach it again (a self-join, a refresh).
			track := len(lookupN) > 0 || len(refresh) > 0
			for _, k := range keys {
				if track {
					seen.add(k)
				}
				if out, err = j.emit(st, r, k, out); err != nil {
					return out, err
				}
			}
		}
		if len(lookupN) > 0 {
			if out, err = j.emitReferrers(st, r, lookupN, keys, seen, out); err != nil {
				return out, err
			}
		}
	}
	if len(refresh) > 0 {
		// The embedded columns changed (a column added, dropped or
		// retyped): every row that embeds this lookup is written again.
		return j.emitAll(st, r, refresh, seen, out)
	}
	return out, nil
}

// observeShape records a new shape of an input table and rebuilds the
// output shape. It returns the lookups whose embedded columns differ from
// the previous shape's (none for a table seen for the first time).
func (j *Join) observeShape(st joinState, t *pipeline.Table, isFrom bool, lookupN []int) ([]int, error) {
	name := t.ID.String()
	if (!isFrom || j.from == t) && (len(lookupN) == 0 || j.lookups[name] == t) {
		return nil, nil
	}
	for _, n := range lookupN {
		l := j.opts.With[n]
		if len(t.KeyIdx) != len(l.On) {
			return nil, fmt.Errorf("lookup %s: on lists %d column(s) but %s has a %d-column primary key (%s); list the columns of %s that hold it, in key order",
				l.As, len(l.On), name, len(t.KeyIdx), keyNames(t), j.opts.From)
		}
		for _, c := range l.Columns {
			if !slices.ContainsFunc(t.Columns, func(x pipeline.Column) bool { return x.Name == c }) {
				return nil, fmt.Errorf("lookup %s: %s has no column %q (listed in columns)", l.As, name, c)
			}
		}
	}
	if isFrom {
		if len(t.KeyIdx) == 0 {
			return nil, fmt.Errorf("%s has no primary key: joined rows need one", name)
		}
		for _, l := range j.opts.With {
			if slices.ContainsFunc(t.Columns, func(x pipeline.Column) bool { return x.Name == l.As }) {
				return nil, fmt.Errorf("lookup %s: %s already has a column %q; choose another name for as", l.As, name, l.As)
			}
			for _, c := range l.On {
				if !slices.ContainsFunc(t.Columns, func(x pipeline.Column) bool { return x.Name == c }) {
					return nil, fmt.Errorf("lookup %s: %s has no column %q (listed in on)", l.As, name, c)
				}
			}
		}
	}
	if err := st.putShape(t); err != nil {
		return nil, err
	}
	var refresh []int
	if prev := j.lookups[name]; prev != nil {
		for _, n := range lookupN {
			if !sameMembers(lookupColumns(prev, j.opts.With[n]), lookupColumns(t, j.opts.With[n])) {
				refresh = append(refresh, n)
			}
		}
	}
	if isFrom {
		j.from = t
	}
	if len(lookupN) > 0 {
		j.lookups[name] = t
	}
	j.rebuildOut()
	return refresh, nil
}

// sameMembers reports whether two lookups' embedded columns render the
// same objects: the same names, types and missing values, in order.
func sameMembers(a, b []pipeline.Column) bool {
	return slices.EqualFunc(a, b, func(x, y pipeline.Column) bool {
		if x.Name != y.Name || x.Type != y.Type || x.Elem != y.Elem {
			return false
		}
		mx, errX := binform.Append(nil, x.Missing)
		my, errY := binform.Append(nil, y.Missing)
		return errX == nil && errY == nil && bytes.Equal(mx, my)
	})
}

func keyNames(t *pipeline.Table) string {
	names := make([]string, len(t.KeyIdx))
	for i, k := range t.KeyIdx {
		names[i] = t.Columns[k].Name
	}
	return strings.Join(names, ", ")
}

// rebuildOut derives the output shape: the from table's columns, then one
// JSON column per lookup whose Fields are the looked-up columns.
func (j *Join) rebuildOut() {
	if j.from == nil {
		return
	}
	cols := slices.Clone(j.from.Columns)
	for _, l := range j.opts.With {
		c := pipeline.Column{Name: l.As, Type: pipeline.TypeJSON, Nullable: true, SourceType: "join " + l.Table,
			Fields: []pipeline.Column{}}
		if t := j.lookups[l.Table]; t != nil {
			c.Fields = lookupColumns(t, l)
		}
		cols = append(cols, c)
	}
	j.gen++
	id := pipeline.TableID{Database: j.from.ID.Database, Schema: j.outName[0], Table: j.outName[1]}
	j.out = &pipeline.Table{ID: id, Columns: cols, KeyIdx: slices.Clone(j.from.KeyIdx), Generation: j.gen}
}

// lookupColumns returns l's selected columns of t, as plain (non-key) members.
func lookupColumns(t *pipeline.Table, l Lookup) []pipeline.Column {
	var cols []pipeline.Column
	for _, c := range t.Columns {
		if len(l.Columns) == 0 || slices.Contains(l.Columns, c.Name) {
			c.Key = false
			cols = append(cols, c)
		}
	}
	return cols
}
