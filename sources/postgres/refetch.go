package postgres

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

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
	key, ok := tupleKey(s, tuple)
	if !ok {
		return nil // a key column itself unchanged or NULL: no key to read by
	}
	rows, err := d.opts.Refetch(ctx, xid, s, [][]string{key}, cols)
	if err != nil {
		return fmt.Errorf("postgres source: re-read the unchanged TOASTed columns of %s after a key change: %w", s.Table.ID, err)
	}
	for j, i := range cols {
		after[i] = nil
		if rows[0] != nil {
			after[i] = rows[0][j]
		}
	}
	return nil
}

// tupleKey returns the text of the key columns of tuple, false when one
// of them carries no text (unchanged or NULL).
func tupleKey(s *TableShape, tuple *pglogrepl.TupleData) ([]string, bool) {
	key := make([]string, len(s.Table.KeyIdx))
	for i, k := range s.Table.KeyIdx {
		if tuple == nil || tuple.Columns[k].DataType != pglogrepl.TupleDataTypeText {
			return nil, false
		}
		key[i] = string(tuple.Columns[k].Data)
	}
	return key, true
}

// refetcher reads rows by key through pool, decoding them exactly as the
// stream decodes them (the Refetch of DecoderOptions).
// version is the server's (server_version_num): before PostgreSQL 13 no
// function tells whether a transaction is visible, and the rows are read
// at once.
func refetcher(pool *pgxpool.Pool, log *zap.Logger, version int) func(ctx context.Context, xid uint32, s *TableShape, keys [][]string, cols []int) ([][]any, error) {
	return func(ctx context.Context, xid uint32, s *TableShape, keys [][]string, cols []int) ([][]any, error) {
		if version < 130000 {
			return refetch(ctx, pool, s, keys, cols)
		}
		// A commit is written to the WAL (and decoded) before it becomes
		// visible to other sessions: read once it is, or a row the
		// transaction moved would look gone, and a key it gave another
		// row would read the row it held before. It stays invisible for
		// as long as a synchronous standby does not confirm it, and the
		// stream waits with it, however long: nothing read before is
		// right.
		slow := func() {
			log.Warn("a decoded transaction is not visible to other sessions yet (a synchronous standby that does "+
				"not answer?); the stream waits for it before reading its rows again",
				zap.Uint32("xid", xid), zap.String("table", s.Table.ID.String()))
		}
		if err := waitVisible(ctx, pool, xid, slow); err != nil {
			return nil, err
		}
		return refetch(ctx, pool, s, keys, cols)
	}
}

// visibleQuery reports whether transaction $1 (32-bit, of the current or
// the previous xid epoch) is visible in a snapshot taken now.
const visibleQuery = `SELECT pg_visible_in_snapshot(((CASE WHEN $1::bigint <= (x & 4294967295) THEN x >> 32 ELSE (x >> 32) - 1 END) << 32 | $1::bigint)::text::xid8, pg_current_snapshot())
	FROM (SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint AS x) s`

// waitVisible polls (1 ms doubling to 50 ms) until the committed
// transaction xid is visible in a snapshot taken now, and returns nil; or
// the error that ended the wait (ctx's, the server's; PostgreSQL 13 or
// newer). slow is called once the wait has lasted slowVisible.
func waitVisible(ctx context.Context, pool *pgxpool.Pool, xid uint32, slow func()) error {
	warn := time.Now().Add(slowVisible)
	for delay := time.Millisecond; ; delay = min(2*delay, 50*time.Millisecond) {
		var ok bool
		if err := pool.QueryRow(ctx, visibleQuery, int64(xid)).Scan(&ok); err != nil {
			return fmt.Errorf("wait for transaction %d to be visible: %w", xid, err)
		}
		if ok {
			return nil
		}
		if slow != nil && time.Now().After(warn) {
			slow()
			slow = nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(delay):
		}
	}
}

// slowVisible is how long waitVisible waits before it says so; a
// variable for the tests.
var slowVisible = 10 * time.Second

// refetchBatch is the most keys one query reads.
const refetchBatch = 500

// refetch reads cols of the rows of keys (each the key columns' text in
// key order); rows[i] is nil when key i has no row.
func refetch(ctx context.Context, pool *pgxpool.Pool, s *TableShape, keys [][]string, cols []int) ([][]any, error) {
	out := make([][]any, len(keys))
	at := make(map[string]int, len(keys))
	for i, k := range keys {
		at[strings.Join(k, "\x00")] = i
	}
	nk := len(s.Table.KeyIdx)
	sel := make([]string, 0, nk+len(cols))
	kcols := make([]string, nk)
	for j, k := range s.Table.KeyIdx {
		kcols[j] = pgx.Identifier{s.Columns[k].Name}.Sanitize()
		sel = append(sel, kcols[j]+"::text")
	}
	for _, i := range cols {
		sel = append(sel, pgx.Identifier{s.Columns[i].Name}.Sanitize()+"::text")
	}
	head := fmt.Sprintf("SELECT %s FROM %s WHERE (%s) IN (", strings.Join(sel, ", "),
		pgx.Identifier{s.Table.ID.Schema, s.Table.ID.Table}.Sanitize(), strings.Join(kcols, ", "))
	for lo := 0; lo < len(keys); lo += refetchBatch {
		batch := keys[lo:min(lo+refetchBatch, len(keys))]
		// The keys' text is compared as literals of the columns' types
		// (simple protocol), so the primary key's index is used.
		var q strings.Builder
		q.WriteString(head)
		args := []any{pgx.QueryExecModeSimpleProtocol}
		for i, k := range batch {
			if i > 0 {
				q.WriteString(", ")
			}
			q.WriteString("(")
			for j, v := range k {
				if j > 0 {
					q.WriteString(", ")
				}
				args = append(args, v)
				q.WriteString("$" + strconv.Itoa(len(args)-1))
			}
			q.WriteString(")")
		}
		q.WriteString(")")
		if err := readKeyed(ctx, pool, q.String(), args, s, nk, cols, at, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// readKeyed runs q and puts each row's decoded cols at the index at gives
// its key's text.
func readKeyed(ctx context.Context, pool *pgxpool.Pool, q string, args []any, s *TableShape, nk int, cols []int, at map[string]int, out [][]any) error {
	rows, err := pool.Query(ctx, q, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	key := make([]string, nk)
	for rows.Next() {
		raw := rows.RawValues()
		for j := range key {
			key[j] = string(raw[j])
		}
		i, ok := at[strings.Join(key, "\x00")]
		if !ok {
			continue
		}
		vals := make([]any, len(cols))
		for j, c := range cols {
			if raw[nk+j] == nil {
				continue
			}
			if vals[j], err = DecodeText(s.Columns[c], raw[nk+j]); err != nil {
				return fmt.Errorf("column %s: %w", s.Columns[c].Name, err)
			}
		}
		out[i] = vals
	}
	return rows.Err()
}
