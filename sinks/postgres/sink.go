package postgres

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/zap"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/sinks/upsert"
	pgsrc "github.com/sluice-cdc/sluice/sources/postgres"
)

// Options configures a Sink.
type Options struct {
	// Name identifies the sink in logs.
	Name string
	// DSN is the target database's connection string (URL or key=value).
	DSN string
	// Schema holds the target tables ("public" when empty); it is created
	// when absent.
	Schema string
	// HardDelete removes tombstone rows physically once they are older than
	// TombstoneTTL. Without it tombstones are kept forever (soft delete).
	HardDelete bool
	// TombstoneTTL is how long a tombstone is kept in HardDelete mode;
	// zero keeps tombstones forever. It must exceed the longest replay
	// horizon: a record older than a purged tombstone could bring its row
	// back.
	TombstoneTTL time.Duration
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

// Sink writes change records into a Postgres database, one target table
// per source table, idempotently (Invariant 4). It implements
// pipeline.Sink. A Sink is safe for concurrent use; Write calls are
// serialized over one connection.
type Sink struct {
	opts Options
	log  *zap.Logger
	now  func() time.Time

	mu   sync.Mutex
	open bool
	conn *pgx.Conn
	// tables maps a target table name to its columns (lower-case name →
	// Postgres type), as they exist in the database.
	tables map[string]map[string]string
	// barriers maps a target table name to its truncate barrier: records
	// with a lower version are ignored.
	barriers map[string]pipeline.Version
	// gen is the generation recorded in generationTable.
	gen    upsert.Generation
	purger upsert.Purge
	// direct is the bulk-load state of each target table (see direct.go).
	direct upsert.BulkPaths
}

var _ pipeline.Sink = (*Sink)(nil)

// New returns an unopened Sink. A nil logger logs nothing.
func New(opts Options, log *zap.Logger) *Sink {
	if opts.Schema == "" {
		opts.Schema = "public"
	}
	if opts.Name == "" {
		opts.Name = "postgres"
	}
	if opts.TableTemplate == "" {
		opts.TableTemplate = "{schema}_{table}"
	}
	if log == nil {
		log = zap.NewNop()
	}
	return &Sink{opts: opts, log: log.With(zap.String("sink", opts.Name)), now: time.Now,
		purger: upsert.Purge{HardDelete: opts.HardDelete, TTL: opts.TombstoneTTL}}
}

// Open connects, creates the schema and the barrier table, and loads what
// already exists. It may be retried; opening an open Sink does nothing.
func (s *Sink) Open(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open {
		return nil
	}
	if s.opts.DSN == "" {
		return pipeline.Fatal(errors.New("postgres sink: dsn is required"))
	}
	if _, err := pgx.ParseConfig(s.opts.DSN); err != nil {
		return pipeline.Fatal(fmt.Errorf("postgres sink: dsn: %w", err))
	}
	if err := s.connect(ctx); err != nil {
		return err
	}
	s.open = true
	s.log.Info("postgres sink open", zap.String("schema", s.opts.Schema), zap.Int("tables", len(s.tables)))
	return nil
}

// connect (re)establishes the connection and reloads the target's state.
func (s *Sink) connect(ctx context.Context) error {
	cfg, err := pgx.ParseConfig(s.opts.DSN)
	if err != nil {
		return pipeline.Fatal(fmt.Errorf("postgres sink: dsn: %w", err))
	}
	// Pin the settings the text forms written and read back depend on.
	maps.Copy(cfg.RuntimeParams, pgsrc.SessionSettings)
	// Every batch stages into freshly created temporary tables: cached
	// statements and descriptions (CopyFrom's included) would outlive them.
	cfg.DefaultQueryExecMode = pgx.QueryExecModeExec
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("postgres sink: connect: %w", err)
	}
	setup := []string{
		"CREATE TABLE IF NOT EXISTS " + s.qualified(barrierTable) + " (target text PRIMARY KEY, version bytea NOT NULL)",
		"CREATE TABLE IF NOT EXISTS " + s.qualified(snapshotTable) + " (target text PRIMARY KEY, snapshot_at timestamptz NOT NULL)",
		"CREATE TABLE IF NOT EXISTS " + s.qualified(generationTable) + " (one boolean PRIMARY KEY DEFAULT true CHECK (one), generation numeric(20) NOT NULL)",
	}
	// CREATE SCHEMA IF NOT EXISTS needs CREATE on the database even when
	// the schema exists: create it only when it is missing.
	var exists bool
	if err = conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)", s.opts.Schema).Scan(&exists); err == nil && !exists {
		setup = append([]string{"CREATE SCHEMA IF NOT EXISTS " + quote(s.opts.Schema)}, setup...)
	}
	for _, q := range setup {
		if err != nil {
			break
		}
		if _, err = conn.Exec(ctx, q); err != nil {
			break
		}
	}
	s.conn = conn
	if err == nil {
		err = s.load(ctx)
	}
	if err != nil {
		conn.Close(context.Background())
		s.conn = nil
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "42501" {
			// No retry can grant a privilege: say what to run.
			return pipeline.Fatal(fmt.Errorf("postgres sink: prepare schema %s: %w; as the database owner or a superuser run "+
				"`GRANT CREATE ON DATABASE %s TO %s;` (when the schema does not exist yet) and `GRANT USAGE, CREATE ON SCHEMA %s TO %s;`",
				s.opts.Schema, err, quote(cfg.Database), quote(cfg.User), quote(s.opts.Schema), quote(cfg.User)))
		}
		return fmt.Errorf("postgres sink: prepare schema %s: %w", s.opts.Schema, err)
	}
	return nil
}

