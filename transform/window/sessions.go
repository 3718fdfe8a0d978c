package window

import (
	"cmp"
	"container/heap"
	"encoding/binary"
	"slices"
	"strings"

	"github.com/cespare/xxhash/v2"

	"github.com/sluice-cdc/sluice/pipeline"
)

// Sessions is the session-window engine. Per group, the rows' event
// times cluster into sessions: runs in which each event is less than Gap
// after the one before. A session spans [first event, last event + Gap),
// so an event exactly Gap after the last one starts the next session.
//
// A session's bounds move as rows come and go: an event between two
// sessions merges them, a retraction in the middle of one splits it. The
// results are keyed by the bounds, so when a written session changes its
// bounds its old row is deleted and the new one written. Every emission
// of a group is versioned by the group's own counter ({generation,
// changes applied}, as in Engine), which grows with every change that
// can alter any of its sessions: a session's bounds that come back after
// being deleted are written at a higher version than the delete.
//
// A session is final when its end plus the lateness is at or below the
// watermark. Final sessions are always the earliest of their group (ends
// grow with starts), so the group keeps a horizon: the end of its latest
// final session. A change is late when the session it would belong to is
// final: its own window [t, t+Gap) is, or t is before the horizon (it
// would join a final session). A retraction of a row in a final session
// leaves the session as it was written.
//
// Aggregates are computed from the session's rows when it is written
// (sessions merge and split, so there is no accumulator to keep): the
// cost is the session's rows per emission, and a session is written on
// its close and after each correction within the lateness.
type Sessions struct {
	opts      EngineOptions
	gap       int64
	groups    map[string]*sgroup
	rows      map[string]*srow
	watermark int64
	queue     groupQueue
	changed   map[string]bool // groups changed since the last Advance
	releasing map[string]bool // groups with releases waiting
	results   int             // results held (written or deleted)
	maxOrigin pipeline.Version
	// What changed since the last Flush (sessions_store.go).
	dirtyRows    map[string]bool
	dirtyGroups  map[string]bool
	dirtyEntries map[entryRef]bool
}

// sentry is one row's event in its group: what it contributes.
type sentry struct {
	t    int64
	row  string
	args []any
	ver  pipeline.Version
}

func (a sentry) cmp(t int64, row string) int {
	if a.t != t {
		return cmp.Compare(a.t, t)
	}
	return strings.Compare(a.row, row)
}

// srow is where a row's contribution is: its group and event time, or a
// tombstone at the retraction's version.
type srow struct {
	group   string
	gvals   []any
	t       int64
	ver     pipeline.Version
	deleted bool
}

// sresult is a session result in the sinks: written at ver from rows
// whose stamp is stamp, or deleted at ver.
type sresult struct {
	ver     pipeline.Version
	stamp   uint64
	deleted bool
	partial bool // written while the session was open (Early)
	reemit  bool // write it again (Reemit)
}

type sgroup struct {
	key     string
	vals    []any
	entries []sentry // by event time, then row
	tombs   map[string]bool
	changes uint64
	gen     uint64
	origin  pipeline.Version
	horizon int64 // the end of the latest final session; NoWatermark: none
	results map[Bounds]*sresult
	// releases wait for their Advance's results to be durable: rows
	// before horizon and results ending at or before cut then go.
	releases []srelease
	next     int64 // the watermark at which the group next needs a look
}

type srelease struct {
	horizon, cut int64
	tag          uint64
}

type entryRef struct {
	group string
	t     int64
	row   string
}

// NewSessions makes an empty session engine; o.Spec.Gap > 0.
func NewSessions(o EngineOptions) *Sessions {
	return &Sessions{opts: o, gap: o.Spec.Gap.Microseconds(), groups: map[string]*sgroup{}, rows: map[string]*srow{},
		watermark: NoWatermark, changed: map[string]bool{}, releasing: map[string]bool{},
		dirtyRows: map[string]bool{}, dirtyGroups: map[string]bool{}, dirtyEntries: map[entryRef]bool{}}
}

// Watermark is the engine's watermark (NoWatermark before any).
func (s *Sessions) Watermark() int64 { return s.watermark }

// MaxOrigin is the newest version among the changes the engine applied.
func (s *Sessions) MaxOrigin() pipeline.Version { return s.maxOrigin }

// final reports whether an event at t of group g would belong to a final
// session.
func (s *Sessions) final(g *sgroup, t int64) bool {
	if s.watermark == NoWatermark {
		return false
	}
	return t+s.gap+s.opts.Lateness <= s.watermark || g != nil && g.horizon != NoWatermark && t < g.horizon
}

