package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/snapshot"
)

// ChunkReader reads the source's tables for the incremental snapshot
// engine (snapshot.Reader): keyset chunks on the primary key in one
// REPEATABLE READ transaction each, watermarks as transactional logical
// decoding messages (WatermarkPrefix) that the stream decodes as
// OpWatermark records. A cursor is the JSON array of the key columns'
// text forms, as the server printed them with SessionSettings; it is only
// ever compared back by the server, with the columns' own types and
// collations.
type ChunkReader struct {
	s    *Source
	size int

	mu   sync.Mutex
	pool *pgxpool.Pool
}

// lockWait bounds how long a chunk or a high watermark waits for its
// table lock (behind a schema change) before it fails and is retried.
const lockWait = 10 * time.Second

// ChunkReader returns a reader over the source's database with up to
// conns connections, opened on first use (after Open).
func (s *Source) ChunkReader(conns int) *ChunkReader {
	r := &ChunkReader{s: s, size: max(conns, 1)}
	s.mu.Lock()
	s.readers = append(s.readers, r)
	s.mu.Unlock()
	return r
}

func (r *ChunkReader) conn(ctx context.Context) (*pgxpool.Conn, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pool == nil {
		if r.s.version != 0 && r.s.version < 140000 {
			return nil, pipeline.Fatal(fmt.Errorf("postgres source: incremental snapshots need PostgreSQL 14 or later "+
				"(pgoutput sends logical decoding messages from 14 on); the server is %d: use snapshot mode initial", r.s.version))
		}
		cfg, err := pgxpool.ParseConfig(r.s.opts.DSN)
		if err != nil {
			return nil, pipeline.Fatal(fmt.Errorf("postgres source: dsn: %w", redactDSNError(err)))
		}
		if r.s.opts.Password != "" {
			cfg.ConnConfig.Password = r.s.opts.Password
		}
		applySessionSettings(cfg.ConnConfig.RuntimeParams, r.s.opts.Pipeline)
		cfg.ConnConfig.RuntimeParams["lock_timeout"] = strconv.FormatInt(lockWait.Milliseconds(), 10)
		cfg.MaxConns = int32(r.size)
		if r.pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
			return nil, err
		}
	}
	return r.pool.Acquire(ctx)
}

// Close releases the reader's connections.
func (r *ChunkReader) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pool != nil {
		r.pool.Close()
		r.pool = nil
	}
}

func refOf(id pipeline.TableID) TableRef { return TableRef{Schema: id.Schema, Name: id.Table} }

// keyedShape loads t's shape and refuses a table without a primary key.
func (r *ChunkReader) keyedShape(ctx context.Context, q Querier, t pipeline.TableID) (*TableShape, error) {
	shape, err := LoadTableShape(ctx, q, r.s.database, refOf(t))
	if err != nil {
		return nil, fmt.Errorf("table %s: %w", t, err)
	}
	// The primary key, else the replica identity index (unique, its
	// columns NOT NULL): both order every row exactly once.
	if len(shape.Table.KeyIdx) == 0 || !shape.HasPrimaryKey && shape.ReplicaIdentity != 'i' {
		return nil, pipeline.Fatal(fmt.Errorf("table %s has no primary key or replica identity index, which incremental snapshots "+
			"read in order of: add one (ALTER TABLE %[2]s ADD PRIMARY KEY (…), or ALTER TABLE %[2]s REPLICA IDENTITY USING INDEX "+
			"<a unique index on NOT NULL columns>), or load it with snapshot mode initial", t, refOf(t).quoted()))
	}
	return shape, nil
}

