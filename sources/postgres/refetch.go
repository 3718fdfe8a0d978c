package postgres

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluice-cdc/sluice/pipeline"
)

// A primary-key UPDATE under REPLICA IDENTITY DEFAULT sends the new tuple
// with TOASTed columns it did not change marked "unchanged", and the old
// tuple holds only the key. The change becomes a delete of the old key and
// an insert of the new one, and no sink holds a value for the new key to
// keep: written as "unchanged" the column would become NULL — or, when the
// new key held a row before (deleted since), that deleted row's old value.
// The decoder therefore re-reads those columns from the table by the new
// key (refetchUnchanged).
//
// The value read is the column's value when the read runs, which may be
// later than the change: a later change of the column itself sends its
// new value explicitly (an update that sets a TOASTed column always
// carries it), so a value read "too late" is the one that later change
// brings again, and every later change of the row sorts above this one
// (Invariant 4). When the row is gone (deleted, or moved to another key
// since) the later delete or key change removes the new key anyway, and
// the columns are written as NULL.

// refetchUnchanged replaces the unchanged values in after (the decoded
// new tuple of a key-changing update) with the row's current values.
func (d *Decoder) refetchUnchanged(ctx context.Context, xid uint32, s *TableShape, tuple *pglogrepl.TupleData, after []any) error {
	var cols []int
	for i, v := range after {
		if v == pipeline.UnchangedValue {
			cols = append(cols, i)
		}
	}
	if len(cols) == 0 || d.opts.Refetch == nil {
		return nil
	}
	key := make([]string, len(s.Table.KeyIdx))
	for i, k := range s.Table.KeyIdx {
		if tuple.Columns[k].DataType != pglogrepl.TupleDataTypeText {
			return nil // a key column itself unchanged or NULL: no key to read by
		}
		key[i] = string(tuple.Columns[k].Data)
	}
	values, found, err := d.opts.Refetch(ctx, xid, s, key, cols)
	if err != nil {
		return fmt.Errorf("postgres source: re-read the unchanged TOASTed columns of %s after a key change: %w", s.Table.ID, err)
	}
	for j, i := range cols {
		after[i] = nil
		if found {
			after[i] = values[j]
		}
	}
	return nil
}

// refetcher reads columns by key through pool, decoding them exactly as
// the stream decodes them.
func refetcher(pool *pgxpool.Pool) func(ctx context.Context, xid uint32, s *TableShape, key []string, cols []int) ([]any, bool, error) {
	return func(ctx context.Context, xid uint32, s *TableShape, key []string, cols []int) ([]any, bool, error) {
		values, found, err := refetch(ctx, pool, s, key, cols)
		if err != nil || found {
			return values, found, err
		}
		// A commit is written to the WAL (and decoded) before it becomes
		// visible to other sessions: wait until it is, then read again,
		// or a row the transaction moved would look gone.
		if waitVisible(ctx, pool, xid) {
			return refetch(ctx, pool, s, key, cols)
		}
		return values, found, err
	}
}

// visibleQuery reports whether transaction $1 (32-bit, of the current or
// the previous xid epoch) is visible in a snapshot taken now.
const visibleQuery = `SELECT pg_visible_in_snapshot(((CASE WHEN $1::bigint <= (x & 4294967295) THEN x >> 32 ELSE (x >> 32) - 1 END) << 32 | $1::bigint)::text::xid8, pg_current_snapshot())
	FROM (SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint AS x) s`

// waitVisible polls (1 ms doubling to 50 ms, at most 10 s) until the
// committed transaction xid is visible; false when it never turned
// visible or the server cannot tell (before PostgreSQL 13).
func waitVisible(ctx context.Context, pool *pgxpool.Pool, xid uint32) bool {
	deadline := time.Now().Add(10 * time.Second)
	for delay := time.Millisecond; ; delay = min(2*delay, 50*time.Millisecond) {
		var ok bool
		if err := pool.QueryRow(ctx, visibleQuery, int64(xid)).Scan(&ok); err != nil {
			return false
		}
		if ok {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(delay):
		}
	}
}

func refetch(ctx context.Context, pool *pgxpool.Pool, s *TableShape, key []string, cols []int) ([]any, bool, error) {
	sel := make([]string, len(cols))
	for j, i := range cols {
		sel[j] = pgx.Identifier{s.Columns[i].Name}.Sanitize() + "::text"
	}
	where := make([]string, len(s.Table.KeyIdx))
	args := make([]any, len(key))
	for j, k := range s.Table.KeyIdx {
		// The key's text is compared as a literal of the column's
		// type (simple protocol), so the primary key's index is used.
		where[j] = fmt.Sprintf("%s = $%d", pgx.Identifier{s.Columns[k].Name}.Sanitize(), j+1)
		args[j] = key[j]
	}
	q := fmt.Sprintf("SELECT %s FROM %s WHERE %s", strings.Join(sel, ", "),
		pgx.Identifier{s.Table.ID.Schema, s.Table.ID.Table}.Sanitize(), strings.Join(where, " AND "))
	rows, err := pool.Query(ctx, q, append([]any{pgx.QueryExecModeSimpleProtocol}, args...)...)
	if err != nil {
		return nil, false, err
	}
	defer rows.Close()
	if !rows.Next() {
		return nil, false, rows.Err()
	}
	raw := rows.RawValues()
	out := make([]any, len(cols))
	for j, i := range cols {
		if raw[j] == nil {
			continue
		}
		if out[j], err = DecodeText(s.Columns[i], raw[j]); err != nil {
			return nil, false, fmt.Errorf("column %s: %w", s.Columns[i].Name, err)
		}
	}
	return out, true, rows.Err()
}
