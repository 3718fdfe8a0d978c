package duckdb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	_ "github.com/duckdb/duckdb-go/v2" // registers the "duckdb" database/sql driver
	"go.uber.org/zap"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/sinks/upsert"
)

// Options configures a Sink.
type Options struct {
	// Name identifies the sink in logs.
	Name string
	// Path is the DuckDB database file; it is created when absent.
	Path string
	// Schema is the DuckDB schema holding the target tables ("main" when
	// empty); it is created when absent.
	Schema string
	// HardDelete removes tombstone rows physically once they are older than
	// TombstoneTTL. Without it tombstones are kept forever (soft delete).
	HardDelete bool
	// TombstoneTTL is how long a tombstone is kept in HardDelete mode;
	// zero keeps tombstones forever (the config defaults it to 168h). It
	// must exceed the longest replay horizon: a record
	// older than a purged tombstone could bring its row back.
	TombstoneTTL time.Duration
	// MemoryLimit caps DuckDB's own memory (its buffer manager; beyond it
	// DuckDB spills to temporary files beside the database), in bytes.
	// The tables' primary-key indexes stay in memory and must fit, or
	// writes fail. 0 follows the indexes: their memory plus a working
	// headroom (memory.go).
	MemoryLimit int64
	// Threads is DuckDB's worker count; 0 takes one less than the CPUs
	// (at least one), leaving a core to the source and the runtime.
	Threads int
	// RowGroupSize is the rows per row group DuckDB writes, a multiple of
	// 2048; 0 takes defaultRowGroupSize.
	RowGroupSize int
	// TableTemplate names a source table's target table: {database},
	// {schema} and {table} are replaced by the source table's names.
	// Empty means "{schema}_{table}".
	TableTemplate string
}

const (
	barrierTable = "_sluice_barriers"
	// snapshotTable keeps when each target last received a snapshot
	// record (HardDelete mode: tombstones outlive the snapshot).
	snapshotTable = "_sluice_snapshots"
	// generationTable keeps the highest generation written (Invariant 10).
	generationTable = "_sluice_generation"
	colVersion      = "_sluice_version"
	colDeleted      = "_sluice_deleted"
	colUpdatedAt    = "_sluice_updated_at"
)

// Sink writes change records into a DuckDB database file, one target table
// per source table, idempotently (Invariant 4). It implements pipeline.Sink.
//
// Each target table is named "<source schema>_<source table>" and has the
// source's columns plus _sluice_version (the row's pipeline.Version in its
// 32-byte form, whose byte order is version order), _sluice_deleted and
// _sluice_updated_at, with a primary key on the source key columns.
//
// A Sink is safe for concurrent use; Write calls are serialized.
type Sink struct {
	opts Options
	log  *zap.Logger
	now  func() time.Time

	mu   sync.Mutex
	db   *sql.DB
	conn *sql.Conn
	// opened is set by Open: a nil conn then means a reopen is due.
	opened bool
	// tables maps a target table name (lower case) to its columns (lower
	// case name → DuckDB type), as they exist in the database.
	tables map[string]map[string]string
	// barriers maps a target table name (lower case) to its truncate
	// barrier: records with a lower version are ignored.
	barriers map[string]pipeline.Version
	// gen is the generation recorded in generationTable.
	gen    upsert.Generation
	purger upsert.Purge
	// direct is the bulk-load fast path's state per target (direct.go);
	// probedIn counts the records it appended after a probe.
	direct   upsert.BulkPaths
	probedIn int64
	// limit is the memory_limit the sink set last and headroom the
	// working memory it allows above the indexes' (memory.go).
	limit, headroom int64
}

var _ pipeline.Sink = (*Sink)(nil)

// New returns an unopened Sink. A nil logger logs nothing.
func New(opts Options, log *zap.Logger) *Sink {
	if opts.Schema == "" {
		opts.Schema = "main"
	}
	if opts.Name == "" {
		opts.Name = "duckdb"
	}
	if opts.TableTemplate == "" {
		opts.TableTemplate = "{schema}_{table}"
	}
	if log == nil {
		log = zap.NewNop()
	}
	return &Sink{opts: opts, log: log.With(zap.String("sink", opts.Name)), now: time.Now, headroom: startHeadroom,
		purger: upsert.Purge{HardDelete: opts.HardDelete, TTL: opts.TombstoneTTL}}
}