// Plan implements snapshot.Reader.
func (r *ChunkReader) Plan(ctx context.Context, t snapshot.Target, after snapshot.Cursor, parts int) (snapshot.Plan, error) {
	c, err := r.conn(ctx)
	if err != nil {
		return snapshot.Plan{}, err
	}
	defer c.Release()
	// Read only: the filter of a request is the operator's SQL.
	tx, err := c.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	if err != nil {
		return snapshot.Plan{}, err
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	shape, err := r.keyedShape(ctx, tx, t.Table)
	if err != nil {
		return snapshot.Plan{}, err
	}
	p := snapshot.Plan{Table: shape.Table}
	if err := tx.QueryRow(ctx, "SELECT greatest(reltuples, 0)::bigint FROM pg_class WHERE oid = $1", shape.RelationOID).Scan(&p.Rows); err != nil {
		return p, fmt.Errorf("estimate rows of %s: %w", t.Table, err)
	}
	q := newKeyQuery(shape, t, after, nil)
	last, err := q.keyAt(ctx, c.Conn().PgConn(), " DESC", 0)
	if err != nil || last == nil {
		return p, err
	}
	p.Max = last
	q.upTo = last
	if parts > 1 && p.Rows > int64(parts) {
		step := p.Rows / int64(parts)
		var prev string
		for i := 1; i < parts; i++ {
			k, err := q.keyAt(ctx, c.Conn().PgConn(), "", step*int64(i))
			if err != nil {
				return p, err
			}
			if k == nil || string(k) == string(last) || string(k) == prev {
				break
			}
			p.Splits, prev = append(p.Splits, k), string(k)
		}
	}
	if t.Where != "" {
		p.Rows = 0 // reltuples counts the whole table
	}
	return p, nil
}

// Chunk implements snapshot.Reader.
func (r *ChunkReader) Chunk(ctx context.Context, t snapshot.Target, after, upTo snapshot.Cursor, limit, maxBytes int) (snapshot.Chunk, error) {
	return r.read(ctx, t, limit, maxBytes, func(shape *TableShape) (string, [][]byte, error) {
		sql, args := newKeyQuery(shape, t, after, upTo).rows(limit)
		return sql, args, nil
	})
}

// Keys implements snapshot.Reader: the rows among keys, in key order.
func (r *ChunkReader) Keys(ctx context.Context, t snapshot.Target, keys [][]any) (snapshot.Chunk, error) {
	return r.read(ctx, t, len(keys), 0, func(shape *TableShape) (string, [][]byte, error) {
		where, params, err := keyFilter(shape.Table, keys)
		if err != nil {
			return "", nil, err
		}
		args := make([][]byte, len(params))
		for i, p := range params {
			args[i] = []byte(p.(string))
		}
		cols := make([]string, len(shape.Table.Columns))
		for i, c := range shape.Table.Columns {
			cols[i] = quoteIdent(c.Name)
		}
		return "SELECT " + strings.Join(cols, ", ") + " FROM " + refOf(t.Table).quoted() + " WHERE " + where +
			" ORDER BY " + keyList(shape), args, nil
	})
}

// read runs the query query builds for the table's shape in one
// REPEATABLE READ READ ONLY transaction. LOCK TABLE comes before the
// transaction's snapshot, so the rows and the shape read under it agree.
// At most limit rows come back, and with maxBytes > 0 none after the one
// that takes their bytes to maxBytes (the rest of the result is read and
// dropped, and the chunk is Cut).
func (r *ChunkReader) read(ctx context.Context, t snapshot.Target, limit, maxBytes int, query func(*TableShape) (string, [][]byte, error)) (ch snapshot.Chunk, err error) {
	c, err := r.conn(ctx)
	if err != nil {
		return ch, err
	}
	defer c.Release()
	tx, err := c.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return ch, err
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(ctx, "LOCK TABLE "+refOf(t.Table).quoted()+" IN ACCESS SHARE MODE"); err != nil {
		return ch, err
	}
	var snap string
	if err := tx.QueryRow(ctx, "SELECT pg_current_snapshot()::text").Scan(&snap); err != nil {
		return ch, err
	}
	if ch.InProgress, ch.InvisibleFrom, err = inProgress(snap); err != nil {
		return ch, err
	}
	shape, err := r.keyedShape(ctx, tx, t.Table)
	if err != nil {
		return ch, err
	}
	ch.Table = shape.Table
	sql, args, err := query(shape)
	if err != nil {
		return ch, err
	}
	sc := newRowScanner(shape)
	res := c.Conn().PgConn().ExecParams(ctx, sql, args, nil, nil, sc.formats)
	ch.Rows = make([][]any, 0, min(limit, 1<<16))
	ch.Sizes = make([]int, 0, cap(ch.Rows))
	bytes := 0
	for res.NextRow() {
		if maxBytes > 0 && bytes >= maxBytes {
			ch.Cut = true
			break
		}
		vals := res.Values()
		row, bad := sc.scan(vals)
		if bad != nil {
			// Invariant 7: the row goes to the dead-letter queue with its
			// raw values; the chunk goes on.
			ch.Dead = append(ch.Dead, sc.deadLetter(t.Table.String(), vals, bad))
			continue
		}
		ch.Rows = append(ch.Rows, row)
		ch.Sizes = append(ch.Sizes, pipeline.ImageSize(row))
		bytes += ch.Sizes[len(ch.Sizes)-1]
	}
	if _, err := res.Close(); err != nil {
		return ch, fmt.Errorf("read %s: %w", t.Table, err)
	}
	ch.Last = sc.cursor()
	return ch, tx.Commit(ctx)
}

// inProgress reads pg_current_snapshot()'s text "xmin:xmax:xip,…" into
// the in-progress 32-bit transaction ids, as the stream's Begin messages
// carry them, and xmax, from which on no transaction was visible either.
// xmax matters where no transaction began after the one the read could
// not see (read-only watermarks assign no transaction id): that one is
// then at xmax, not in the list.
func inProgress(snap string) (xip []uint64, xmax uint64, err error) {
	parts := strings.Split(snap, ":")
	if len(parts) != 3 {
		return nil, 0, fmt.Errorf("unexpected snapshot %q", snap)
	}
	if xmax, err = strconv.ParseUint(parts[1], 10, 64); err != nil {
		return nil, 0, fmt.Errorf("unexpected snapshot %q: %w", snap, err)
	}
	xmax &= 0xffffffff
	if parts[2] == "" {
		return nil, xmax, nil
	}
	for _, x := range strings.Split(parts[2], ",") {
		n, err := strconv.ParseUint(x, 10, 64)
		if err != nil {
			return nil, 0, fmt.Errorf("unexpected snapshot %q: %w", snap, err)
		}
		xip = append(xip, n&0xffffffff)
	}
	return xip, xmax, nil
}

// Mark implements snapshot.Reader with a transactional logical decoding
// message, or, read-only, with a WAL position the stream meets
// (positionMark). A high watermark first takes the table's ACCESS SHARE lock,
// which a schema change needs exclusively, so the shape it reads is the
// shape at the message's commit.
func (r *ChunkReader) Mark(ctx context.Context, token string, table pipeline.TableID, high func(*pipeline.Table) error) error {
	c, err := r.conn(ctx)
	if err != nil {
		return err
	}
	defer c.Release()
	if r.s.readOnly() {
		return r.positionMark(ctx, c.Conn(), token, table, high)
	}
	tx, err := c.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if high != nil {
		if err := r.highShape(ctx, tx, table, high); err != nil {
			return err
		}
	}
	if _, err := tx.Exec(ctx, "SELECT pg_logical_emit_message(true, $1, $2)", WatermarkPrefix, token); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// highShape takes table's ACCESS SHARE lock in tx, which a schema change
// needs exclusively (on a standby, the replay of its lock record waits
// for it), and calls high with the shape read under it: no schema change
// of the table commits before tx ends.
func (r *ChunkReader) highShape(ctx context.Context, tx pgx.Tx, table pipeline.TableID, high func(*pipeline.Table) error) error {
	if _, err := tx.Exec(ctx, "LOCK TABLE "+refOf(table).quoted()+" IN ACCESS SHARE MODE"); err != nil {
		return err
	}
	shape, err := LoadTableShape(ctx, tx, r.s.database, refOf(table))
	if err != nil {
		return fmt.Errorf("table %s: %w", table, err)
	}
	return high(shape.Table)
}

// keyQuery builds the keyset queries of one table.
type keyQuery struct {
	shape       *TableShape
	table       string
	keys        string // "k1", "k2"
	where       string
	after, upTo snapshot.Cursor
}

func newKeyQuery(shape *TableShape, t snapshot.Target, after, upTo snapshot.Cursor) *keyQuery {
	return &keyQuery{shape: shape, table: refOf(t.Table).quoted(), keys: keyList(shape), where: t.Where, after: after, upTo: upTo}
}

// conds is the WHERE clause over the cursors and the filter, with its
// text parameters.
func (q *keyQuery) conds() (string, [][]byte, error) {
	var conds []string
	var args [][]byte
	for _, c := range []struct {
		cur snapshot.Cursor
		op  string
	}{{q.after, ">"}, {q.upTo, "<="}} {
		if c.cur == nil {
			continue
		}
		var vals []string
		if err := json.Unmarshal(c.cur, &vals); err != nil || len(vals) != len(q.shape.Table.KeyIdx) {
			return "", nil, fmt.Errorf("cursor %s does not fit the key (%s) of %s: re-snapshot the table", c.cur, q.keys, q.table)
		}
		ps := make([]string, len(vals))
		for i, v := range vals {
			args = append(args, []byte(v))
			ps[i] = "$" + strconv.Itoa(len(args))
		}
		conds = append(conds, "("+q.keys+") "+c.op+" ("+strings.Join(ps, ", ")+")")
	}
	if q.where != "" {
		conds = append(conds, "("+q.where+")")
	}
	if len(conds) == 0 {
		return "", nil, nil
	}
	return " WHERE " + strings.Join(conds, " AND "), args, nil
}

func (q *keyQuery) rows(limit int) (string, [][]byte) {
	cols := make([]string, len(q.shape.Table.Columns))
	for i, c := range q.shape.Table.Columns {
		cols[i] = quoteIdent(c.Name)
	}
	where, args, err := q.conds()
	if err != nil {
		// An impossible cursor reads nothing rather than everything.
		return "SELECT " + strings.Join(cols, ", ") + " FROM " + q.table + " WHERE false", nil
	}
	return "SELECT " + strings.Join(cols, ", ") + " FROM " + q.table + where +
		" ORDER BY " + q.keys + " LIMIT " + strconv.Itoa(limit), args
}

// keyAt returns the cursor of the row at offset in key order (desc: "
// DESC" for the last row), nil when there is none.
func (q *keyQuery) keyAt(ctx context.Context, pc *pgconn.PgConn, desc string, offset int64) (snapshot.Cursor, error) {
	where, args, err := q.conds()
	if err != nil {
		return nil, err
	}
	order := make([]string, len(q.shape.Table.KeyIdx))
	for i, k := range q.shape.Table.KeyIdx {
		order[i] = quoteIdent(q.shape.Table.Columns[k].Name) + desc
	}
	sql := "SELECT " + q.keys + " FROM " + q.table + where + " ORDER BY " + strings.Join(order, ", ") +
		" LIMIT 1 OFFSET " + strconv.FormatInt(offset, 10)
	res := pc.ExecParams(ctx, sql, args, nil, nil, nil).Read()
	if res.Err != nil {
		return nil, res.Err
	}
	if len(res.Rows) == 0 {
		return nil, nil
	}
	vals := make([]string, len(res.Rows[0]))
	for i, v := range res.Rows[0] {
		vals[i] = string(v)
	}
	return json.Marshal(vals)
}
