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

// SplitBulk divides a Write for the bulk path. A Write of inserts and
// snapshot reads only (InsertShape) is bulk whole. A Write whose records
// (heartbeats aside) are all of one table shape, with no truncate, and
// whose inserts and reads are at least as many as its other changes
// splits: bulk holds the inserts and reads, rest every other record, each
// in its order. Otherwise bulk is nil and rest is records.
//
// Writing bulk first and then rest leaves the target as writing the
// records in order would: the bulk path refuses the whole part when the
// target holds any of its keys or one repeats (so each of its rows is new
// there), and the rest is version-guarded like every change (a change
// below a row's version or tombstone is dropped; Invariant 4). A snapshot's rows and
// the stream changes that run beside it then keep the fast path.
func SplitBulk(records []pipeline.Record) (bulk, rest []pipeline.Record) {
	if InsertShape(records) != nil {
		return records, nil
	}
	var t *pipeline.Table
	inserts, others := 0, 0
	for i := range records {
		r := &records[i]
		switch {
		case r.Op == pipeline.OpHeartbeat:
			continue
		case r.Op == pipeline.OpTruncate || r.Table == nil || (t != nil && r.Table != t):
			return nil, records
		case (r.Op == pipeline.OpInsert || r.Op == pipeline.OpRead) && len(r.After) == len(r.Table.Columns):
			inserts++
		default:
			others++
		}
		t = r.Table
	}
	if t == nil || len(t.KeyIdx) == 0 || inserts == 0 || inserts < others {
		return nil, records
	}
	bulk = make([]pipeline.Record, 0, inserts)
	rest = make([]pipeline.Record, 0, len(records)-inserts)
	for i := range records {
		r := &records[i]
		if r.Op != pipeline.OpHeartbeat && (r.Op == pipeline.OpInsert || r.Op == pipeline.OpRead) && len(r.After) == len(r.Table.Columns) {
			bulk = append(bulk, *r)
		} else {
			rest = append(rest, *r)
		}
	}
	return bulk, rest
}
