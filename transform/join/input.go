package join

import (
	"go.uber.org/zap"

	"github.com/sluice-cdc/sluice/pipeline"
)

// fanOutWarn is the number of output rows one input may cause before the
// join logs it: they all travel in the input's batch (Invariant 9).
const fanOutWarn = 100_000

// roles is what an input table is to the operator: the from table, the
// table of some lookups, of some children, or several of these; and the
// lookups and children whose embedded columns its new shape changed.
type roles struct {
	isFrom                   bool
	lookupN, childN          []int
	refresh, refreshChildren []int
}

// apply updates the state with r and appends the output records it causes:
// the row itself when r is a from-table row, the rows that refer to it
// when r is a looked-up row, the rows it belongs or belonged to when r is
// a child row (N1), and every row that embeds a lookup or child whose
// columns r's new shape changed. Each output row is emitted once per
// input (seen).
func (j *Join) apply(st joinState, r *pipeline.Record, out []pipeline.Record) ([]pipeline.Record, error) {
	name := r.Table.ID.String()
	ro := roles{isFrom: name == j.opts.From}
	for n, l := range j.opts.With {
		if l.Table == name {
			ro.lookupN = append(ro.lookupN, n)
		}
	}
	for n, c := range j.opts.Children {
		if c.Table == name {
			ro.childN = append(ro.childN, n)
		}
	}
	if err := j.observeShape(st, r.Table, &ro); err != nil {
		return out, err
	}
	if len(ro.lookupN) > 0 || len(ro.childN) > 0 {
		if err := j.again(st, r, &ro); err != nil {
			return out, err
		}
	}
	var seen emitted
	out, err := j.applyAndEmit(st, r, &ro, &seen, out)
	if err != nil {
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

func (j *Join) applyAndEmit(st joinState, r *pipeline.Record, ro *roles, seen *emitted, out []pipeline.Record) ([]pipeline.Record, error) {
	var err error
	for _, n := range ro.refreshChildren {
		// The children's embedded columns changed: their rendered rows
		// first, so every document this input emits has the new form.
		if err := j.rerender(st, n); err != nil {
			return out, err
		}
	}
	if r.Op == pipeline.OpTruncate {
		if out, err = j.truncate(st, r, ro, seen, out); err != nil {
			return out, err
		}
	} else {
		keys, err := j.applyRow(st, r, ro)
		if err != nil {
			return out, err
		}
		if ro.isFrom {
			// A from-table row joins itself; the set is needed only when
			// another path may reach it again (a self-join, a refresh).
			track := len(ro.lookupN) > 0 || len(ro.childN) > 0 || len(ro.refresh) > 0 || len(ro.refreshChildren) > 0
			for _, k := range keys {
				if track {
					seen.add(k)
				}
				if out, err = j.emit(st, r, k, out); err != nil {
					return out, err
				}
			}
		}
		if len(ro.lookupN) > 0 {
			if out, err = j.emitReferrers(st, r, ro.lookupN, keys, seen, out); err != nil {
				return out, err
			}
		}
		if len(ro.childN) > 0 {
			if out, err = j.emitParents(st, r, ro.childN, keys, seen, out); err != nil {
				return out, err
			}
		}
	}
	// The embedded columns changed (a column added, dropped or retyped):
	// every row that embeds this lookup or these children is written
	// again.
	if len(ro.refresh) > 0 {
		if out, err = j.emitAll(st, r, ro.refresh, seen, out); err != nil {
			return out, err
		}
	}
	if len(ro.refreshChildren) > 0 {
		return j.emitAllParents(st, r, ro.refreshChildren, seen, out)
	}
	return out, nil
}