// Upsert sets row in.Row's contribution to in, as Engine.Upsert does. A
// change late for its session is reported with the window it would have
// opened, [t, t+Gap).
func (s *Sessions) Upsert(in Input) *Late {
	if r := s.rows[in.Row]; r != nil && !r.ver.Less(in.Version) {
		return nil
	}
	s.retract(in.Row, in.Version)
	gk := groupKey(in.Group)
	g := s.groups[gk]
	if s.final(g, in.Time) {
		if r := s.rows[in.Row]; r != nil {
			r.ver = in.Version // the tombstone moves up: the change was seen
			s.dirtyRows[in.Row] = true
		}
		b := Bounds{in.Time, in.Time + s.gap}
		return &Late{Windows: []Bounds{b}, By: max(s.watermark-b.End, 0)}
	}
	if g == nil {
		g = &sgroup{key: gk, vals: in.Group, tombs: map[string]bool{}, horizon: NoWatermark, results: map[Bounds]*sresult{}}
		s.groups[gk] = g
		s.dirtyGroups[gk] = true
	}
	i, _ := slices.BinarySearchFunc(g.entries, in, func(e sentry, in Input) int { return e.cmp(in.Time, in.Row) })
	g.entries = slices.Insert(g.entries, i, sentry{t: in.Time, row: in.Row, args: in.Args, ver: in.Version})
	s.dirtyEntries[entryRef{gk, in.Time, in.Row}] = true
	if old := s.rows[in.Row]; old != nil && old.deleted {
		delete(s.groups[old.group].tombs, in.Row)
	}
	s.rows[in.Row] = &srow{group: gk, gvals: in.Group, t: in.Time, ver: in.Version}
	s.dirtyRows[in.Row] = true
	s.touch(g, in.Version)
	return nil
}

// Delete retracts what row contributed, at version; a version not above
// the row's last one changes nothing.
func (s *Sessions) Delete(row string, version pipeline.Version) {
	if r := s.rows[row]; r != nil && r.ver.Less(version) {
		s.retract(row, version)
	}
}

// retract takes out what row contributed, leaving its tombstone at
// version; a row of a final session stays in it.
func (s *Sessions) retract(row string, version pipeline.Version) {
	r := s.rows[row]
	if r == nil || r.deleted {
		return
	}
	g := s.groups[r.group]
	r.deleted, r.ver = true, version
	g.tombs[row] = true
	s.dirtyRows[row] = true
	s.dirtyGroups[g.key] = true
	if g.horizon != NoWatermark && r.t < g.horizon {
		return // its session's results are final
	}
	if i, ok := slices.BinarySearchFunc(g.entries, r, func(e sentry, r *srow) int { return e.cmp(r.t, row) }); ok {
		g.entries = slices.Delete(g.entries, i, i+1)
		s.dirtyEntries[entryRef{g.key, r.t, row}] = true
	}
	s.touch(g, version)
}

func (s *Sessions) touch(g *sgroup, v pipeline.Version) {
	if g.origin.Less(v) {
		g.origin = v
	}
	if s.maxOrigin.Less(v) {
		s.maxOrigin = v
	}
	g.gen = max(g.gen, v[0])
	g.changes++
	s.changed[g.key] = true
	s.dirtyGroups[g.key] = true
}

// Truncate retracts every row whose change is older than version.
func (s *Sessions) Truncate(version pipeline.Version) {
	var rows []string
	for row, r := range s.rows {
		if !r.deleted && r.ver.Less(version) {
			rows = append(rows, row)
		}
	}
	slices.Sort(rows)
	for _, row := range rows {
		s.retract(row, version)
	}
}

// Held reports whether the engine holds row's contribution (not as a
// tombstone).
func (s *Sessions) Held(row string) bool {
	_, ok := s.Contribution(row)
	return ok
}

// Contribution returns what row contributes now; false for a row the
// engine does not hold or holds as a tombstone.
func (s *Sessions) Contribution(row string) (*Input, bool) {
	r := s.rows[row]
	if r == nil || r.deleted {
		return nil, false
	}
	g := s.groups[r.group]
	i, ok := slices.BinarySearchFunc(g.entries, r, func(e sentry, r *srow) int { return e.cmp(r.t, row) })
	if !ok {
		return nil, false
	}
	e := g.entries[i]
	return &Input{Row: row, Time: e.t, Group: r.gvals, Args: e.args, Version: r.ver}, true
}

// Open reports the sessions written (and deletes kept), the groups and
// the rows held (tombstones included).
func (s *Sessions) Open() (windows, groups, rows int) {
	return s.results, len(s.groups), len(s.rows)
}

// span is one session of a group: its bounds and its entries [lo, hi).
type span struct {
	b      Bounds
	lo, hi int
}

func (s *Sessions) spans(g *sgroup) []span {
	var out []span
	for i, e := range g.entries {
		if n := len(out); n > 0 && e.t < out[n-1].b.End {
			out[n-1].b.End, out[n-1].hi = e.t+s.gap, i+1
			continue
		}
		out = append(out, span{b: Bounds{e.t, e.t + s.gap}, lo: i, hi: i + 1})
	}
	return out
}

