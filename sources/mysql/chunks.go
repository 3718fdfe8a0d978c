package mysql

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/go-mysql-org/go-mysql/client"
	gomysql "github.com/go-mysql-org/go-mysql/mysql"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/snapshot"
)

// ChunkReader reads the source's tables for the incremental snapshot
// engine (snapshot.Reader): keyset chunks on the primary key (keyset), each
// in one transaction WITH CONSISTENT SNAPSHOT, and watermarks as updates
// of the pipeline's row in the watermark table (watermarks), which the
// stream decodes as OpWatermark records; or, read-only, as GTID positions
// the stream meets (readonly.go).
//
// InnoDB makes a transaction visible in binlog order (MariaDB always,
// MySQL with binlog_order_commits, which the reader checks), so a read
// that starts after a watermark committed sees every transaction the
// binlog has before it: Chunk.InProgress stays nil.
//
// A cursor is a JSON array of the key's values as the server returned
// them (encodeCursor), compared back only by the server.
//
// The go-mysql client takes no context: a call honours ctx between
// statements and between rows, and otherwise returns when its statement
// does, which lock_wait_timeout bounds.
type ChunkReader struct {
	s   *Source
	wm  *watermarks
	sem chan struct{}

	mu      sync.Mutex
	idle    []*client.Conn
	checked bool // the server's commit order and the watermark table
	closed  bool
	// known holds each table's columns as the last chunk read them
	// under its metadata lock; the next chunk's query is built from
	// them (see read).
	known map[pipeline.TableID][]colDesc
	// catalogReads counts the reads of tables' columns (columns).
	catalogReads atomic.Int64
}

// lockWaitSeconds bounds how long a chunk, a watermark or the initial
// load waits for a table's metadata lock (behind a schema change) or the
// watermark row before it fails and is retried.
const lockWaitSeconds = 10

// lockWait sets a session's waits for metadata and row locks to
// lockWaitSeconds.
var lockWait = "SET SESSION lock_wait_timeout = " + strconv.Itoa(lockWaitSeconds) + ", innodb_lock_wait_timeout = " + strconv.Itoa(lockWaitSeconds)

// ChunkReader returns a reader over the source's server with up to conns
// connections, opened on first use (after Open). It needs
// Options.WatermarkTable.
func (s *Source) ChunkReader(conns int) *ChunkReader {
	r := &ChunkReader{s: s, wm: s.watermarks(), sem: make(chan struct{}, max(conns, 1))}
	s.mu.Lock()
	s.readers = append(s.readers, r)
	s.mu.Unlock()
	return r
}