// Close releases the connection; Write already made everything durable.
func (s *Sink) Close(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.open = false
	if s.conn == nil {
		return nil
	}
	err := s.conn.Close(ctx)
	s.conn = nil
	return err
}

// ready reconnects after a lost connection.
func (s *Sink) ready(ctx context.Context) error {
	if !s.open {
		return errors.New("postgres sink: used before open")
	}
	if s.conn != nil && !s.conn.IsClosed() {
		return nil
	}
	s.conn = nil
	return s.connect(ctx)
}

// load reads the existing target tables' columns and the barriers.
func (s *Sink) load(ctx context.Context) error {
	tables := map[string]map[string]string{}
	rows, err := s.conn.Query(ctx, `SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod)
		FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relkind IN ('r', 'p') AND a.attnum > 0 AND NOT a.attisdropped`, s.opts.Schema)
	if err != nil {
		return err
	}
	for rows.Next() {
		var t, c, typ string
		if err := rows.Scan(&t, &c, &typ); err != nil {
			rows.Close()
			return err
		}
		if t == barrierTable || t == snapshotTable || t == generationTable {
			continue
		}
		if tables[t] == nil {
			tables[t] = map[string]string{}
		}
		tables[t][strings.ToLower(c)] = typ
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	barriers := map[string]pipeline.Version{}
	rows, err = s.conn.Query(ctx, "SELECT target, version FROM "+s.qualified(barrierTable))
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
		barriers[t] = v
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	var gen string
	switch err := s.conn.QueryRow(ctx, "SELECT generation::text FROM "+s.qualified(generationTable)).Scan(&gen); {
	case errors.Is(err, pgx.ErrNoRows):
		s.gen = upsert.Generation{}
	case err != nil:
		return err
	default:
		g, err := strconv.ParseUint(gen, 10, 64)
		if err != nil {
			return fmt.Errorf("%s: %w", generationTable, err)
		}
		s.gen = upsert.Generation{Gen: g, Held: true}
	}
	stamps := map[string]time.Time{}
	rows, err = s.conn.Query(ctx, "SELECT target, snapshot_at FROM "+s.qualified(snapshotTable))
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
		stamps[t] = at
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	s.tables, s.barriers = tables, barriers
	s.purger.Load(stamps)
	return nil
}

// stampSnapshots stores when records' tables last received a snapshot
// record, before the records are written (see upsert.Purge).
func (s *Sink) stampSnapshots(ctx context.Context, records []pipeline.Record) error {
	now := s.now()
	targets := s.purger.Stamps(records, s.targetName, now)
	for _, t := range targets {
		if _, err := s.conn.Exec(ctx, "INSERT INTO "+s.qualified(snapshotTable)+" (target, snapshot_at) VALUES ($1, $2)"+
			" ON CONFLICT (target) DO UPDATE SET snapshot_at = EXCLUDED.snapshot_at", t, now); err != nil {
			return fmt.Errorf("snapshot time of %s: %w", t, err)
		}
	}
	s.purger.Stamped(targets, now)
	return nil
}

// Write applies records in one Postgres transaction and returns once it is
// committed (durable). Records Postgres cannot hold fail permanently and
// Generation implements pipeline.GenerationKeeper.
func (s *Sink) Generation(ctx context.Context) (uint64, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.ready(ctx); err != nil {
		return 0, false, err
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
	if _, err := s.conn.Exec(ctx, "INSERT INTO "+s.qualified(generationTable)+" AS g (generation) VALUES ($1::numeric)"+
		" ON CONFLICT (one) DO UPDATE SET generation = GREATEST(g.generation, EXCLUDED.generation)",
		strconv.FormatUint(g, 10)); err != nil {
		return fmt.Errorf("record generation %d: %w", g, err)
	}
	s.gen = upsert.Generation{Gen: g, Held: true}
	return nil
}

// are reported in a *pipeline.BatchError; the others are applied.
func (s *Sink) Write(ctx context.Context, records []pipeline.Record) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.ready(ctx); err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		return err
	}
	if err := s.recordGeneration(ctx, records); err != nil {
		s.afterFailure()
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		return fmt.Errorf("postgres sink: %w", err)
	}
	if err := s.stampSnapshots(ctx, records); err != nil {
		s.afterFailure()
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		return fmt.Errorf("postgres sink: %w", err)
	}
	if bulk, rest := upsert.SplitBulk(records); bulk != nil {
		done, err := s.streamNew(ctx, bulk)
		if err != nil {
			s.afterFailure()
			if cerr := ctx.Err(); cerr != nil {
				return cerr
			}
			return fmt.Errorf("postgres sink: %w", err)
		}
		if done && len(rest) == 0 {
			s.purge(ctx)
			return nil
		}
		if done {
			records = rest
		}
	}
	batches, failed := s.prepare(records)
	// The runtime logs and counts each failed record as it dead-letters
	// it (Invariant 9).
	if len(batches) > 0 {
		err := s.apply(ctx, batches)
		if err != nil {
			s.afterFailure()
		}
		te := tableError(ctx, err, s.conn != nil) // afterFailure dropped a closed connection
		if te != nil {
			err = te // the runtime quarantines the table; no record is to blame
		}
		if err != nil && te == nil && isDataError(err) && s.conn != nil {
			// A value the target refuses (a CHECK, a narrower
			// pre-created column): find the records to blame.
			err = s.isolate(ctx, records, failed, &failed)
			slices.SortFunc(failed, func(a, b pipeline.RecordError) int { return a.Index - b.Index })
		}
		if err != nil {
			if cerr := ctx.Err(); cerr != nil {
				return cerr
			}
			return fmt.Errorf("postgres sink: %w", err)
		}
	}
	s.purge(ctx)
	if len(failed) > 0 {
		return &pipeline.BatchError{Failed: failed}
	}
	return nil
}