// Open opens (or creates) the database file, the schema and the barrier
// table, and loads what already exists. It may be retried; opening an open
// Sink does nothing.
func (s *Sink) Open(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn != nil {
		return nil
	}
	if err := s.openLocked(ctx); err != nil {
		return err
	}
	s.opened = true
	return nil
}

// attached is the name the database file is attached under.
const attached = "sluice_sink"

// defaultRowGroupSize is the rows per row group when Options leaves it 0.
// DuckDB compresses a whole row group when it checkpoints, holding its
// values in memory: at DuckDB's default of 122,880 rows, a drain of 2 KB
// values peaked at 628 MiB RSS (bench pg-backlog-toast); 16,384 rows keep
// that group under 32 MiB of such values. Scans lose little: DuckDB reads
// and parallelises by row group either way.
const defaultRowGroupSize = 16384

func (s *Sink) openLocked(ctx context.Context) error {
	if s.opts.Path == "" {
		return pipeline.Fatal(errors.New("duckdb sink: path is required"))
	}
	// The file is attached to an in-memory database rather than opened
	// as the main one: only ATTACH takes the row group size.
	db, err := sql.Open("duckdb", "")
	if err != nil {
		return fmt.Errorf("duckdb sink: open %s: %w", s.opts.Path, err)
	}
	// Invariant 6: freed pages leave the process at once (allocator.go).
	if err := returnFreedPages(); err != nil {
		s.log.Warn("duckdb allocator keeps its default decay", zap.Error(err))
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		db.Close()
		return fmt.Errorf("duckdb sink: open %s: %w", s.opts.Path, err)
	}
	s.db, s.conn = db, conn
	threads, limit := s.opts.Threads, s.opts.MemoryLimit
	if threads <= 0 {
		threads = max(1, runtime.NumCPU()-1)
	}
	// DuckDB's default checkpoint_threshold (16 MB) is kept: the data of
	// an uncheckpointed WAL stays in memory, and a 256 MB threshold made a
	// 2,000,000-change drain peak at 547 MiB RSS against 352 (bench
	// pg-backlog-sinks), with no faster drain.
	rowGroup := s.opts.RowGroupSize
	if rowGroup <= 0 {
		rowGroup = defaultRowGroupSize
	}
	setup := []string{
		"ATTACH '" + strings.ReplaceAll(s.opts.Path, "'", "''") + "' AS " + attached +
			" (ROW_GROUP_SIZE " + strconv.Itoa(rowGroup) + ")",
		"USE " + attached,
		"SET TimeZone = 'UTC'",
		// Leave a core to the source and the runtime, which feed DuckDB
		// on the same machine.
		"SET threads = " + strconv.Itoa(threads),
		"CREATE SCHEMA IF NOT EXISTS " + quote(s.opts.Schema),
		"CREATE TABLE IF NOT EXISTS " + s.qualified(barrierTable) +
			` ("table" VARCHAR PRIMARY KEY, version BLOB NOT NULL, updated_at TIMESTAMPTZ)`,
		"CREATE TABLE IF NOT EXISTS " + s.qualified(snapshotTable) + ` ("table" VARCHAR PRIMARY KEY, snapshot_at TIMESTAMPTZ NOT NULL)`,
		"CREATE TABLE IF NOT EXISTS " + s.qualified(generationTable) + ` (one BOOLEAN PRIMARY KEY, generation UBIGINT NOT NULL)`,
	}
	if s.opts.Path != ":memory:" {
		// Spilled blocks go beside the file, as when it is the main
		// database (an in-memory main one would spill into ./.tmp).
		setup = append(setup, "SET temp_directory = '"+strings.ReplaceAll(s.opts.Path+".tmp", "'", "''")+"'")
	}
	if limit > 0 {
		setup = append(setup, "SET memory_limit = '"+strconv.FormatInt(max(limit>>20, 1), 10)+"MiB'")
	}
	s.limit = 0
	for _, q := range setup {
		if _, err = conn.ExecContext(ctx, q); err != nil {
			break
		}
	}
	if err == nil {
		err = s.load(ctx)
	}
	if err != nil {
		s.closeLocked()
		return fmt.Errorf("duckdb sink: prepare %s: %w", s.opts.Path, err)
	}
	s.log.Info("duckdb sink open", zap.String("path", s.opts.Path), zap.Int("tables", len(s.tables)))
	return nil
}