// stampOf identifies a session's rows and versions: a hash of its
// entries in their order. (A sum of per-entry FNV hashes, as it was,
// cancelled out when two rows changed alike — both updated by one later
// transaction, their versions moved by the same amount — and the changed
// session was taken for the one written.)
func stampOf(es []sentry) uint64 {
	var d xxhash.Digest
	d.Reset()
	var b [48]byte
	for _, e := range es {
		binary.LittleEndian.PutUint64(b[:], uint64(len(e.row)))
		d.Write(b[:8])
		d.WriteString(e.row)
		binary.LittleEndian.PutUint64(b[:], uint64(e.t))
		for i, x := range e.ver {
			binary.LittleEndian.PutUint64(b[8+8*i:], x)
		}
		d.Write(b[:40])
	}
	return d.Sum64()
}

func (s *Sessions) values(es []sentry) []any {
	vals := make([]any, len(s.opts.Aggs))
	for i, a := range s.opts.Aggs {
		acc := newAcc(a.Func)
		for _, e := range es {
			acc.add(e.args[i], e.t, e.ver)
		}
		vals[i] = acc.result()
	}
	return vals
}

// Advance is AdvanceTagged with tag 1 and what expires dropped at once.
func (s *Sessions) Advance(wm int64) []Emission {
	out := s.AdvanceTagged(wm, 1)
	s.Release(1)
	return out
}

