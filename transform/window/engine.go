package window

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/verify"
)

// Agg is one aggregate of a window.
type Agg struct {
	Func Func
}

// EngineOptions define an Engine.
type EngineOptions struct {
	Spec Spec
	Aggs []Agg
	// Lateness is how long, in microseconds of event time, a window's
	// state outlives its end: until the watermark passes End + Lateness a
	// late change still corrects it.
	Lateness int64
	// Retain, when positive, keeps an expired window's groups — their
	// aggregates, not its rows — that much longer (microseconds of event
	// time), so a change later than the lateness still corrects the
	// window (late: correct). A retained window takes a change that adds
	// to it, a retraction of a row the engine still holds, and one given
	// by RetractPrior.
	Retain int64
	// Early: partial results of open windows are written (Early), so a
	// restart must delete again the partial rows of groups that lost
	// every row (Reemit).
	Early bool
}

// Input is one row's contribution: its key, event time (Unix
// microseconds), group values, one argument per aggregate (nil: NULL;
// ignored by count()), and the version of the change that set it.
type Input struct {
	Row     string
	Time    int64
	Group   []any
	Args    []any
	Version pipeline.Version
	// Strict: windows past the lateness take nothing from this change
	// even when retained (a snapshot row, which may be counted there
	// already; a change whose earlier contribution is not known).
	Strict bool
}

// Emission is a window result to write: the group's aggregates, or a
// delete of the group's row when every row it had was retracted.
//
// Version orders the emissions of one window and group: {generation, n,
// final, 0}, n the number of changes applied to the group so far, the
// generation the highest of theirs, and final 1 for a result written on
// or after the window's close, 0 for a partial one written before
// (EngineOptions' early emission), so the final result replaces a partial
// one of the same changes. It grows with every change that can
// alter the result, whatever the changes' own versions (a snapshot row
// arriving after stream changes has a lower one), and it is a function of
// the changes applied, not of when results were emitted: after a crash,
// state restored from the checkpoint and the same changes replayed give
// each result the version it had, however the replay is batched, so a
// version-guarded sink never takes a result that misses changes in place
// of one that has them. Origin is the newest change's own version, the
// order in which emissions leave the operator.
type Emission struct {
	Window  Bounds
	Group   []any
	Values  []any
	Version pipeline.Version
	Origin  pipeline.Version
	Delete  bool
	// Update: an earlier result of the group is in the sinks.
	Update bool
	// Partial: the window is still open (Early); more changes may come.
	Partial bool
}

// Late says a change met windows whose state is gone (their end plus the
// allowed lateness is at or below the watermark): the change did not
// count in them.
type Late struct {
	// Corrected are windows past the lateness that took the change
	// (retained: EngineOptions.Retain).
	Corrected []Bounds
	Windows   []Bounds
	// By is how far the watermark is past the latest of those windows'
	// ends, in microseconds.
	By int64
}

// Engine holds the open windows, their groups and the rows contributing
// to them. Not safe for concurrent use.
type Engine struct {
	opts      EngineOptions
	windows   map[Bounds]*window
	rows      map[string]*contribution
	watermark int64
	// What changed since the last Flush (store.go): the rows to log
	// (rowlog.go), by key.
	dirtyRows map[string]*contribution
	// stale lists the groups to write (or delete, their window dropped),
	// each once (group.stale).
	stale     []staleGroup
	maxOrigin pipeline.Version
	assigned  []Bounds // Upsert's windows of a change (reused)
	// The row logs (rowlog.go): the last write's seq, logs to delete,
	// rows whose entries to mark gone, and whether the rows are still in
	// the bucket of one key per row (a state written before the logs).
	logSeq     uint64
	deadLogs   []deadLog
	leaving    []rowHome
	legacyRows bool
	scratch    []byte
	// encodeErr is the first value Upsert could not encode: the next
	// Changes fails with it.
	encodeErr error
}

// groupRef names one group of one window.
type groupRef struct {
	b   Bounds
	key string
}

type window struct {
	b      Bounds
	groups map[string]*group
	// changed holds the groups made dirty since the last emission pass
	// looked at the window, so a pass does not scan every group.
	changed []*group
	// rows lists the rows that contributed to it (a row may be listed
	// twice, or have left since: drop checks each row's windows).
	rows   []string
	closed bool // the watermark passed its end
	// retained: expired, its rows gone, its groups' aggregates kept
	// (EngineOptions.Retain).
	retained bool
	// expiredAt is the tag of the Advance that found the window expired
	// (or, retained, gone); 0: not yet. Release then retains or drops it.
	expiredAt uint64
	log       rowLog // of the rows at home in it
	dropped   bool   // gone from the engine: its groups are deleted
}