// Close releases the database; Write already made everything durable.
func (s *Sink) Close(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.opened = false
	return s.closeLocked()
}

// ready returns an error when Open was not called, and opens the
// database again when it is closed; s.mu is held.
func (s *Sink) ready(ctx context.Context, what string) error {
	if !s.opened {
		return errors.New("duckdb sink: " + what + " before open")
	}
	if s.conn == nil {
		return s.openLocked(ctx)
	}
	return nil
}

func (s *Sink) closeLocked() error {
	if s.db == nil {
		return nil
	}
	err := errors.Join(s.conn.Close(), s.db.Close())
	s.db, s.conn = nil, nil
	return err
}

// load reads the existing target tables' columns and the barriers.
func (s *Sink) load(ctx context.Context) error {
	tables := map[string]map[string]string{}
	rows, err := s.conn.QueryContext(ctx, `SELECT table_name, column_name, data_type FROM duckdb_columns()
		WHERE database_name = current_database() AND schema_name = ?`, s.opts.Schema)
	if err != nil {
		return err
	}
	for rows.Next() {
		var t, c, typ string
		if err := rows.Scan(&t, &c, &typ); err != nil {
			rows.Close()
			return err
		}
		t = strings.ToLower(t)
		if t == barrierTable || t == snapshotTable || t == generationTable {
			continue
		}
		if tables[t] == nil {
			tables[t] = map[string]string{}
		}
		tables[t][strings.ToLower(c)] = typ
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return err
	}
	barriers := map[string]pipeline.Version{}
	rows, err = s.conn.QueryContext(ctx, `SELECT "table", version FROM `+s.qualified(barrierTable))
	if err != nil {
		return err
	}
	for rows.Next() {
		var t string
		var b []byte
		if err := rows.Scan(&t, &b); err != nil {
			rows.Close()
			return err
		}
		v, err := pipeline.ParseVersion(string(b))
		if err != nil {
			rows.Close()
			return fmt.Errorf("barrier of %s: %w", t, err)
		}
		barriers[strings.ToLower(t)] = v
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return err
	}
	var gen uint64
	switch err := s.conn.QueryRowContext(ctx, "SELECT generation FROM "+s.qualified(generationTable)).Scan(&gen); {
	case errors.Is(err, sql.ErrNoRows):
		s.gen = upsert.Generation{}
	case err != nil:
		return err
	default:
		s.gen = upsert.Generation{Gen: gen, Held: true}
	}
	stamps := map[string]time.Time{}
	rows, err = s.conn.QueryContext(ctx, `SELECT "table", snapshot_at FROM `+s.qualified(snapshotTable))
	if err != nil {
		return err
	}
	for rows.Next() {
		var t string
		var at time.Time
		if err := rows.Scan(&t, &at); err != nil {
			rows.Close()
			return err
		}
		stamps[strings.ToLower(t)] = at
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return err
	}
	s.tables, s.barriers = tables, barriers
	s.purger.Load(stamps)
	return nil
}

// Generation implements pipeline.GenerationKeeper.
func (s *Sink) Generation(context.Context) (uint64, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.opened {
		return 0, false, errors.New("duckdb sink: generation before open")
	}
	return s.gen.Gen, s.gen.Held, nil
}

// recordGeneration stores the generation of records before any of them is
// written when it is above the recorded one (Invariant 10).
func (s *Sink) recordGeneration(ctx context.Context, records []pipeline.Record) error {
	g, ok := s.gen.Raise(records)
	if !ok {
		return nil
	}
	if _, err := s.conn.ExecContext(ctx, "INSERT OR REPLACE INTO "+s.qualified(generationTable)+" (one, generation) VALUES (true, ?)", g); err != nil {
		return fmt.Errorf("duckdb sink: record generation %d: %w", g, err)
	}
	s.gen = upsert.Generation{Gen: g, Held: true}
	return nil
}

