package join

import (
	"slices"
	"strconv"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/pipeline/binform"
)

// Invariant N2: a new shape of a looked-up or child table that changes
// the columns embedded rewrites every output that embeds them
// (applyAndEmit). The state learns the shape in the same transaction, so
// the replay of the change that brought it would find the shape known and
// rewrite nothing, though the outputs rewritten may never have reached
// the sinks. So each rewrite is recorded (meta refresh:<l|c><n> → the
// version of the change that caused it) and a resumed run does it again
// when the replay meets that change (or a later one of the table, should
// the change come back at another version); a record below the replay
// floor is forgotten (a checkpoint covers its change, so its outputs are
// durable), and so is one below where the replay starts. A record of an
// earlier generation than those (a run resumed on another server, whose
// versions sort above every earlier one, replayed yet or not) stays until
// its rewrite is done again, at the first change of the table.

// refreshes holds the rewrites recorded and not yet forgotten, and of
// those, the ones a resumed run has still to do again.
type refreshes struct {
	recorded map[string]pipeline.Version
	redo     map[string]pipeline.Version
	// started: the resumed run's first batch has been seen.
	started bool
}

const refreshPrefix = "refresh:"

func refreshKey(kind byte, n int) string { return string(kind) + strconv.Itoa(n) }

// load reads the recorded rewrites; resumed: they are to be done again.
func (rs *refreshes) load(st joinState, resumed bool) error {
	rs.recorded, rs.redo, rs.started = map[string]pipeline.Version{}, map[string]pipeline.Version{}, false
	return st.meta.Scan([]byte(refreshPrefix), func(k, v []byte) error {
		ver := binform.NewReader(v).Version()
		key := string(k[len(refreshPrefix):])
		rs.recorded[key] = ver
		if resumed {
			rs.redo[key] = ver
		}
		return nil
	})
}

// again adds to ro the rewrites a resumed run has still to do for the
// lookups and children of r's table, at r's version or after it, and
// records every rewrite ro holds under r's version (N2). A change that
// rewrites nothing and finds nothing to redo costs no allocation.
func (j *Join) again(st joinState, r *pipeline.Record, ro *roles) error {
	rs := &j.refresh
	if len(rs.redo) > 0 {
		ro.refresh = rs.due('l', ro.lookupN, r.Version, ro.refresh)
		ro.refreshChildren = rs.due('c', ro.childN, r.Version, ro.refreshChildren)
	}
	for _, set := range [...]struct {
		kind byte
		ns   []int
	}{{'l', ro.refresh}, {'c', ro.refreshChildren}} {
		for _, n := range set.ns {
			key := refreshKey(set.kind, n)
			if err := st.meta.Put([]byte(refreshPrefix+key), binform.AppendVersion(nil, r.Version)); err != nil {
				return err
			}
			rs.recorded[key] = r.Version
		}
	}
	return nil
}

// due adds to ns those of of (lookups or children, by kind) with a
// rewrite to do again at or before v, and drops them from redo.
func (rs *refreshes) due(kind byte, of []int, v pipeline.Version, ns []int) []int {
	for _, n := range of {
		key := refreshKey(kind, n)
		if at, ok := rs.redo[key]; ok && !v.Less(at) {
			delete(rs.redo, key)
			if !slices.Contains(ns, n) {
				ns = append(ns, n)
			}
		}
	}
	return ns
}

// replayFrom tells the rewrites to do again where the resumed run's
// replay starts (its first batch's least version): a change below it is
// not brought again, its outputs being durable (N2).
func (rs *refreshes) replayFrom(least pipeline.Version, has bool) {
	if rs.started || !has {
		return
	}
	rs.started = true
	for key, v := range rs.redo {
		if v.Less(least) && v[0] == least[0] {
			delete(rs.redo, key)
		}
	}
}

// pending reports whether the rewrite recorded under key is still to be
// done again.
func (rs *refreshes) pending(key string) bool {
	_, ok := rs.redo[key]
	return ok
}

// forget drops the records of rewrites below floor (N2).
func (rs *refreshes) forget(st joinState, floor pipeline.Version) error {
	for key, v := range rs.recorded {
		if v.Less(floor) && (v[0] == floor[0] || !rs.pending(key)) {
			if err := st.meta.Delete([]byte(refreshPrefix + key)); err != nil {
				return err
			}
			delete(rs.recorded, key)
		}
	}
	for key, v := range rs.redo {
		if v.Less(floor) && v[0] == floor[0] {
			delete(rs.redo, key)
		}
	}
	return nil
}