// acquire returns an idle connection or opens one.
func (r *ChunkReader) acquire(ctx context.Context) (*client.Conn, error) {
	if r.wm == nil && r.s.posMarks == nil {
		return nil, pipeline.Fatal(errors.New("mysql source: incremental snapshots need a watermark table (snapshot.watermark_table) or snapshot.read_only"))
	}
	select {
	case r.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	r.mu.Lock()
	if n := len(r.idle); n > 0 {
		c := r.idle[n-1]
		r.idle = r.idle[:n-1]
		r.mu.Unlock()
		return c, nil
	}
	checked := r.checked
	r.mu.Unlock()
	c, err := r.open(ctx, checked)
	if err != nil {
		<-r.sem
		return nil, err
	}
	return c, nil
}

func (r *ChunkReader) open(ctx context.Context, checked bool) (*client.Conn, error) {
	c, err := r.s.connect(ctx)
	if err != nil {
		return nil, err
	}
	for _, q := range []string{
		"SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ",
		lockWait,
	} {
		if _, err := c.Execute(q); err != nil {
			c.Close()
			return nil, fmt.Errorf("mysql source: snapshot reader: %s: %w", q, err)
		}
	}
	if !checked {
		if err := r.check(c); err != nil {
			c.Close()
			return nil, err
		}
		r.mu.Lock()
		r.checked = true
		r.mu.Unlock()
	}
	return c, nil
}

// check refuses a MySQL server that may make transactions visible out of
// binlog order or that leaves the watermark table out of its binlog, and
// makes sure the table exists.
func (r *ChunkReader) check(c *client.Conn) error {
	if r.s.srv != nil && !r.s.srv.MariaDB {
		res, err := c.Execute("SELECT @@GLOBAL.binlog_order_commits")
		if err != nil {
			return fmt.Errorf("mysql source: read binlog_order_commits: %w", err)
		}
		on, _ := res.GetInt(0, 0)
		res.Close()
		if on == 0 {
			return pipeline.Fatal(errors.New("mysql source: incremental snapshots need binlog_order_commits=ON, so that a " +
				"transaction is visible once every transaction before it in the binlog is: SET PERSIST binlog_order_commits = ON"))
		}
	}
	if r.wm == nil {
		return nil // read-only: no table (readonly.go)
	}
	if r.s.srv != nil {
		if err := r.wm.logged(c, r.s.srv); err != nil {
			return err
		}
	}
	return r.wm.ensure(c)
}

// release returns c to the idle list, or closes it after an error that
// may have left it mid-statement or mid-transaction.
func (r *ChunkReader) release(c *client.Conn, ok bool) {
	r.mu.Lock()
	if ok && !r.closed {
		r.idle = append(r.idle, c)
		c = nil
	}
	r.mu.Unlock()
	if c != nil {
		closeQuietly(c)
	}
	<-r.sem
}

// Close releases the reader's idle connections; those in use are closed
// when released.
func (r *ChunkReader) Close() {
	r.mu.Lock()
	idle := r.idle
	r.idle, r.closed = nil, true
	r.mu.Unlock()
	for _, c := range idle {
		closeQuietly(c)
	}
}

// permanent marks the errors retrying cannot fix as permanent.
func permanent(err error) error {
	if err != nil && isPermanent(err) {
		return pipeline.Fatal(err)
	}
	return err
}

// columns reads id's columns from the catalog, counting the reads.
func (r *ChunkReader) columns(c *client.Conn, id pipeline.TableID) ([]colDesc, error) {
	r.catalogReads.Add(1)
	return catalogDescs(c, id.Schema, id.Table)
}

// shape reads t's columns and refuses a table without a primary key.
func (r *ChunkReader) shape(c *client.Conn, id pipeline.TableID) ([]colDesc, *pipeline.Table, error) {
	descs, err := r.columns(c, id)
	if errors.Is(err, errNoColumns) {
		return nil, nil, pipeline.Fatal(err)
	}
	if err != nil {
		return nil, nil, permanent(err)
	}
	return r.shapeOf(id, descs)
}

// shapeOf is shape with the columns read already.
func (r *ChunkReader) shapeOf(id pipeline.TableID, descs []colDesc) ([]colDesc, *pipeline.Table, error) {
	t := buildTable(tableID(tableName{db: id.Schema, table: id.Table}), descs, 1, r.s.opts.ZeroDates == ZeroDatesNull)
	if len(t.KeyIdx) == 0 {
		q := quoteIdent(id.Schema) + "." + quoteIdent(id.Table)
		return nil, nil, pipeline.Fatal(fmt.Errorf("table %s has no primary key, which incremental snapshots read in order of: "+
			"add one (ALTER TABLE %s ADD PRIMARY KEY (…)), or load it with snapshot mode initial", q, q))
	}
	return descs, t, nil
}

func quotedTable(id pipeline.TableID) string {
	return quoteIdent(id.Schema) + "." + quoteIdent(id.Table)
}

// conds is the WHERE clause over the cursors (after < key <= upTo) and
// the filter, with its arguments.
func conds(ks keyset, t snapshot.Target, after, upTo snapshot.Cursor) (string, []any, error) {
	var where []string
	var args []any
	for _, b := range []struct {
		cur snapshot.Cursor
		not string
	}{{after, ""}, {upTo, "NOT "}} {
		if b.cur == nil {
			continue
		}
		vals, err := decodeCursor(b.cur, len(ks.names))
		if err != nil {
			return "", nil, pipeline.Fatal(err)
		}
		where = append(where, b.not+ks.after())
		args = append(args, afterArgs(vals)...)
	}
	if t.Where != "" {
		where = append(where, "("+t.Where+")")
	}
	if len(where) == 0 {
		return "", nil, nil
	}
	return " WHERE " + strings.Join(where, " AND "), args, nil
}

// Plan implements snapshot.Reader.
func (r *ChunkReader) Plan(ctx context.Context, t snapshot.Target, after snapshot.Cursor, parts int) (p snapshot.Plan, err error) {
	c, err := r.acquire(ctx)
	if err != nil {
		return p, err
	}
	ok := false
	defer func() { r.release(c, ok) }()
	// Read only: the filter of a request is the operator's SQL.
	if _, err := c.Execute("START TRANSACTION READ ONLY"); err != nil {
		return p, err
	}
	descs, table, err := r.shape(c, t.Table)
	if err != nil {
		return p, err
	}
	p.Table = table
	res, err := c.Execute("SELECT IFNULL(TABLE_ROWS, 0) FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?",
		t.Table.Schema, t.Table.Table)
	if err != nil {
		return p, fmt.Errorf("estimate rows of %s: %w", t.Table, err)
	}
	p.Rows, _ = res.GetInt(0, 0)
	res.Close()
	ks := newKeyset(descs, table.KeyIdx)
	keyAt := func(upTo snapshot.Cursor, order string, offset int64) (snapshot.Cursor, error) {
		where, args, err := conds(ks, t, after, upTo)
		if err != nil {
			return nil, err
		}
		q := "SELECT " + ks.list() + " FROM " + quotedTable(t.Table) + where + " ORDER BY " + order +
			" LIMIT 1 OFFSET " + strconv.FormatInt(offset, 10)
		res, err := c.Execute(q, args...)
		if err != nil {
			return nil, permanent(err)
		}
		defer res.Close()
		if len(res.Values) == 0 {
			return nil, nil
		}
		b, err := ks.bound(res.Values[0])
		if err != nil {
			return nil, err
		}
		return encodeCursor(b)
	}
	if p.Max, err = keyAt(nil, ks.desc(), 0); err != nil {
		return p, err
	}
	if p.Max != nil && parts > 1 && p.Rows > int64(parts) {
		step := p.Rows / int64(parts)
		prev := ""
		for i := 1; i < parts; i++ {
			k, err := keyAt(p.Max, ks.list(), step*int64(i))
			if err != nil {
				return p, err
			}
			if k == nil || string(k) == string(p.Max) || string(k) == prev {
				break
			}
			p.Splits, prev = append(p.Splits, k), string(k)
		}
	}
	if t.Where != "" {
		p.Rows = 0 // TABLE_ROWS counts the whole table
	}
	if _, err := c.Execute("COMMIT"); err != nil {
		return p, err
	}
	ok = true
	return p, nil
}

// Chunk implements snapshot.Reader.
func (r *ChunkReader) Chunk(ctx context.Context, t snapshot.Target, after, upTo snapshot.Cursor, limit, maxBytes int) (snapshot.Chunk, error) {
	return r.read(ctx, t, limit, maxBytes, func(descs []colDesc, ks keyset) (string, []any, error) {
		where, args, err := conds(ks, t, after, upTo)
		if err != nil {
			return "", nil, err
		}
		return "SELECT " + selectList(descs) + " FROM " + quotedTable(t.Table) + where + " ORDER BY " + ks.list() +
			" LIMIT " + strconv.Itoa(limit), args, nil
	})
}

// Keys implements snapshot.Reader: the rows among keys, in key order.
func (r *ChunkReader) Keys(ctx context.Context, t snapshot.Target, keys [][]any) (snapshot.Chunk, error) {
	return r.read(ctx, t, len(keys), 0, func(descs []colDesc, ks keyset) (string, []any, error) {
		var ors []string
		var args []any
		for _, key := range keys {
			if len(key) != len(ks.names) {
				return "", nil, fmt.Errorf("key %v does not fit the key (%s) of %s", key, ks.list(), t.Table)
			}
			ands := make([]string, len(key))
			for i, v := range key {
				a, err := keyArg(ks.descs[i], v)
				if err != nil {
					return "", nil, err
				}
				ands[i] = ks.names[i] + " = " + ks.ph[i]
				args = append(args, a)
			}
			ors = append(ors, "("+strings.Join(ands, " AND ")+")")
		}
		if len(ors) == 0 {
			ors = []string{"FALSE"}
		}
		return "SELECT " + selectList(descs) + " FROM " + quotedTable(t.Table) + " WHERE (" + strings.Join(ors, " OR ") +
			") ORDER BY " + ks.list(), args, nil
	})
}

// read runs the query query builds in one transaction WITH CONSISTENT
// SNAPSHOT. The columns are read after the rows, under the metadata lock
// the SELECT took, which no schema change can commit past before the
// transaction ends: the rows have the columns read then. The query is
// built from the columns the table's last chunk found that way (known),
// or read before it for the first chunk: a schema change that committed
// since fails the SELECT (ER_TABLE_DEF_CHANGED, an unknown column) or
// shows as other columns, and the chunk is read again at once with the
// columns read first. One catalog read a chunk instead of two: on
// MariaDB one costs about as much as reading a few thousand rows.
func (r *ChunkReader) read(ctx context.Context, t snapshot.Target, limit, maxBytes int, query func([]colDesc, keyset) (string, []any, error)) (snapshot.Chunk, error) {
	r.mu.Lock()
	descs := r.known[t.Table]
	r.mu.Unlock()
	if descs != nil {
		ch, err := r.readAs(ctx, t, descs, limit, maxBytes, query)
		if err == nil || ctx.Err() != nil {
			return ch, err
		}
		r.forget(t.Table) // read the columns first this time
	}
	return r.readAs(ctx, t, nil, limit, maxBytes, query)
}

// forget drops what read knows of table's columns.
func (r *ChunkReader) forget(table pipeline.TableID) {
	r.mu.Lock()
	delete(r.known, table)
	r.mu.Unlock()
}

// readAs is read with the query built from known, or from the columns
// read first when known is nil.
func (r *ChunkReader) readAs(ctx context.Context, t snapshot.Target, known []colDesc, limit, maxBytes int, query func([]colDesc, keyset) (string, []any, error)) (ch snapshot.Chunk, err error) {
	c, err := r.acquire(ctx)
	if err != nil {
		return ch, err
	}
	ok := false
	defer func() { r.release(c, ok) }()
	if _, err := c.Execute("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY"); err != nil {
		return ch, err
	}
	var descs []colDesc
	var table *pipeline.Table
	if known != nil {
		descs, table, err = r.shapeOf(t.Table, known)
	} else {
		descs, table, err = r.shape(c, t.Table)
	}
	if err != nil {
		return ch, err
	}
	ch.Table = table
	ks := newKeyset(descs, table.KeyIdx)
	sql, args, err := query(descs, ks)
	if err != nil {
		return ch, err
	}
	stmt, err := c.Prepare(sql)
	if err != nil {
		return ch, permanent(fmt.Errorf("read %s: %w", t.Table, err))
	}
	defer stmt.Close()
	rr := rowReader{conv: converter{zeroNull: r.s.opts.ZeroDates == ZeroDatesNull, charsets: r.s.cs}, descs: descs}
	var last heldKey
	bytes := 0
	ch.Rows = make([][]any, 0, min(limit, 1<<16))
	ch.Sizes = make([]int, 0, cap(ch.Rows))
	var result gomysql.Result
	err = stmt.ExecuteSelectStreaming(&result, func(row []gomysql.FieldValue) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if maxBytes > 0 && bytes >= maxBytes {
			ch.Cut = true
			return nil
		}
		last.hold(row, table.KeyIdx)
		out, bad, err := rr.row(row)
		if err != nil {
			// Invariant 7: the row goes to the dead-letter queue, the
			// chunk goes on.
			ch.Dead = append(ch.Dead, deadLetter(table, pipeline.OpRead, pipeline.Version{}, [][]any{rawRow(row)},
				fmt.Errorf("snapshot of %s: column %s: %w", t.Table, descs[bad].name, err)))
			return nil
		}
		ch.Rows = append(ch.Rows, out)
		ch.Sizes = append(ch.Sizes, pipeline.ImageSize(out))
		bytes += ch.Sizes[len(ch.Sizes)-1]
		return nil
	}, nil, args...)
	if err != nil {
		if ctx.Err() != nil {
			return ch, ctx.Err()
		}
		return ch, permanent(fmt.Errorf("read %s: %w", t.Table, err))
	}
	again, err := r.columns(c, t.Table)
	if err != nil {
		return ch, err
	}
	if !sameDescs(descs, again) {
		r.forget(t.Table)
		return ch, fmt.Errorf("read %s: the table's columns changed during the read", t.Table)
	}
	if last.seen {
		held := last.values()
		b := make([]any, len(held))
		for i, v := range held {
			if b[i], err = boundOf(ks.descs[i], v); err != nil {
				return ch, err
			}
		}
		if ch.Last, err = encodeCursor(b); err != nil {
			return ch, err
		}
	}
	if _, err := c.Execute("COMMIT"); err != nil {
		return ch, err
	}
	r.mu.Lock()
	if r.known == nil {
		r.known = map[pipeline.TableID][]colDesc{}
	}
	r.known[t.Table] = again
	r.mu.Unlock()
	ok = true
	return ch, nil
}

