package upsert

import "github.com/sluice-cdc/sluice/pipeline"

// Bulk-load fast paths. A Write made only of inserts and snapshot reads of
// one table shape mostly carries keys the target does not hold yet (an
// initial load, an append-mostly table); with no stored version to compare
// against, a plain insert is exactly what the version-guarded upsert would
// do (Invariant 4). Sinks therefore first insert such a Write straight into
// the target, and the target's primary key refuses it when any key exists
// or repeats; the sink rolls back and takes its upsert path. BulkPaths
// keeps, per target, how often to try: a table whose Writes keep meeting
// existing keys skips a growing number of attempts, so update-heavy tables
// do not pay for them.

// BulkPath is one target's fast-path state.
type BulkPath struct {
	Skip    int  // Writes left before the next attempt
	Penalty int  // Writes to skip after the next refusal
	Off     bool // the path failed for another reason: never again
}

// BulkPaths maps a target table to its fast-path state.
type BulkPaths map[string]*BulkPath

// For returns the state of target, created on first use.
func (m *BulkPaths) For(target string) *BulkPath {
	if *m == nil {
		*m = BulkPaths{}
	}
	st := (*m)[target]
	if st == nil {
		st = &BulkPath{Penalty: 1}
		(*m)[target] = st
	}
	return st
}

// Try reports whether to attempt the fast path for this Write.
func (st *BulkPath) Try() bool {
	if st.Off {
		return false
	}
	if st.Skip > 0 {
		st.Skip--
		return false
	}
	return true
}

// Succeeded records an attempt the target took.
func (st *BulkPath) Succeeded() { st.Penalty = 1 }

// KeyExists records an attempt the primary key refused: the next Penalty
// Writes skip the path, and the penalty doubles up to 64.
func (st *BulkPath) KeyExists() {
	st.Skip = st.Penalty
	st.Penalty = min(2*st.Penalty, 64)
}

// InsertShape returns the one table shape of records when every record is
// an insert or a snapshot read of it with a full after image (heartbeats
// aside) and the table has a key, else nil.
func InsertShape(records []pipeline.Record) *pipeline.Table {
	var t *pipeline.Table
	for i := range records {
		r := &records[i]
		if r.Op == pipeline.OpHeartbeat {
			continue
		}
		if (r.Op != pipeline.OpInsert && r.Op != pipeline.OpRead) || r.Table == nil || len(r.After) != len(r.Table.Columns) ||
			(t != nil && r.Table != t) {
			return nil
		}
		t = r.Table
	}
	if t == nil || len(t.KeyIdx) == 0 {
		return nil
	}
	return t
}
