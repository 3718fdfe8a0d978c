package snapshot

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/sluice-cdc/sluice/pipeline"
)

// position is the engine's resume token: the wrapped source's own
// position and the snapshot progress as of the same batch.
//
//	{"stream": {...the source's position...}, "snapshot": {"known": [...], "tables": [...]}}
type position struct {
	Stream   json.RawMessage `json:"stream"`
	Snapshot *progress       `json:"snapshot"`
}

// progress is what a restart needs to resume every table's snapshot.
type progress struct {
	// Known lists the tables whose history the sinks have: loaded by the
	// source's initial load or snapshotted here. A configured table not
	// in it is snapshotted on start.
	Known []string `json:"known"`
	// Tables are the snapshots in progress, in the order requested.
	Tables []*tableProgress `json:"tables,omitempty"`
}

// tableProgress is one table's snapshot.
type tableProgress struct {
	Database string `json:"database,omitempty"`
	Schema   string `json:"schema"`
	Name     string `json:"table"`
	Where    string `json:"where,omitempty"`
	// Run names the request; its watermarks carry the engine's instance
	// id, not this.
	Run string `json:"run"`
	// Barrier: a fresh pipeline's snapshot first clears what the sinks
	// hold of the table, as the initial load does, with a truncate
	// barrier versioned at a watermark committed before the plan read the
	// max key (so every change after it, above the max key included,
	// sorts above the barrier), handed over before the first chunk.
	// Cleared once handed over.
	Barrier bool `json:"barrier,omitempty"`
	// Sweep: a full read of a table the sinks may hold (no Barrier, no
	// Where, no repair) removes, once its last chunk is emitted, what the
	// sinks hold of the table that it did not read: rows deleted while no
	// change of theirs reached the pipeline (Invariant 14). SweepAt is the
	// version of the watermark committed before the plan read the max key,
	// persisted once read; the sweep is a truncate at it, handed over
	// after the last chunk's rows, every one of which sorts above it.
	Sweep   bool              `json:"sweep,omitempty"`
	SweepAt *pipeline.Version `json:"sweep_at,omitempty"`
	// Keys, on a repair, are the keys to read again (each key's columns
	// in textform, in key order) until the plan spreads them over ranges
	// of their own (keyRange.Keys); a key with no row when read is
	// deleted from the sinks.
	Keys   [][]string `json:"keys,omitempty"`
	Repair bool       `json:"repair,omitempty"`
	// Ranges split the key space read when the table was planned; nil
	// until then.
	Ranges    []*keyRange `json:"ranges,omitempty"`
	Planned   bool        `json:"planned,omitempty"`
	Rows      int64       `json:"rows"`
	Estimate  int64       `json:"estimate,omitempty"`
	Chunks    int64       `json:"chunks"`
	Requested time.Time   `json:"requested"`

	planning bool             // a worker is planning it (not persisted)
	again    string           // why a chunk keeps being read again (status; not persisted)
	shape    *pipeline.Table  // from the plan, then the last chunk's: for the barrier and the sweep (not persisted)
	barrier  *pipeline.Record // the barrier once its watermark was read, until handed over
}

// keyRange is (After, UpTo] of a table's key order; After advances with
// every chunk emitted.
type keyRange struct {
	After Cursor `json:"after,omitempty"`
	UpTo  Cursor `json:"up_to,omitempty"` // nil: no upper bound
	Done  bool   `json:"done,omitempty"`
	// Keys: a repair's batch of keys, read in one keyed window instead of
	// a key range.
	Keys [][]string `json:"keys,omitempty"`

	busy bool // a worker reads it (not persisted)
}

func (t *tableProgress) id() pipeline.TableID {
	return pipeline.TableID{Database: t.Database, Schema: t.Schema, Table: t.Name}
}

// label is what status shows beside the table: its filter, or the size
// of a repair.
func (t *tableProgress) label() string {
	if t.Repair {
		return fmt.Sprintf("repair of %d keys", t.Estimate)
	}
	return t.Where
}

func (t *tableProgress) target() Target { return Target{Table: t.id(), Where: t.Where} }

// done reports whether every range was read.
func (t *tableProgress) done() bool {
	if !t.Planned {
		return false
	}
	for _, r := range t.Ranges {
		if !r.Done {
			return false
		}
	}
	return true
}

// parsePosition reads a position the engine made, or a bare source
// position from before the engine wrapped it (wrapped false).
func parsePosition(b pipeline.Position) (pos position, wrapped bool, err error) {
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(b, &probe); err != nil {
		return pos, false, fmt.Errorf("snapshot: position is not a JSON object: %w", err)
	}
	if _, ok := probe["snapshot"]; !ok {
		return position{Stream: json.RawMessage(b)}, false, nil
	}
	if err := json.Unmarshal(b, &pos); err != nil {
		return pos, false, fmt.Errorf("snapshot: position: %w", err)
	}
	if len(pos.Stream) == 0 || pos.Snapshot == nil {
		return pos, false, fmt.Errorf("snapshot: position %s lacks its stream or snapshot part", b)
	}
	for _, t := range pos.Snapshot.Tables {
		if t.Name == "" {
			return pos, false, fmt.Errorf("snapshot: position holds an invalid table progress %+v", *t)
		}
		for _, r := range t.Ranges {
			// JSON null is no bound, as nil is (a Cursor keeps the
			// literal text).
			r.After, r.UpTo = nullCursor(r.After), nullCursor(r.UpTo)
		}
	}
	return pos, true, nil
}

func nullCursor(c Cursor) Cursor {
	if string(c) == "null" {
		return nil
	}
	return c
}

// StreamPosition returns the source's own position inside a position
// the engine made (any other position is returned as is): what the
// source's parsers read.
func StreamPosition(p pipeline.Position) pipeline.Position {
	if p == nil {
		return nil
	}
	pos, wrapped, err := parsePosition(p)
	if err != nil || !wrapped {
		return p
	}
	return pipeline.Position(pos.Stream)
}

// marshal is the JSON of p.
func (p *progress) marshal() []byte {
	b, err := json.Marshal(p)
	if err != nil { // only strings, numbers and raw JSON the readers made
		panic(fmt.Sprintf("snapshot: encode progress: %v", err))
	}
	return b
}

// wrap makes the engine's position from the source's and the progress's
// JSON, without encoding either again.
func wrap(stream pipeline.Position, progress []byte) pipeline.Position {
	b := make([]byte, 0, len(stream)+len(progress)+25)
	b = append(b, `{"stream":`...)
	b = append(b, stream...)
	b = append(b, `,"snapshot":`...)
	b = append(b, progress...)
	return append(b, '}')
}

func (p *progress) know(table string) {
	if !slices.Contains(p.Known, table) {
		p.Known = append(p.Known, table)
	}
}