type group struct {
	name    string // groupKey(key)
	key     []any
	accs    []acc
	rows    int64
	changes uint64           // changes applied since the group was made
	gen     uint64           // the highest generation (version[0]) among them
	origin  pipeline.Version // the newest change's version
	dirty   bool             // changed since its last emission
	changed bool             // in its window's changed list
	stale   bool             // in the engine's stale list: to be written
	emitted bool             // its row is in the sinks
	partial bool             // the row in the sinks is a partial result
}

// contribution is what a row added: the input and the windows it went
// to. A retracted one stays, as a tombstone at the retraction's version,
// until its windows expire, so a replayed older change of the row is
// recognised and ignored.
//
// Its group values and arguments are kept encoded (vals: appendValues of
// each), a block the garbage collector does not scan: a window holds
// many rows, and their values as boxed Go values would be scanned at
// every collection.
type contribution struct {
	time    int64
	version pipeline.Version
	vals    []byte
	group   string
	windows []Bounds
	// retained are windows past the lateness that hold its contribution
	// without the row (EngineOptions.Retain): retracting it takes it out
	// of their aggregates.
	retained []Bounds
	deleted  bool
	// home is the window whose log holds its latest entry, when homed
	// (rowlog.go).
	home  Bounds
	homed bool
}

// windowAt is the i-th of c's windows then retained windows.
func (c *contribution) windowAt(i int) Bounds {
	if i < len(c.windows) {
		return c.windows[i]
	}
	return c.retained[i-len(c.windows)]
}

// NoWatermark is the watermark before any: every window is open.
const NoWatermark int64 = math.MinInt64

// NewEngine makes an empty engine.
func NewEngine(o EngineOptions) *Engine {
	return &Engine{opts: o, windows: map[Bounds]*window{}, rows: map[string]*contribution{}, watermark: NoWatermark,
		dirtyRows: map[string]*contribution{}}
}

// Watermark is the engine's watermark (NoWatermark before any).
func (e *Engine) Watermark() int64 { return e.watermark }

// expired reports whether window b's rows are gone at the watermark
// (its end plus the lateness is at or below it).
func (e *Engine) expired(b Bounds) bool {
	return e.watermark != NoWatermark && b.End+e.opts.Lateness <= e.watermark
}

// gone reports whether window b is past its retention too.
func (e *Engine) gone(b Bounds) bool {
	return e.watermark != NoWatermark && b.End+e.opts.Lateness+e.opts.Retain <= e.watermark
}

// final reports whether no change reaches window b any more (in a strict
// change's view: whether it is past the lateness).
func (e *Engine) final(b Bounds, strict bool) bool {
	if e.opts.Retain > 0 && !strict {
		return e.gone(b)
	}
	return e.expired(b)
}

// Upsert sets row in.Row's contribution to in: what the row contributed
// before is retracted (at in.Version), then in is added to its windows.
// Windows whose state is gone do not take it: they are reported in Late
// (nil when every window took it). A change whose version is not above
// the row's last one (a replay after a restart, or a snapshot row older
// than a change already applied) changes nothing (Invariant 4).
func (e *Engine) Upsert(in Input) *Late {
	old := e.rows[in.Row]
	if old != nil && !old.version.Less(in.Version) {
		return nil
	}
	e.retractHeld(in.Row, old, in.Version)
	var (
		late *Late
		err  error
	)
	c := &contribution{time: in.Time, version: in.Version}
	if old != nil {
		c.home, c.homed = old.home, old.homed
	}
	var kb [128]byte
	key := appendGroupKey(kb[:0], in.Group)
	e.assigned = e.opts.Spec.Assign(in.Time, e.assigned[:0])
	for _, b := range e.assigned {
		if e.final(b, in.Strict) {
			if late == nil {
				late = &Late{}
			}
			late.Windows = append(late.Windows, b)
			late.By = max(late.By, e.watermark-b.End)
			continue
		}
		if e.expired(b) {
			if late == nil {
				late = &Late{}
			}
			late.Corrected = append(late.Corrected, b)
		}
		w := e.window(b)
		g := e.group(w, key, in.Group)
		c.group = g.name
		for i, a := range g.accs {
			a.add(in.Args[i], in.Time, in.Version)
		}
		g.rows++
		g.touch(in.Version)
		w.change(g)
		e.seen(in.Version)
		e.markStale(w, g)
		if w.retained {
			// A retained window keeps no rows: what the row added there is
			// retracted by the row while it is held (retract), or from its
			// before image (RetractPrior).
			c.retained = append(c.retained, b)
		} else {
			w.rows = append(w.rows, in.Row)
			if c.windows == nil {
				c.windows = make([]Bounds, 0, len(e.assigned))
			}
			c.windows = append(c.windows, b)
		}
	}
	if len(c.windows) > 0 {
		if c.vals, err = encodeInput(in); err != nil && e.encodeErr == nil {
			e.encodeErr = fmt.Errorf("row %q: %w", in.Row, err) // reported by the next Changes
		}
		e.rows[in.Row] = c
		// (A row only in retained windows is not held: RetractPrior takes
		// it out of them.)
		e.dirtyRows[in.Row] = c
	} else if old != nil {
		old.version = in.Version // the tombstone moves up: the change was seen
		e.dirtyRows[in.Row] = old
	}
	return late
}