// purge removes expired tombstones in HardDelete mode, at most once per
// min(TombstoneTTL, 10m), after the batch committed; a failure is logged
// and retried later.
func (s *Sink) purge(ctx context.Context) {
	cutoff, ok := s.purger.Due(s.now())
	if !ok {
		return
	}
	for t := range s.tables {
		if !s.purger.Allowed(t, cutoff) {
			continue // its snapshot is not over: a late row must meet the tombstone
		}
		tag, err := s.conn.Exec(ctx, "DELETE FROM "+s.qualified(t)+" WHERE "+quote(colDeleted)+
			" AND "+quote(colUpdatedAt)+" < $1", cutoff)
		if err != nil {
			s.log.Warn("tombstone purge failed", zap.String("table", t), zap.Error(err))
			continue
		}
		if n := tag.RowsAffected(); n > 0 {
			s.log.Info("tombstones purged", zap.String("table", t), zap.Int64("rows", n))
		}
	}
}

// Rows returns the live (not deleted) rows of a source table, ordered by
// key, with values aligned with table.Columns in the record model's value
// types (columns the target lacks read as nil). It is a verification
// helper; an absent target table has no rows.
func (s *Sink) Rows(ctx context.Context, table *pipeline.Table) ([][]any, error) {
	var out [][]any
	err := s.Scan(ctx, table, func(row []any) error { out = append(out, row); return nil })
	return out, err
}