// stampSnapshots stores when records' tables last received a snapshot
// record, before the records are written (see upsert.Purge).
func (s *Sink) stampSnapshots(ctx context.Context, records []pipeline.Record) error {
	now := s.now()
	targets := s.purger.Stamps(records, func(id pipeline.TableID) string { return strings.ToLower(s.targetName(id)) }, now)
	for _, t := range targets {
		if _, err := s.conn.ExecContext(ctx, "INSERT OR REPLACE INTO "+s.qualified(snapshotTable)+` ("table", snapshot_at) VALUES (?, ?)`,
			t, now); err != nil {
			return fmt.Errorf("duckdb sink: snapshot time of %s: %w", t, err)
		}
	}
	s.purger.Stamped(targets, now)
	return nil
}

// Write applies records in one DuckDB transaction and returns once it is
// committed (durable). Records DuckDB cannot hold fail permanently and are
// reported in a *pipeline.BatchError; the others are applied.
func (s *Sink) Write(ctx context.Context, records []pipeline.Record) error {
	err := s.write(ctx, records)
	var te *pipeline.TableError
	if err != nil && ctx.Err() == nil && outOfMemory(err) && !errors.As(err, &te) {
		// DuckDB's memory_limit, not the batch's fault: the runtime
		// writes smaller pieces and retries one record with backoff.
		s.mu.Lock()
		s.outgrown(err)
		s.mu.Unlock()
		return pipeline.Overloaded(err)
	}
	return err
}

func (s *Sink) write(ctx context.Context, records []pipeline.Record) (err error) {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	defer func() {
		// Tainted failures (commit.go) that no earlier step dropped the
		// database for: a statement outside an explicit transaction
		// commits on its own.
		s.dropIfTainted(err)
	}()
	if err := s.ready(ctx, "write"); err != nil {
		return err
	}
	s.followIndexes(ctx)
	if err := s.recordGeneration(ctx, records); err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		return err
	}
	if err := s.stampSnapshots(ctx, records); err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		return err
	}
	if bulk, rest := upsert.SplitBulk(records); bulk != nil {
		left, err := s.appendNew(ctx, bulk)
		if err != nil {
			return err
		}
		if len(left) == 0 && len(rest) == 0 {
			s.purge(ctx)
			return nil
		}
		if len(left) < len(bulk) {
			// The bulk part's records before the rest: each key's changes
			// keep their order (the fold keeps the newest anyway).
			records = append(left, rest...)
		}
	}
	batches, failed := s.prepare(records)
	// The runtime logs and counts each failed record as it dead-letters
	// it (Invariant 9).
	if len(batches) > 0 {
		if err := s.apply(ctx, batches); err != nil {
			if s.conn == nil || s.dropIfTainted(err) {
				return fmt.Errorf("duckdb sink: %w", err) // dropped (commit.go); ready reloads
			}
			if lerr := s.load(context.Background()); lerr != nil {
				s.log.Warn("reload after failed write", zap.Error(lerr))
			}
			if cerr := ctx.Err(); cerr != nil {
				return cerr
			}
			if te := tableError(ctx, err); te != nil {
				err = te
			}
			return fmt.Errorf("duckdb sink: %w", err)
		}
	}
	s.purge(ctx)
	if len(failed) > 0 {
		return &pipeline.BatchError{Failed: failed}
	}
	return nil
}

// purge removes expired tombstones in HardDelete mode, at most once per
// min(TombstoneTTL, 10m). It runs after the batch committed, in its own
// transactions; a failure is logged and retried later.
func (s *Sink) purge(ctx context.Context) {
	cutoff, ok := s.purger.Due(s.now())
	if !ok {
		return
	}
	for t := range s.tables {
		if !s.purger.Allowed(t, cutoff) {
			continue // its snapshot is not over: a late row must meet the tombstone
		}
		res, err := s.conn.ExecContext(ctx, "DELETE FROM "+s.qualified(t)+" WHERE "+quote(colDeleted)+
			" AND "+quote(colUpdatedAt)+" < ?", cutoff)
		if err != nil {
			s.log.Warn("tombstone purge failed", zap.String("table", t), zap.Error(err))
			continue
		}
		if n, _ := res.RowsAffected(); n > 0 {
			s.log.Info("tombstones purged", zap.String("table", t), zap.Int64("rows", n))
		}
	}
}