// Delete retracts what row contributed, at version; a version not above
// the row's last one changes nothing.
func (e *Engine) Delete(row string, version pipeline.Version) {
	if c := e.rows[row]; c != nil && c.version.Less(version) {
		e.retractHeld(row, c, version)
	}
}

// retract takes out what row contributed, leaving its tombstone at
// version.
func (e *Engine) retract(row string, version pipeline.Version) {
	e.retractHeld(row, e.rows[row], version)
}

// retractHeld is retract of row's contribution c (nil: none held).
func (e *Engine) retractHeld(row string, c *contribution, version pipeline.Version) {
	if c == nil || c.deleted {
		return
	}
	added := c.version
	c.deleted, c.version = true, version
	e.dirtyRows[row] = c
	args := c.args()
	for i := range len(c.windows) + len(c.retained) {
		b := c.windowAt(i)
		w := e.windows[b]
		if w == nil || e.final(b, false) {
			continue // its results are final
		}
		g := w.groups[c.group]
		if g == nil {
			continue
		}
		if len(args) == len(g.accs) { // (else encodeErr fails the next write)
			for i, a := range g.accs {
				a.remove(args[i], c.time, added)
			}
		}
		g.rows--
		g.touch(version)
		w.change(g)
		e.seen(version)
		e.markStale(w, g)
	}
}

// RetractPrior retracts from the retained windows what a row the engine
// no longer holds contributed, as its change's before image (prior) gives
// it, at version. A row it holds is retracted by Upsert and Delete.
func (e *Engine) RetractPrior(prior Input, version pipeline.Version) {
	if e.opts.Retain == 0 {
		return
	}
	if c := e.rows[prior.Row]; c != nil && !c.deleted {
		return
	}
	key := groupKey(prior.Group)
	for _, b := range e.opts.Spec.Assign(prior.Time, nil) {
		w := e.windows[b]
		if w == nil || !w.retained || e.gone(b) {
			continue
		}
		g := w.groups[key]
		if g == nil || g.rows == 0 {
			continue
		}
		for i, a := range g.accs {
			a.remove(prior.Args[i], prior.Time, prior.Version)
		}
		g.rows--
		g.touch(version)
		w.change(g)
		e.seen(version)
		e.markStale(w, g)
	}
}

// MaxOrigin is the newest version among the changes the engine applied.
func (e *Engine) MaxOrigin() pipeline.Version { return e.maxOrigin }

func (g *group) touch(v pipeline.Version) {
	if g.origin.Less(v) {
		g.origin = v
	}
	g.gen = max(g.gen, v[0])
	g.changes++
	g.dirty = true
}

// version is the version of the group's result: final or partial.
func (g *group) version(final bool) pipeline.Version {
	return resultVersion(g.gen, g.changes, final)
}

func resultVersion(gen, changes uint64, final bool) pipeline.Version {
	v := pipeline.Version{gen, changes}
	if final {
		v[2] = 1
	}
	return v
}

func (e *Engine) seen(v pipeline.Version) {
	if e.maxOrigin.Less(v) {
		e.maxOrigin = v
	}
}

func (e *Engine) window(b Bounds) *window {
	w := e.windows[b]
	if w == nil {
		w = &window{b: b, groups: map[string]*group{}}
		e.windows[b] = w
	}
	return w
}

