package verify

import (
	"context"

	"github.com/sluice-cdc/sluice/pipeline"
)

// KeySource reads chosen rows of a captured database, for continuous
// verification (Sampler) and for narrowing a difference to its keys.
type KeySource interface {
	Source
	// KeyRows returns the table's current shape and the current rows among
	// keys (each key's values in table.KeyIdx order, in the record model's
	// types), decoded exactly as the source decodes changes; keys with no
	// row are absent. The Mark is a source position taken after the rows
	// were read: once a checkpoint covers it, every change visible to the
	// read is durable in every sink. It blocks until the read is done and
	// honours ctx.
	KeyRows(ctx context.Context, id pipeline.TableID, keys [][]any) (*pipeline.Table, [][]any, Mark, error)
	// MarkOf converts a position the source put on its records (Record.Pos)
	// into a Mark, so a change is known to be durable once a checkpoint
	// covers it.
	MarkOf(pos pipeline.Position) (Mark, error)
}

// KeyReader is a sink that can read the rows it holds for chosen keys.
type KeyReader interface {
	// RowsByKey returns the live rows the sink holds among keys (each key's
	// values in table.KeyIdx order, in the record model's types) for table
	// (a source shape, routed), aligned with table.Columns as Sink.Rows
	// aligns them; keys it holds no live row for (never written, deleted,
	// truncated) are absent. It may be called while the sink is open and
	// being written by the runtime, from another goroutine; it blocks
	// until the read is done and honours ctx. Its cost is proportional to
	// len(keys), never to the table's size.
	RowsByKey(ctx context.Context, table *pipeline.Table, keys [][]any) ([][]any, error)
}
