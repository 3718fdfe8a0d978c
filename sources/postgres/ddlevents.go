package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/zap"

	"github.com/sluice-cdc/sluice/pipeline"
)

// Table rewrites. ALTER TABLE … ALTER COLUMN … TYPE … USING and ADD COLUMN
// … DEFAULT with a volatile default (gen_random_uuid(), clock_timestamp())
// write every row of the table anew, and logical decoding sends no change
// for them: the sinks would keep the old values, and NULL in the new
// column, for good. An event trigger on table_rewrite therefore emits, in
// the rewriting transaction, a transactional logical message naming the
// table (RewritePrefix); the decoder turns it into an OpRewrite record at
// the transaction's place in the stream, and the snapshot engine reads
// the table again (pipeline.OpRewrite).
//
// A DROP TABLE sends nothing either, and a table created again under the
// name would leave the old one's rows in the sinks for good (DROP, CREATE,
// INSERT: a reload). A second event trigger, on sql_drop, emits a
// transactional message naming each dropped table (DropPrefix); the
// decoder turns one that names a captured table into an OpTruncate at the
// DROP's place in the stream, so the sinks let go of its rows there, below
// every change of a table created after it.
//
// A column renamed (ALTER TABLE … RENAME [COLUMN] a TO b) moves every
// row's value to a column the sinks never held a value of, and an enum
// label renamed (ALTER TYPE … RENAME VALUE) or a composite type's
// attribute added or dropped (ALTER TYPE … ADD/DROP ATTRIBUTE … CASCADE)
// changes the value of every row that holds one, again with no change
// event: a third trigger, at the end of an ALTER TABLE or ALTER TYPE,
// announces each table one of whose columns it renamed, or that has a
// column of the type, with the same message as a rewrite, and the table
// is read again.
//
// The triggers and their functions (EventTriggerSQL) are one per database,
// shared by every pipeline reading it. They fire under every
// session_replication_role (ENABLE ALWAYS): a tool that loads or alters
// tables as a replica (pgcopydb, pg_restore into a live database) changes
// them all the same. Creating an event trigger takes a
// superuser: the source creates those absent when its role is one, and
// otherwise says what to run. The functions run with their owner's rights
// and never fail the DDL that fired them.

// RewritePrefix is the prefix of the logical messages of table rewrites,
// DropPrefix of dropped tables.
const (
	RewritePrefix = "sluice.rewrite"
	DropPrefix    = "sluice.drop"
)

// eventTrigger is one of the source's event triggers: its name and the
// statements that create its function and itself.
type eventTrigger struct {
	name string
	sql  []string
}