// Rows returns the live (not deleted) rows of a source table, with values
// aligned with table.Columns in the record model's value types (columns
// the target lacks read as nil), in no particular order: what Scan yields,
// collected. It is a verification helper; an absent target table has no
// rows.
func (s *Sink) Rows(ctx context.Context, table *pipeline.Table) ([][]any, error) {
	var out [][]any
	if err := s.Scan(ctx, table, func(row []any) error {
		out = append(out, row)
		return nil
	}); err != nil {
		return nil, err
	}
	return out, nil
}

// Scan implements verify.Scanner: it calls row for every live (not
// deleted) row of a source table, aligned with table.Columns as Rows
// aligns them, in no particular order; row owns the slice it gets. The
// rows stream from one query, read as DuckDB produces them, so memory
// does not grow with the table. The query holds the sink's lock and its
// one connection until the read is done: Writes wait for the scan, and
// row must not call into the sink. It returns the first error of row,
// honours ctx between rows, and an absent target table has no rows.
func (s *Sink) Scan(ctx context.Context, table *pipeline.Table, row func([]any) error) error {
	return s.scanRows(ctx, table, "NOT "+quote(colDeleted), nil, row)
}

// keyGroup is the most keys one RowsByKey query looks up: a one-column
// key's IN list of that many values stays below DuckDB's
// index_scan_max_count (2048), so DuckDB answers it from the primary
// key's index.
const keyGroup = 1000

// RowsByKey implements verify.KeyReader: it returns the live rows the
// target holds among keys (each key's values in table.KeyIdx order),
// aligned with table.Columns as Rows aligns them, each at most once;
// tombstones (deleted and truncated rows) and keys never written are
// absent, and so are keys with a value the sink could not have written (a
// NULL, a value of another type or out of the column's range). Key values
// are bound as Write binds them. It queries keyGroup keys at a time, each
// query under the sink's lock: it waits for a running Write (the sink has
// one connection) and sees only committed writes, and Writes run between
// its queries. It honours ctx once it holds the lock. A one-column key is
// looked up in the primary key's index; DuckDB has no index lookup for a
// compound key, so that one is matched as a semi-join (a scan of the key
// columns).
func (s *Sink) RowsByKey(ctx context.Context, table *pipeline.Table, keys [][]any) ([][]any, error) {
	if len(table.KeyIdx) == 0 {
		return nil, fmt.Errorf("duckdb sink: table %s has no key", table.ID)
	}
	var out [][]any
	var tuples []string
	var args []any
	flush := func() error {
		if len(tuples) == 0 {
			return nil
		}
		err := s.scanRows(ctx, table, keyCondition(table, tuples), args, func(row []any) error {
			out = append(out, row)
			return nil
		})
		tuples, args = tuples[:0], nil
		return err
	}
	seen := make(map[string]bool, len(keys))
	for _, key := range keys {
		tuple, targs, ok, err := keyParams(table, key)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		id := fmt.Sprintf("%#v", targs) // the values as bound: each distinct key once
		if seen[id] {
			continue
		}
		seen[id] = true
		tuples, args = append(tuples, tuple), append(args, targs...)
		if len(tuples) == keyGroup {
			if err := flush(); err != nil {
				return nil, err
			}
		}
	}
	if err := flush(); err != nil {
		return nil, err
	}
	return out, nil
}

