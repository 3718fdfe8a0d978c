package snapshot

import (
	"context"
	"encoding/json"

	"github.com/sluice-cdc/sluice/pipeline"
)

// Cursor is a position in a table's key order in a form only the Reader
// that made it understands (JSON, so checkpoints stay readable): the key
// of a row the database returned. nil is before the first row.
type Cursor = json.RawMessage

// Target is what one table's snapshot reads: the table, and optionally a
// SQL condition selecting some of its rows.
type Target struct {
	Table pipeline.TableID
	Where string
}

// Plan is how a table's snapshot will be read.
type Plan struct {
	// Table is the table's shape when the plan was made.
	Table *pipeline.Table
	// Max is the key of the table's last row (with Where applied) when
	// the plan was made; rows inserted above it later come through the
	// stream only. nil when no row is above the cursor.
	Max Cursor
	// Splits divide (after, Max] into len(Splits)+1 ranges of about equal
	// rows, ascending.
	Splits []Cursor
	// Rows estimates the rows in (after, Max]; 0 when unknown.
	Rows int64
}

// Chunk is what one consistent read of a table returned.
type Chunk struct {
	// Table is the shape the rows were read with; Rows are aligned with
	// its columns and decoded exactly as the source decodes changes.
	Table *pipeline.Table
	Rows  [][]any
	// Sizes[i] is pipeline.ImageSize(Rows[i]), counted once as the row
	// was read (the byte bound's measure); the engine sizes the rows'
	// records from it rather than counting them again.
	Sizes []int
	// Last is the key of the last row; nil when Rows is empty.
	Last Cursor
	// Cut says the read stopped at its byte bound: rows above Last may
	// remain in the range although fewer than limit came back.
	Cut bool
	// InProgress lists the transactions the read could not see although
	// they had started (Postgres: pg_current_snapshot()'s in-progress
	// list, as 32-bit xids, which the stream's Record.TxID carries). A
	// chunk whose list holds a transaction the stream showed committing
	// before the window's low watermark missed that transaction's changes
	// and is read again. nil where visibility follows commit order.
	InProgress []uint64
	// InvisibleFrom is, where InProgress is used, the read's first
	// invisible transaction id (Postgres: the snapshot's xmax, 32 bits):
	// transactions at or above it, in the server's circular order of
	// 32-bit ids, were not visible either, and one the stream showed
	// committing before the low watermark makes the chunk read again
	// like InProgress. 0 when unused.
	InvisibleFrom uint64
	// Dead holds rows the source could not decode (Invariant 7).
	Dead []pipeline.DeadLetter
}

// Reader reads a source database's tables for the engine. Each source
// package implements it over its own connections. Every method blocks
// until the database answered and honours ctx; the engine calls them from
// several goroutines at once.
type Reader interface {
	// Plan reads the key of t's last row, an estimate of the rows above
	// after, and up to parts-1 cursors splitting (after, Max] into ranges
	// of about equal rows, all taken from rows the database returned. A
	// table without a primary key is an error that says what to do.
	Plan(ctx context.Context, t Target, after Cursor, parts int) (Plan, error)
	// Chunk reads, in one consistent read, up to limit rows of t whose
	// keys are above after (nil: from the first row) and at most upTo
	// (nil: no bound), in key order. When maxBytes > 0 it keeps no row
	// after the one that takes the rows' heap bytes (pipeline.ImageSize)
	// to maxBytes, and sets Cut when it stopped there with fewer than
	// limit rows: the memory a window holds is bounded even where the
	// row limit, sized from earlier rows, meets much wider ones
	// (Invariant 6).
	Chunk(ctx context.Context, t Target, after, upTo Cursor, limit, maxBytes int) (Chunk, error)
	// Keys reads, in one consistent read like Chunk's, the current rows
	// of t among keys (each key's values in the table's key order, in
	// the record model's types), in key order; keys with no row are
	// absent.
	Keys(ctx context.Context, t Target, keys [][]any) (Chunk, error)
	// Mark commits a watermark holding token into the database's log, in
	// a transaction of its own that changes nothing else, and returns
	// once it committed. The source's stream then delivers it, in commit
	// order, as a record with Op pipeline.OpWatermark whose After[0] is
	// token and whose Version is its place in the log. When high is not
	// nil (a high watermark), Mark calls it with the table's shape read
	// inside that transaction, under a lock that keeps any schema change
	// of the table from committing between that read and the watermark;
	// Mark fails when high does.
	Mark(ctx context.Context, token string, table pipeline.TableID, high func(*pipeline.Table) error) error
}