var eventTriggers = []eventTrigger{
	{"sluice_table_rewrite", []string{
		`CREATE OR REPLACE FUNCTION public.sluice_table_rewrite() RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $$
BEGIN
  PERFORM pg_logical_emit_message(true, '` + RewritePrefix + `',
    (SELECT json_build_array(n.nspname, c.relname)::text FROM pg_class c
       JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = pg_event_trigger_table_rewrite_oid()));
EXCEPTION WHEN OTHERS THEN
  RAISE WARNING 'sluice: table rewrite not announced to change data capture: %', SQLERRM;
END $$`,
		`CREATE EVENT TRIGGER sluice_table_rewrite ON table_rewrite EXECUTE FUNCTION public.sluice_table_rewrite()`,
		`ALTER EVENT TRIGGER sluice_table_rewrite ENABLE ALWAYS`}},
	{"sluice_table_drop", []string{
		`CREATE OR REPLACE FUNCTION public.sluice_table_drop() RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $$
BEGIN
  PERFORM pg_logical_emit_message(true, '` + DropPrefix + `', json_build_array(o.schema_name, o.object_name)::text)
    FROM pg_event_trigger_dropped_objects() o WHERE o.object_type = 'table' AND NOT o.is_temporary;
EXCEPTION WHEN OTHERS THEN
  RAISE WARNING 'sluice: table drop not announced to change data capture: %', SQLERRM;
END $$`,
		`CREATE EVENT TRIGGER sluice_table_drop ON sql_drop EXECUTE FUNCTION public.sluice_table_drop()`,
		`ALTER EVENT TRIGGER sluice_table_drop ENABLE ALWAYS`}},
	{"sluice_rename", []string{
		`CREATE OR REPLACE FUNCTION public.sluice_rename() RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $$
BEGIN
  PERFORM pg_logical_emit_message(true, '` + RewritePrefix + `', json_build_array(n.nspname, c.relname)::text)
    FROM (SELECT DISTINCT objid FROM pg_event_trigger_ddl_commands()
          WHERE object_type = 'table column' AND classid = 'pg_class'::regclass) d
    JOIN pg_class c ON c.oid = d.objid JOIN pg_namespace n ON n.oid = c.relnamespace;
  -- Types whose values read differently now: an enum's label renamed
  -- (ALTER TYPE … RENAME VALUE, which the command list does not tell
  -- from ADD VALUE) or a composite's attribute added or dropped; the
  -- tables with a column of one, of an array of one or of a domain over
  -- one.
  PERFORM pg_logical_emit_message(true, '` + RewritePrefix + `', json_build_array(n.nspname, c.relname)::text)
    FROM (SELECT DISTINCT a.attrelid
          FROM (SELECT t.oid, t.typarray FROM pg_event_trigger_ddl_commands() d JOIN pg_type t
                  ON d.classid = 'pg_type'::regclass AND t.oid = d.objid AND t.typtype = 'e' AND current_query() ~* 'rename\s+value'
                  OR d.classid = 'pg_class'::regclass AND d.object_type = 'composite type' AND t.typrelid = d.objid) x
          JOIN pg_type ty ON ty.oid = x.oid OR ty.oid = x.typarray OR ty.typbasetype = x.oid
          JOIN pg_attribute a ON a.atttypid = ty.oid AND a.attnum > 0 AND NOT a.attisdropped) r
    JOIN pg_class c ON c.oid = r.attrelid AND c.relkind IN ('r', 'p')
    JOIN pg_namespace n ON n.oid = c.relnamespace;
EXCEPTION WHEN OTHERS THEN
  RAISE WARNING 'sluice: rename not announced to change data capture: %', SQLERRM;
END $$`,
		`CREATE EVENT TRIGGER sluice_rename ON ddl_command_end WHEN TAG IN ('ALTER TABLE', 'ALTER TYPE') EXECUTE FUNCTION public.sluice_rename()`,
		`ALTER EVENT TRIGGER sluice_rename ENABLE ALWAYS`}},
}

// EventTriggerSQL creates the functions and the event triggers, for a
// superuser to run on the primary when the source cannot (a role that is
// not one, or a source reading a standby).
func EventTriggerSQL() []string {
	var out []string
	for _, t := range eventTriggers {
		out = append(out, t.sql...)
	}
	return out
}

// ensureEventTriggers creates the event triggers that are absent when the
// role may; otherwise it logs what a superuser should run (Invariant 9:
// without them a rewrite leaves the sinks stale, and a dropped table's
// rows stay in them).
func (s *Source) ensureEventTriggers(ctx context.Context) error {
	var super bool
	if err := s.pool.QueryRow(ctx, `SELECT rolsuper FROM pg_roles WHERE rolname = current_user`).Scan(&super); err != nil {
		return fmt.Errorf("postgres source: look for the event triggers: %w", err)
	}
	var missing []string
	for _, t := range eventTriggers {
		// evtenabled: A always, O and R in some sessions, D disabled.
		var enabled string
		if err := s.pool.QueryRow(ctx, `SELECT coalesce((SELECT evtenabled::text FROM pg_event_trigger WHERE evtname = $1), '')`,
			t.name).Scan(&enabled); err != nil {
			return fmt.Errorf("postgres source: look for event trigger %s: %w", t.name, err)
		}
		if super && !s.standby {
			// The function first: CREATE OR REPLACE keeps its body that of
			// this version.
			stmts := []string{t.sql[0]}
			switch enabled {
			case "":
				stmts = t.sql
			case "A":
			default:
				stmts = append(stmts, t.sql[len(t.sql)-1]) // ENABLE ALWAYS: one an earlier version made, or disabled
			}
			err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
				for _, stmt := range stmts {
					if _, err := tx.Exec(ctx, stmt); err != nil {
						return err
					}
				}
				return nil
			})
			var pe *pgconn.PgError
			if err == nil || errors.As(err, &pe) && pe.Code == "42710" { // duplicate_object: another pipeline made it
				if enabled != "A" {
					s.log.Info("created or enabled an event trigger that announces what logical decoding does not send", zap.String("trigger", t.name))
				}
				continue
			}
			s.log.Warn("an event trigger could not be created", zap.String("trigger", t.name), zap.Error(err))
		}
		if enabled == "" || enabled == "D" {
			missing = append(missing, t.sql...)
		}
	}
	if len(missing) > 0 {
		s.log.Warn("table rewrites, renames or drops are not announced: ALTER TABLE … ALTER COLUMN … TYPE … USING, ADD COLUMN with a volatile "+
			"DEFAULT, RENAME COLUMN, ALTER TYPE … RENAME VALUE or ADD/DROP ATTRIBUTE would change rows with no change event and leave the sinks stale, and a dropped "+
			"table's rows would stay in the sinks. As a superuser, on the primary, run: "+strings.Join(missing, "; ")+";", zap.String("database", s.database))
	}
	return nil
}