// Advance is AdvanceTagged with tag 1 and the windows that expire
// dropped at once.
func (e *Engine) Advance(wm int64) []Emission {
	out := e.AdvanceTagged(wm, 1)
	e.Release(1)
	return out
}

// AdvanceTagged moves the watermark to wm (it never moves back) and
// returns the results to write: every changed group of a window whose end
// is at or below the watermark — on its close, and again after each late
// change within the allowed lateness — in window then group order. A
// group that lost all its rows is a delete when its row was written, and
// nothing when it never was. Windows whose end plus the lateness is at or
// below the watermark are final: they take no change any more and are
// tagged with tag (> 0), and Release drops them, with the rows that only
// they held, once the results of that Advance are durable.
func (e *Engine) AdvanceTagged(wm int64, tag uint64) []Emission {
	if wm > e.watermark {
		e.watermark = wm
	}
	var out []Emission
	var closing []*window
	for _, w := range e.windows {
		if w.b.End <= e.watermark {
			closing = append(closing, w)
		}
	}
	slices.SortFunc(closing, func(a, b *window) int { return cmp.Compare(a.b.Start, b.b.Start) })
	for _, w := range closing {
		var gs []*group
		if !w.closed {
			// Its close: every group changed since it was written, and
			// every partial result.
			for _, g := range w.groups {
				if g.dirty || g.partial {
					gs = append(gs, g)
				}
			}
			w.unchange()
		} else {
			gs = w.takeChanged()
		}
		w.closed = true
		sortGroups(gs)
		for _, g := range gs {
			out = e.emit(w, g, true, out)
		}
		if w.expiredAt == 0 && (w.retained && e.gone(w.b) || !w.retained && e.expired(w.b)) {
			w.expiredAt = tag
		}
	}
	return out
}

// emit writes window w's group g (dirty, or partial on the close): its
// result, or a delete when it has no rows and its row was written. The
// group stays, empty, until the window expires, so a row that comes back
// continues its versions.
func (e *Engine) emit(w *window, g *group, final bool, out []Emission) []Emission {
	g.dirty = false
	e.markStale(w, g) // its emitted flags
	if g.rows == 0 {
		if g.emitted {
			out = append(out, Emission{Window: w.b, Group: g.key, Version: g.version(final), Origin: g.origin, Delete: true})
			g.emitted, g.partial = false, false
		}
		return out
	}
	vals := make([]any, len(g.accs))
	for i, a := range g.accs {
		vals[i] = a.result()
	}
	out = append(out, Emission{Window: w.b, Group: g.key, Values: vals, Version: g.version(final), Origin: g.origin,
		Update: g.emitted, Partial: !final})
	g.emitted, g.partial = true, !final
	return out
}

// Early returns the partial results of the open windows: every group
// changed since it was last written, in window then group order.
func (e *Engine) Early() []Emission {
	var open []*window
	for _, w := range e.windows {
		if !w.closed {
			open = append(open, w)
		}
	}
	slices.SortFunc(open, func(a, b *window) int { return cmp.Compare(a.b.Start, b.b.Start) })
	var out []Emission
	for _, w := range open {
		gs := w.takeChanged()
		sortGroups(gs)
		for _, g := range gs {
			out = e.emit(w, g, false, out)
		}
	}
	return out
}

// change puts g in w's changed list (once).
func (w *window) change(g *group) {
	if !g.changed {
		g.changed = true
		w.changed = append(w.changed, g)
	}
}

// unchange empties w's changed list.
func (w *window) unchange() {
	for _, g := range w.changed {
		g.changed = false
	}
	w.changed = w.changed[:0]
}

// takeChanged returns w's changed groups still dirty, and empties the
// list.
func (w *window) takeChanged() []*group {
	gs := make([]*group, 0, len(w.changed))
	for _, g := range w.changed {
		if g.dirty {
			gs = append(gs, g)
		}
	}
	w.unchange()
	return gs
}

// sortGroups orders groups by key: results leave in a deterministic
// order.
func sortGroups(gs []*group) {
	slices.SortFunc(gs, func(a, b *group) int { return strings.Compare(a.name, b.name) })
}

// staleGroup is a group to write, or to delete when its window is gone.
type staleGroup struct {
	w *window
	g *group
}

// markStale lists window w's group g to be written by the next Changes.
func (e *Engine) markStale(w *window, g *group) {
	if !g.stale {
		g.stale = true
		e.stale = append(e.stale, staleGroup{w, g})
	}
}