// AdvanceTagged moves the watermark to wm (never back) and returns the
// results to write, in group then session order: each session whose end
// is at or below the watermark and whose rows changed since it was
// written, and a delete for each written session whose bounds no longer
// hold one. Sessions that became final are tagged with tag (> 0);
// Release drops them once the results of that Advance are durable.
func (s *Sessions) AdvanceTagged(wm int64, tag uint64) []Emission {
	if wm > s.watermark {
		s.watermark = wm
	}
	for len(s.queue) > 0 && s.queue[0].next <= s.watermark {
		it := heap.Pop(&s.queue).(queued)
		if g := s.groups[it.key]; g != nil && g.next == it.next {
			g.next = NoWatermark // not queued any more
			s.changed[it.key] = true
		}
	}
	keys := make([]string, 0, len(s.changed))
	for k := range s.changed {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	clear(s.changed)
	var out []Emission
	for _, k := range keys {
		if g := s.groups[k]; g != nil {
			out = s.settle(g, tag, out)
		}
	}
	return out
}

// settle writes group g's closed sessions that changed, deletes the
// results whose session is gone, tags what became final, and queues the
// group for the watermark at which it next needs a look.
func (s *Sessions) settle(g *sgroup, tag uint64, out []Emission) []Emission {
	wm := s.watermark
	spans := s.spans(g)
	next := int64(NoWatermark)
	later := func(t int64) {
		if t > wm && (next == NoWatermark || t < next) {
			next = t
		}
	}
	live := map[Bounds]bool{}
	for _, sp := range spans {
		live[sp.b] = true
		if sp.b.End > wm {
			later(sp.b.End)
			continue
		}
		later(sp.b.End + s.opts.Lateness)
		out = s.write(g, sp, true, out)
	}
	bounds := make([]Bounds, 0, len(g.results))
	for b := range g.results {
		if !live[b] {
			bounds = append(bounds, b)
		}
	}
	slices.SortFunc(bounds, func(a, b Bounds) int { return cmp.Compare(a.Start, b.Start) })
	for _, b := range bounds {
		r := g.results[b]
		later(b.End + s.opts.Lateness)
		switch {
		case !r.deleted:
			// No session has these bounds any more.
			r.deleted, r.partial, r.ver, r.reemit = true, false, resultVersion(g.gen, g.changes, true), false
		case r.reemit:
			r.reemit = false
		default:
			continue
		}
		out = append(out, Emission{Window: b, Group: g.vals, Version: r.ver, Origin: g.origin, Delete: true})
		s.dirtyGroups[g.key] = true
	}
	// The final sessions: a prefix of the group's.
	cut := wm - s.opts.Lateness
	if wm != NoWatermark {
		h := g.horizon
		for _, sp := range spans {
			if sp.b.End > cut {
				break
			}
			h = max(h, sp.b.End)
		}
		if h != g.horizon {
			g.horizon = h
			s.dirtyGroups[g.key] = true
		}
		if h != NoWatermark || len(bounds) > 0 {
			g.releases = append(g.releases, srelease{horizon: h, cut: cut, tag: tag})
			s.releasing[g.key] = true
		}
	}
	if g.horizon != NoWatermark {
		later(g.horizon + s.gap + s.opts.Lateness) // then no change can join a final session
	}
	if next != g.next {
		g.next = next
		if next != NoWatermark {
			heap.Push(&s.queue, queued{next: next, key: g.key})
		}
	}
	return out
}

// write writes session sp of group g unless the sinks hold its result
// already: final (the session closed) or partial (Early).
func (s *Sessions) write(g *sgroup, sp span, final bool, out []Emission) []Emission {
	st := stampOf(g.entries[sp.lo:sp.hi])
	r := g.results[sp.b]
	ver := resultVersion(g.gen, g.changes, final)
	if r != nil && !r.deleted && r.stamp == st && r.partial == !final {
		if !r.reemit {
			return out
		}
		ver = r.ver // unchanged since it was written: the same result
	}
	if r == nil {
		s.results++
	}
	out = append(out, Emission{Window: sp.b, Group: g.vals, Values: s.values(g.entries[sp.lo:sp.hi]), Version: ver,
		Origin: g.origin, Update: r != nil && !r.deleted, Partial: !final})
	g.results[sp.b] = &sresult{ver: ver, stamp: st, partial: !final}
	s.dirtyGroups[g.key] = true
	return out
}

// Early returns the partial results of the open sessions whose rows
// changed since they were last written, in group then session order.
// (A partial session whose bounds moved is deleted as soon as they do, by
// the Advance after the change.)
func (s *Sessions) Early() []Emission {
	keys := make([]string, 0, len(s.groups))
	for k := range s.groups {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var out []Emission
	for _, k := range keys {
		g := s.groups[k]
		for _, sp := range s.spans(g) {
			if s.watermark == NoWatermark || sp.b.End > s.watermark {
				out = s.write(g, sp, false, out)
			}
		}
	}
	return out
}

// Release drops the final sessions tagged by an Advance with a tag at or
// below upTo, with their rows and tombstones, and groups left with
// nothing that matters.
func (s *Sessions) Release(upTo uint64) {
	for k := range s.releasing {
		g := s.groups[k]
		if g == nil {
			delete(s.releasing, k)
			continue
		}
		n := 0
		for _, rel := range g.releases {
			if rel.tag > upTo {
				break
			}
			n++
			s.drop(g, rel)
		}
		if n == 0 {
			continue
		}
		g.releases = slices.Delete(g.releases, 0, n)
		if len(g.releases) == 0 {
			delete(s.releasing, k)
		}
		if len(g.entries) == 0 && len(g.results) == 0 && len(g.tombs) == 0 && len(g.releases) == 0 &&
			(g.horizon == NoWatermark || g.horizon+s.gap+s.opts.Lateness <= s.watermark) {
			delete(s.groups, g.key)
			s.dirtyGroups[g.key] = true
		}
	}
}

func (s *Sessions) drop(g *sgroup, rel srelease) {
	s.dirtyGroups[g.key] = true
	if rel.horizon != NoWatermark {
		n := 0
		for _, e := range g.entries {
			if e.t >= rel.horizon {
				break
			}
			n++
			s.dirtyEntries[entryRef{g.key, e.t, e.row}] = true
			if r := s.rows[e.row]; r != nil && !r.deleted && r.group == g.key && r.t == e.t {
				delete(s.rows, e.row)
				s.dirtyRows[e.row] = true
			}
		}
		g.entries = slices.Delete(g.entries, 0, n)
		for row := range g.tombs {
			if r := s.rows[row]; r == nil || r.t < rel.horizon {
				delete(g.tombs, row)
				if r != nil && r.deleted {
					delete(s.rows, row)
					s.dirtyRows[row] = true
				}
			}
		}
	}
	for b := range g.results {
		if b.End <= rel.cut {
			delete(g.results, b)
			s.results--
		}
	}
}

// RetractPrior does nothing: sessions keep every row until their session
// is final, and late: correct (which needs it) is for fixed windows.
func (s *Sessions) RetractPrior(Input, pipeline.Version) {}

// Reemit marks every result, written or deleted, to go out again at its
// version with the next Advance (after a restart the last ones may not
// have reached the sinks).
func (s *Sessions) Reemit() {
	for k, g := range s.groups {
		for _, r := range g.results {
			r.reemit = true
		}
		if len(g.results) > 0 {
			s.changed[k] = true
		}
	}
}

// queued is a group due for a look when the watermark reaches next.
type queued struct {
	next int64
	key  string
}

type groupQueue []queued

func (q groupQueue) Len() int           { return len(q) }
func (q groupQueue) Less(i, j int) bool { return q[i].next < q[j].next }
func (q groupQueue) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *groupQueue) Push(x any)        { *q = append(*q, x.(queued)) }
func (q *groupQueue) Pop() any {
	old := *q
	it := old[len(old)-1]
	*q = old[:len(old)-1]
	return it
}