// keyParams returns the SQL tuple of a key's values and its parameters,
// each value converted as Write converts it (param). ok is false when the
// sink cannot hold one of the values: no row has that key.
func keyParams(table *pipeline.Table, key []any) (tuple string, args []any, ok bool, err error) {
	if len(key) != len(table.KeyIdx) {
		return "", nil, false, fmt.Errorf("duckdb sink: a key of %d values for table %s, which has %d key columns",
			len(key), table.ID, len(table.KeyIdx))
	}
	exprs := make([]string, len(key))
	for i, idx := range table.KeyIdx {
		if key[i] == nil {
			return "", nil, false, nil
		}
		expr, a, err := param(&table.Columns[idx], key[i])
		if errors.Is(err, errValue) {
			return "", nil, false, nil
		}
		if err != nil {
			return "", nil, false, err
		}
		exprs[i], args = expr, append(args, a...)
	}
	return strings.Join(exprs, ", "), args, true, nil
}

// keyCondition is the SQL condition on the target's key columns that
// matches the keys of tuples (keyParams). It is an IN list for a one-column
// key, which DuckDB turns into an index scan, and a semi-join with the
// list of tuples for a compound key.
func keyCondition(table *pipeline.Table, tuples []string) string {
	cols := make([]string, len(table.KeyIdx))
	for i, idx := range table.KeyIdx {
		cols[i] = quote(table.Columns[idx].Name)
	}
	if len(cols) == 1 {
		return cols[0] + " IN (" + strings.Join(tuples, ", ") + ")"
	}
	return "(" + strings.Join(cols, ", ") + ") IN (SELECT * FROM (VALUES (" + strings.Join(tuples, "), (") + ")))"
}

// scanRows calls fn for each of the target's live rows of table that
// match where (an SQL condition with args), in no particular order, with
// values aligned with table.Columns in the record model's value types
// (columns the target lacks read as nil); fn owns the slice it gets. It
// drops the tombstones the query returns: Scan also filters them out in
// where, RowsByKey cannot (a condition on a column other than the key
// keeps DuckDB from an index scan). It holds the sink's lock until the
// rows are read (fn included), returns the first error of fn and checks
// ctx before each row; an absent target table has no rows.
func (s *Sink) scanRows(ctx context.Context, table *pipeline.Table, where string, args []any, fn func([]any) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.ready(ctx, "read"); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	target := s.targetName(table.ID)
	have, ok := s.tables[strings.ToLower(target)]
	if !ok {
		return nil
	}
	exprs := make([]string, len(table.Columns), len(table.Columns)+1)
	// comp holds, per column with a companion (companion.go), the index
	// of the companion's expression.
	comp := map[int]int{}
	for i := range table.Columns {
		c := &table.Columns[i]
		if _, ok := have[strings.ToLower(c.Name)]; !ok {
			exprs[i] = "NULL"
			continue
		}
		exprs[i] = quote(c.Name)
		if ct := typeOf(c); ct.read != nil {
			exprs[i] = ct.read(quote(c.Name))
		}
	}
	for i := range table.Columns {
		if name := companionColumn(table.Columns[i].Name); hasCompanion(&table.Columns[i]) {
			if _, ok := have[strings.ToLower(name)]; ok {
				comp[i] = len(exprs)
				exprs = append(exprs, quote(name))
			}
		}
	}
	del := len(exprs)
	exprs = append(exprs, quote(colDeleted))
	q := "SELECT " + strings.Join(exprs, ", ") + " FROM " + s.qualified(target) + " WHERE " + where
	rows, err := s.conn.QueryContext(ctx, q, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	n := len(table.Columns)
	ptrs := make([]any, len(exprs))
	for rows.Next() {
		if err := ctx.Err(); err != nil {
			return err
		}
		raw := make([]any, len(exprs)) // a new slice per row: fn owns it
		for i := range raw {
			ptrs[i] = &raw[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return err
		}
		if deleted, _ := raw[del].(bool); deleted {
			continue
		}
		row := raw[:n:n]
		for i := range row {
			if j, ok := comp[i]; ok {
				row[i], err = readCompanion(&table.Columns[i], row[i], raw[j])
			} else {
				row[i], err = fromRead(&table.Columns[i], row[i])
			}
			if err != nil {
				return err
			}
		}
		if err := fn(row); err != nil {
			return err
		}
	}
	return rows.Err()
}

// targetName is the target table of a source table.
func (s *Sink) targetName(id pipeline.TableID) string { return id.Name(s.opts.TableTemplate) }

func (s *Sink) qualified(table string) string { return quote(s.opts.Schema) + "." + quote(table) }