// rewriteRecord is the OpRewrite record of a rewrite message, nil when the
// message names no table.
func (d *Decoder) rewriteRecord(m *pglogrepl.LogicalDecodingMessage) *pipeline.Record {
	id, ok := d.messageTable(m)
	if !ok {
		return nil
	}
	d.log.Info("table rewritten without change events", zap.Stringer("table", id), zap.Stringer("lsn", m.LSN))
	return &pipeline.Record{Op: pipeline.OpRewrite, Table: &pipeline.Table{ID: id}}
}

// loadStartShapes reads the captured tables' shapes, for the truncates of
// tables dropped before the stream decodes a change of them. A table that
// does not exist has none.
func (s *Source) loadStartShapes(ctx context.Context) error {
	s.startShapes = map[pipeline.TableID]*pipeline.Table{}
	for _, t := range s.tables {
		sh, err := LoadTableShape(ctx, s.pool, s.database, t)
		if errors.Is(err, ErrTableNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("postgres source: read the shape of %s: %w", tableName(t), err)
		}
		s.startShapes[pipeline.TableID{Database: s.database, Schema: t.Schema, Table: t.Name}] = sh.Table
	}
	return nil
}

// dropRecord is the OpTruncate record of a drop message naming a captured
// table, nil for another table. Its shape is the newest the stream decoded
// of the table, else the one the source read at start (StartShapes); a
// captured table with neither (dropped before the source started, its DROP
// replayed from a checkpoint) keeps its rows in the sinks, with a warning.
func (d *Decoder) dropRecord(m *pglogrepl.LogicalDecodingMessage) *pipeline.Record {
	id, ok := d.messageTable(m)
	if !ok {
		return nil
	}
	d.mu.Lock()
	s := d.latest[id]
	d.mu.Unlock()
	t := d.opts.StartShapes[id]
	if s != nil {
		t = s.Table
	}
	if t == nil {
		if slices.Contains(d.opts.Tables, id) {
			d.log.Warn("a captured table was dropped, but its shape is unknown (it was dropped before the source started): "+
				"the sinks keep its rows; `sluice verify --repair` removes them once a table of that name exists again",
				zap.Stringer("table", id), zap.Stringer("lsn", m.LSN))
		}
		return nil
	}
	d.log.Warn("a captured table was dropped; the sinks remove its rows", zap.Stringer("table", id), zap.Stringer("lsn", m.LSN))
	return &pipeline.Record{Op: pipeline.OpTruncate, Table: t}
}

// messageTable is the table a trigger's message names ([schema, name]);
// false, with a warning, when the content is not that.
func (d *Decoder) messageTable(m *pglogrepl.LogicalDecodingMessage) (pipeline.TableID, bool) {
	var name []string
	if err := json.Unmarshal(m.Content, &name); err != nil || len(name) != 2 {
		d.log.Warn("event trigger message not understood", zap.String("prefix", m.Prefix), zap.ByteString("content", m.Content))
		return pipeline.TableID{}, false
	}
	return pipeline.TableID{Database: d.opts.Database, Schema: name[0], Table: name[1]}, true
}