// Mark implements snapshot.Reader: it writes token into the pipeline's
// row of the watermark table. A high watermark first reads one row of
// the table, which takes its shared metadata lock until the commit: a
// schema change, which needs the lock exclusively to complete, cannot
// commit between the shape read here and the watermark.
func (r *ChunkReader) Mark(ctx context.Context, token string, table pipeline.TableID, high func(*pipeline.Table) error) error {
	c, err := r.acquire(ctx)
	if err != nil {
		return err
	}
	ok := false
	defer func() { r.release(c, ok) }()
	if r.s.posMarks != nil {
		err := r.readOnlyMark(ctx, c, token, table, high)
		ok = err == nil
		return err
	}
	if _, err := c.Execute("START TRANSACTION"); err != nil {
		return err
	}
	if high != nil {
		if err := r.highShape(c, table, high); err != nil {
			return err
		}
	}
	if _, err := c.Execute("INSERT INTO "+r.wm.quoted()+" (pipeline, token) VALUES (?, ?) ON DUPLICATE KEY UPDATE token = ?",
		r.wm.pipeline, token, token); err != nil {
		return writeRefused(permanent(err))
	}
	if _, err := c.Execute("COMMIT"); err != nil {
		return err
	}
	ok = true
	return nil
}

// highShape calls high with table's shape, read after a SELECT of the
// table took its metadata lock, which the open transaction holds until
// it ends: no schema change of the table commits before then.
func (r *ChunkReader) highShape(c *client.Conn, table pipeline.TableID, high func(*pipeline.Table) error) error {
	if _, err := c.Execute("SELECT 1 FROM " + quotedTable(table) + " LIMIT 1"); err != nil {
		return permanent(err)
	}
	descs, err := r.columns(c, table)
	if err != nil {
		return permanent(err)
	}
	return high(buildTable(tableID(tableName{db: table.Schema, table: table.Table}), descs, 1, r.s.opts.ZeroDates == ZeroDatesNull))
}

// writeRefused adds the way out to a watermark write the server or the
// user's privileges refuse.
func writeRefused(err error) error {
	var me *gomysql.MyError
	if errors.As(err, &me) && (me.Code == gomysql.ER_OPTION_PREVENTS_STATEMENT || me.Code == gomysql.ER_TABLEACCESS_DENIED_ERROR) {
		return pipeline.Fatal(fmt.Errorf("mysql source: write the incremental snapshot's watermark: %w; on a read-only server "+
			"(a replica) or for a user who may not write, set snapshot.read_only: true (watermarks are then read as GTID positions)", me))
	}
	return err
}