// Scan streams the rows Rows returns (verify.Scanner). It holds the
// sink's lock for the whole read, so writes wait for it; row must not
// call back into the sink.
func (s *Sink) Scan(ctx context.Context, table *pipeline.Table, row func([]any) error) error {
	return s.rowsWhere(ctx, table, nil, row)
}

// RowsByKey returns the live rows among keys as Rows returns rows
// (verify.KeyReader). It takes the sink's lock, so it waits for a write
// in progress and the next write waits for it.
func (s *Sink) RowsByKey(ctx context.Context, table *pipeline.Table, keys [][]any) ([][]any, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	var out [][]any
	err := s.rowsWhere(ctx, table, keys, func(row []any) error { out = append(out, row); return nil })
	return out, err
}

// rowsWhere reads the live rows of table for fn, all of them when keys is
// nil.
func (s *Sink) rowsWhere(ctx context.Context, table *pipeline.Table, keys [][]any, fn func([]any) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.ready(ctx); err != nil {
		return err
	}
	target := s.targetName(table.ID)
	have, ok := s.tables[target]
	if !ok {
		return nil
	}
	exprs := make([]string, len(table.Columns))
	infos := make([]pgsrc.ColumnInfo, len(table.Columns))
	for i := range table.Columns {
		c := &table.Columns[i]
		infos[i] = readInfo(c)
		if _, ok := have[strings.ToLower(c.Name)]; !ok {
			exprs[i] = "NULL"
			continue
		}
		exprs[i] = quote(c.Name) + "::text"
	}
	// The key columns are qualified: ORDER BY names an output column
	// first, and the select list holds each column cast to text.
	order := make([]string, 0, len(table.KeyIdx))
	for _, k := range table.KeyIdx {
		order = append(order, s.qualified(target)+"."+quote(table.Columns[k].Name))
	}
	where := "NOT " + quote(colDeleted)
	var args []any
	if keys != nil {
		match, a, err := keyMatch(table, keys)
		if err != nil {
			return err
		}
		where, args = where+" AND ("+match+")", a
	}
	q := "SELECT " + strings.Join(exprs, ", ") + " FROM " + s.qualified(target) + " WHERE " + where
	if len(order) > 0 {
		q += " ORDER BY " + strings.Join(order, ", ")
	}
	if len(exprs) == 0 {
		q = "SELECT FROM " + s.qualified(target) + " WHERE " + where
	}
	rows, err := s.conn.Query(ctx, q, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		raw := rows.RawValues()
		row := make([]any, len(table.Columns))
		for i := range row {
			if raw[i] == nil {
				continue
			}
			if row[i], err = fromText(&table.Columns[i], infos[i], raw[i]); err != nil {
				return err
			}
		}
		if err := fn(row); err != nil {
			return err
		}
	}
	return rows.Err()
}

// keyMatch is a condition matching any of keys, each value staged and cast
// to its column's type as writes stage them.
func keyMatch(table *pipeline.Table, keys [][]any) (string, []any, error) {
	if len(table.KeyIdx) == 0 {
		return "", nil, fmt.Errorf("table %s has no key", table.ID)
	}
	var or []string
	var args []any
	for _, key := range keys {
		if len(key) != len(table.KeyIdx) {
			return "", nil, fmt.Errorf("table %s: a key of %d values for %d key columns", table.ID, len(key), len(table.KeyIdx))
		}
		and := make([]string, len(key))
		for i, idx := range table.KeyIdx {
			c := &table.Columns[idx]
			v, err := toStage(c, key[i])
			if err != nil {
				return "", nil, fmt.Errorf("table %s key column %s: %w", table.ID, c.Name, err)
			}
			args = append(args, v)
			ct := typeOf(c)
			and[i] = quote(c.Name) + " = " + ct.cast("$"+strconv.Itoa(len(args))+"::"+ct.stage)
		}
		or = append(or, "("+strings.Join(and, " AND ")+")")
	}
	return strings.Join(or, " OR "), args, nil
}

// targetName is the target table of a source table.
func (s *Sink) targetName(id pipeline.TableID) string { return id.Name(s.opts.TableTemplate) }

func (s *Sink) qualified(table string) string { return quote(s.opts.Schema) + "." + quote(table) }
