package snaptest

import (
	"context"

	"github.com/sluice-cdc/sluice/snapshot"
)

// ByteBound is a snapshot.Reader whose chunks stop at N bytes whatever
// bound the engine passes: a source's reader cuts chunks of narrow rows
// as it would cut wide ones at the default bound.
type ByteBound struct {
	snapshot.Reader
	N int
}

// Chunk reads with the bound N.
func (b ByteBound) Chunk(ctx context.Context, t snapshot.Target, after, upTo snapshot.Cursor, limit, _ int) (snapshot.Chunk, error) {
	return b.Reader.Chunk(ctx, t, after, upTo, limit, b.N)
}
