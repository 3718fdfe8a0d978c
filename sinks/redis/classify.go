package redis

import (
	"context"
	"errors"
	"fmt"
	"strings"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-cdc/sluice/pipeline"
)

// A Write fails in one of three ways (see the package documentation):
//
//   - per record, permanently, in a *pipeline.BatchError the runtime
//     dead-letters (Invariant 7): a value the format cannot hold, and the
//     script's refusals — a row key holding another type (WRONGTYPE) or a
//     string that is not a sluice document;
//   - per table, in a *pipeline.TableError, so the runtime quarantines the
//     table in this sink while the other tables go on: a shape the format
//     cannot store (shapeError), and the error replies tableError names;
//   - as a whole, for the runtime to retry with backoff: a lost connection,
//     a transient server state (LOADING, BUSY, OOM, READONLY, MASTERDOWN,
//     …) and any error reply not named above.

// shapeError returns the *pipeline.TableError of a table whose shape no
// write can store: a column named like a field the sink keeps in every
// key (_v, _deleted; in the hash format also the empty name), or no key
// columns to build its keys from. Nil when the shape can be written.
func shapeError(t *pipeline.Table, ti *tableInfo) error {
	switch {
	case ti.reserved:
		return &pipeline.TableError{Table: t.ID, Err: fmt.Errorf(
			"redis: column name %q is reserved for the sink's own field (_v holds the version, _deleted marks a tombstone); "+
				"rename the column or exclude it from this sink (columns.exclude)", ti.badCol)}
	case len(t.KeyIdx) == 0:
		return &pipeline.TableError{Table: t.ID, Err: errors.New("redis: the table has no key columns to name its keys by")}
	}
	return nil
}

// tableError returns err, an error reply to a script call about the keys
// of one table, as that table's *pipeline.TableError when no retry can
// change it and it concerns no other table; nil otherwise. Such replies
// are a key of the table's own — its barrier or held set, which the
// script reads and writes unguarded, unlike row keys — holding another
// type (WRONGTYPE), and an ACL that denies the sink's user the table's
// keys (NOPERM on a key; a script's call on a key it may not access).
func tableError(ctx context.Context, ti *tableInfo, err error) error {
	var rerr goredis.Error
	if ctx.Err() != nil || !errors.As(err, &rerr) {
		return nil
	}
	msg := rerr.Error()
	switch {
	case goredis.HasErrorPrefix(err, "WRONGTYPE"):
		return &pipeline.TableError{Table: ti.id, Err: fmt.Errorf(
			"redis: %s or %s, which the sink keeps for the table, holds another type; delete it: %w", ti.barrier, heldKey(ti.base), err)}
	case goredis.HasErrorPrefix(err, "NOPERM") && strings.Contains(msg, "key"),
		strings.Contains(msg, "can't access at least one of the keys"):
		return &pipeline.TableError{Table: ti.id, Err: fmt.Errorf(
			"redis: the sink's user may not access the table's keys (%s*); grant them in its ACL: %w", ti.base, err)}
	}
	return nil
}
