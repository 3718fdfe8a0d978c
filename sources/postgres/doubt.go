package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/zap"

	"github.com/sluice-cdc/sluice/pipeline"
)

// Deferrable primary keys. A DEFERRABLE primary key is checked at the end
// of the statement (or at commit), so inside a transaction two rows may
// share a key for a while: UPDATE t SET id = id + 1 moves row 1 onto key 2
// before row 2 moves on to 3. A change names the key it touched, not which
// of the rows at that key, so the decoded order is wrong for a sink:
// "delete 1, insert 2 (row 1), delete 2 (row 2 leaving), insert 3, …"
// deletes key 2, which holds row 1. Nor can the stream alone say what a
// key ends with: after "insert Y at 2, Y moves to 5" key 2 holds the row
// it held before the transaction (it never left), which no change carried.
//
// So for such tables the decoder counts, per key, the rows the
// transaction put there that may still stand (a put). A delete, a move
// away or an update at a key with a put is in doubt: it may have touched
// either row. At the commit every key in doubt is read again (Refetch,
// which first waits until the transaction is visible) and the change from
// what the transaction's changes left there, in a sink's account, to what
// the table holds is appended to the transaction (settle), versioned after
// all of its changes (Invariant 4): whatever the changes did in between,
// the key ends as the table holds it. A row read later than the commit is
// the one a later change brings again with a higher version, as for
// refetchUnchanged. Keys of tables whose key is not deferrable are never
// tracked: their uniqueness is checked at each row, so the decoded order
// is the order of the rows.

// maxDoubtKeys bounds the keys one transaction tracks (about 100 bytes
// each). A transaction that puts more stops tracking new puts and logs the
// table to snapshot again.
const maxDoubtKeys = 1 << 20

// Kinds of change at a key (noteKey).
const (
	keyPut     = iota // a row arrived: an insert, or the new key of a move
	keyTouched        // a row there changed in place: an update
	keyLeft           // a row left: a delete, or the old key of a move
)

// doubt is a transaction's tracking of deferrable keys.
type doubt struct {
	live map[string]int32 // key id → puts that may still stand
	// implied is, for each key in doubt, the row the transaction's
	// changes leave at it in a sink's account (nil: none): the before
	// image of what settle appends.
	implied map[string][]any
	order   []doubtKey // the keys in doubt, first doubt first
	full    bool       // maxDoubtKeys was reached
}

type doubtKey struct {
	rel uint32
	id  string
	key []string
}

// noteKey tracks a change of kind what at the key of tuple, for tables
// whose key is deferrable; img is the row the change leaves at the key in
// a sink's account (its new image; nil for keyLeft).
func (d *Decoder) noteKey(tx *txnState, s *TableShape, tuple *pglogrepl.TupleData, what int, img []any) {
	if !s.DeferrableKey || d.opts.Refetch == nil {
		return
	}
	key, ok := tupleKey(s, tuple)
	if !ok {
		return
	}
	dt := tx.doubt
	if dt == nil {
		dt = &doubt{live: map[string]int32{}, implied: map[string][]any{}}
		tx.doubt = dt
	}
	id := strconv.FormatUint(uint64(s.RelationOID), 10) + "\x00" + strings.Join(key, "\x00")
	if _, ok := dt.implied[id]; ok {
		dt.implied[id] = img // in doubt already: the sinks' account moves on
	}
	n := dt.live[id]
	switch what {
	case keyPut:
		if n == 0 && len(dt.live)+len(dt.order) >= maxDoubtKeys {
			if !dt.full {
				dt.full = true
				d.log.Error("a transaction moved more keys of a table with a DEFERRABLE primary key than are tracked; "+
					"rows it moved onto keys other rows held may be wrong in the sinks: snapshot the table again "+
					"(sluice snapshot --table)", zap.Stringer("table", s.Table.ID), zap.Uint32("xid", tx.xid),
					zap.Int("tracked_keys", maxDoubtKeys))
			}
			return
		}
		dt.live[id] = n + 1
		return
	case keyLeft:
		if n > 1 {
			dt.live[id] = n - 1
		} else if n == 1 {
			delete(dt.live, id)
		}
	}
	if _, ok := dt.implied[id]; n > 0 && !ok {
		dt.implied[id] = img
		dt.order = append(dt.order, doubtKey{rel: s.RelationOID, id: id, key: key})
	}
}

// settle appends to tx, before its commit, the rows of the keys its
// changes left in doubt, read again (see above), against what its changes
// left at each key in the sinks' account: an update from that row to the
// one read, an insert when they left none, a delete when the table has
// none there, and nothing when neither has a row. Before images are the
// rows the stream's own changes carried, full under REPLICA IDENTITY
// FULL like any other.
func (d *Decoder) settle(ctx context.Context, tx *txnState, emit func(Chunk) error) error {
	dt := tx.doubt
	tx.doubt = nil
	if dt == nil || len(dt.order) == 0 {
		return nil
	}
	byRel := map[uint32][][]string{}
	ids := map[uint32][]string{}
	var rels []uint32
	for _, k := range dt.order {
		if byRel[k.rel] == nil {
			rels = append(rels, k.rel)
		}
		byRel[k.rel] = append(byRel[k.rel], k.key)
		ids[k.rel] = append(ids[k.rel], k.id)
	}
	for _, rel := range rels {
		s := d.rels[rel]
		if s == nil {
			continue
		}
		keys := byRel[rel]
		cols := make([]int, len(s.Columns))
		for i := range cols {
			cols[i] = i
		}
		rows, err := d.opts.Refetch(ctx, tx.xid, s, keys, cols)
		var pe *pgconn.PgError
		if errors.As(err, &pe) && (pe.Code == "42P01" || pe.Code == "42703") {
			// The table or a column is gone since: a later change of the
			// table's shape is on its way, and its keys cannot be read.
			d.log.Error("keys a DEFERRABLE primary key left in doubt cannot be read again; snapshot the table again "+
				"(sluice snapshot --table)", zap.Stringer("table", s.Table.ID), zap.Int("keys", len(keys)), zap.Error(err))
			continue
		}
		if err != nil {
			return fmt.Errorf("postgres source: re-read %d keys of %s that moves under its DEFERRABLE primary key left in doubt: %w",
				len(keys), s.Table.ID, err)
		}
		d.log.Debug("keys in doubt read again", zap.Stringer("table", s.Table.ID), zap.Int("keys", len(keys)))
		for i, row := range rows {
			implied := dt.implied[ids[rel][i]]
			var r pipeline.Record
			switch {
			case row != nil && implied != nil:
				r = pipeline.Record{Op: pipeline.OpUpdate, Table: s.Table, Before: implied, After: row}
			case row != nil:
				r = pipeline.Record{Op: pipeline.OpInsert, Table: s.Table, After: row}
			case implied != nil:
				r = pipeline.Record{Op: pipeline.OpDelete, Table: s.Table, Before: implied}
			default:
				continue
			}
			if err := d.add(tx, r, emit); err != nil {
				return err
			}
		}
	}
	return nil
}