// Release drops the windows tagged expired by an Advance with a tag at
// or below upTo.
func (e *Engine) Release(upTo uint64) {
	for _, w := range e.windows {
		if w.expiredAt == 0 || w.expiredAt > upTo {
			continue
		}
		if !w.retained && e.opts.Retain > 0 && !e.gone(w.b) {
			e.retain(w)
		} else {
			e.drop(w)
		}
	}
}

// Reemit marks every group of every closed window to be written again by
// the next Advance, and every partial result of an open one by the next
// Early; in either, a group emptied of rows goes out as a delete: after a
// restart the results written last may not have reached the sinks (the
// state that knows them is written before they leave: Invariant 5), and
// the same results under the same versions change nothing where they did
// (Invariant 4). With early results, an open window's emptied group is written again
// too: the delete of its partial row may be what was lost, and the
// window's close writes nothing for a group it holds no row of, so the
// partial row would outlive the window. (A group that never had a row
// written gets a delete of a row the sinks never held.)
func (e *Engine) Reemit() {
	for _, w := range e.windows {
		for _, g := range w.groups {
			if !w.closed && !g.emitted && (g.rows > 0 || !e.opts.Early) {
				continue // never written, or its delete then rows again: Early writes it
			}
			g.dirty = true
			w.change(g)
			if g.rows == 0 {
				g.emitted = true
			}
			e.markStale(w, g)
		}
	}
}

// retain forgets window w's rows (and the contributions only it held)
// but keeps its groups' aggregates, stored from now on with the groups.
func (e *Engine) retain(w *window) {
	w.retained, w.expiredAt = true, 0
	e.forgetRows(w)
	e.leaveLog(w)
	for _, g := range w.groups {
		e.markStale(w, g)
	}
}

// drop forgets window w and the contributions only it held.
func (e *Engine) drop(w *window) {
	delete(e.windows, w.b)
	w.dropped = true
	for _, g := range w.groups {
		e.markStale(w, g) // gone: deleted by Flush
	}
	e.forgetRows(w)
	e.leaveLog(w)
}

// forgetRows takes window w out of its rows' windows, forgetting the rows
// left with none.
func (e *Engine) forgetRows(w *window) {
	for _, row := range w.rows {
		c := e.rows[row]
		if c == nil || !slices.Contains(c.windows, w.b) {
			continue
		}
		c.windows = slices.DeleteFunc(c.windows, func(b Bounds) bool { return b == w.b })
		if w.retained {
			c.retained = append(c.retained, w.b)
		}
		if len(c.windows) == 0 {
			e.forget(row, c, w.b)
		}
		// (A row that keeps windows is not written again: on load its
		// windows no longer in the state are left out.)
	}
	w.rows = nil
}

// Contribution returns what row contributes now; false for a row the
// engine does not hold or holds as a tombstone.
func (e *Engine) Contribution(row string) (*Input, bool) {
	c := e.rows[row]
	if c == nil || c.deleted {
		return nil, false
	}
	group, args, err := c.values()
	if err != nil {
		return nil, false // not written by encodeInput: Changes reports it
	}
	return &Input{Row: row, Time: c.time, Group: group, Args: args, Version: c.version}, true
}

// Held reports whether the engine holds row's contribution (not as a
// tombstone).
func (e *Engine) Held(row string) bool {
	c := e.rows[row]
	return c != nil && !c.deleted
}

// Truncate retracts every row whose change is older than version (a
// truncate of the input table at version).
func (e *Engine) Truncate(version pipeline.Version) {
	rows := make([]string, 0, len(e.rows))
	for row, c := range e.rows {
		if !c.deleted && c.version.Less(version) {
			rows = append(rows, row)
		}
	}
	slices.Sort(rows) // a deterministic order of the groups' changes
	for _, row := range rows {
		e.retract(row, version)
	}
}

// Open reports the open windows and groups, and the rows they hold
// (tombstones included).
func (e *Engine) Open() (windows, groups, rows int) {
	for _, w := range e.windows {
		groups += len(w.groups)
	}
	return len(e.windows), groups, len(e.rows)
}

// groupKey is the canonical text of a group's values.
func groupKey(vals []any) string { return string(appendGroupKey(nil, vals)) }

// appendGroupKey appends groupKey(vals) to b.
func appendGroupKey(b []byte, vals []any) []byte {
	for i, v := range vals {
		if i > 0 {
			b = append(b, 0)
		}
		b = verify.AppendCanon(b, v)
	}
	return b
}
