package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

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
// The trigger and its function (RewriteTriggerSQL) are one per database, shared
// by every pipeline reading it. Creating an event trigger takes a
// superuser: the source creates them when its role is one and they are
// absent, and otherwise says what to run. The function runs with its
// owner's rights and never fails the DDL that fired it.

// RewritePrefix is the prefix of the logical messages of table rewrites.
const RewritePrefix = "sluice.rewrite"

// RewriteTriggerSQL creates the function and the event trigger, for a
// superuser to run on the primary when the source cannot (a role that is
// not one, or a source reading a standby).
var RewriteTriggerSQL = []string{
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
}

// ensureRewriteTrigger creates the event trigger when it is absent and the
// role may; otherwise it logs what a superuser should run (Invariant 9:
// without it a rewrite leaves the sinks stale).
func (s *Source) ensureRewriteTrigger(ctx context.Context) error {
	var exists, super bool
	err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_event_trigger WHERE evtname = 'sluice_table_rewrite' AND evtenabled <> 'D'),
		(SELECT rolsuper FROM pg_roles WHERE rolname = current_user)`).Scan(&exists, &super)
	if err != nil {
		return fmt.Errorf("postgres source: look for the table rewrite trigger: %w", err)
	}
	if exists {
		return nil
	}
	if super && !s.standby {
		err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			for _, stmt := range RewriteTriggerSQL {
				if _, err := tx.Exec(ctx, stmt); err != nil {
					return err
				}
			}
			return nil
		})
		var pe *pgconn.PgError
		if err == nil || errors.As(err, &pe) && pe.Code == "42710" { // duplicate_object: another pipeline made it
			s.log.Info("created the event trigger that announces table rewrites", zap.String("trigger", "sluice_table_rewrite"))
			return nil
		}
		s.log.Warn("the event trigger that announces table rewrites could not be created", zap.Error(err))
	}
	s.log.Warn("table rewrites are not announced: ALTER TABLE … ALTER COLUMN … TYPE … USING, or ADD COLUMN with a volatile "+
		"DEFAULT, would change every row with no change event and leave the sinks stale. As a superuser, on the primary, run: "+
		RewriteTriggerSQL[0]+"; "+RewriteTriggerSQL[1]+";", zap.String("database", s.database))
	return nil
}

// rewriteRecord is the OpRewrite record of a rewrite message, nil when the
// message names no table.
func (d *Decoder) rewriteRecord(m *pglogrepl.LogicalDecodingMessage) *pipeline.Record {
	var name []string
	if err := json.Unmarshal(m.Content, &name); err != nil || len(name) != 2 {
		d.log.Warn("table rewrite message not understood", zap.ByteString("content", m.Content))
		return nil
	}
	id := pipeline.TableID{Database: d.opts.Database, Schema: name[0], Table: name[1]}
	d.log.Info("table rewritten without change events", zap.Stringer("table", id), zap.Stringer("lsn", m.LSN))
	return &pipeline.Record{Op: pipeline.OpRewrite, Table: &pipeline.Table{ID: id}}
}
