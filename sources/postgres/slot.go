package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/zap"

	"github.com/sluice-cdc/sluice/pipeline"
)

const (
	publishAll = "insert, update, delete, truncate"
	// slotBusyWait bounds how long Open waits for a slot that is still held
	// by a walsender, typically the one of a previous run whose death the
	// server has not noticed yet (it does after wal_sender_timeout).
	slotBusyWait = 90 * time.Second
)

// resnapshotHint ends every error that means the slot can no longer deliver
// the changes after the checkpoint.
const resnapshotHint = "re-snapshot with `sluice run --reset-offsets`"

// errStandby is what a change of the catalog the source would make fails
// with on a hot standby, which takes no writes.
var errStandby = errors.New("the server is a hot standby, which takes no writes: run the statement on the primary")

// execWrite runs a statement that changes the catalog (publication,
// replica identity); on a standby it fails with errStandby instead.
func (s *Source) execWrite(ctx context.Context, stmt string) error {
	if s.standby {
		return errStandby
	}
	_, err := s.pool.Exec(ctx, stmt)
	return err
}

// ensurePublication creates the publication FOR TABLE the captured tables
// when it is absent, or adds the tables it lacks and enables every published
// operation when it is present. It returns the captured tables it left out
// because they no longer exist. With mark (a pipeline whose slot decodes
// what commits now: resumed, or streaming), the changes to the publication
// commit in one transaction with a rewrite message per table whose
// changes it did not publish until then (every captured table when it
// made the publication, every one that exists when it enabled operations,
// else those it added) and per table of also that
// exists (tables a heartbeat showed left out or back, published.go): the
// stream reads each such table again from that point (OpRewrite), and a
// crash right after loses no such read, as the slot holds the message
// until a checkpoint past it.
func (s *Source) ensurePublication(ctx context.Context, mark bool, also []TableRef) (gone []TableRef, err error) {
	pub := quoteIdent(s.opts.Publication)
	var put []TableRef // the tables whose changes it did not publish until now
	var all, ins, upd, del, trunc bool
	err = s.pool.QueryRow(ctx, `SELECT puballtables, pubinsert, pubupdate, pubdelete, pubtruncate
		FROM pg_publication WHERE pubname = $1`, s.opts.Publication).Scan(&all, &ins, &upd, &del, &trunc)
	if errors.Is(err, pgx.ErrNoRows) {
		names := make([]string, len(s.tables))
		for i, t := range s.tables {
			names[i] = t.quoted()
		}
		stmt := fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s WITH (publish = '%s')", pub, strings.Join(names, ", "), publishAll)
		var marks []TableRef
		if mark {
			marks = s.tables // none of their changes was published (a publication dropped)
		}
		if err := s.alterPublication(ctx, []string{stmt}, marks); err != nil {
			return nil, pipeline.Fatal(fmt.Errorf("postgres source: create publication %s: %w; create it as a role that owns the tables "+
				"(and has CREATE on the database): `%s;`", s.opts.Publication, err, stmt))
		}
		s.log.Info("created publication", zap.String("publication", s.opts.Publication), zap.Int("tables", len(names)))
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("postgres source: read publication %s: %w", s.opts.Publication, err)
	}
	opsOff := !(ins && upd && del && trunc)
	present := map[TableRef]bool{}
	rows, err := s.pool.Query(ctx, `SELECT schemaname::text, tablename::text FROM pg_publication_tables WHERE pubname = $1`, s.opts.Publication)
	if err != nil {
		return nil, fmt.Errorf("postgres source: read publication %s tables: %w", s.opts.Publication, err)
	}
	for rows.Next() {
		var t TableRef
		if err := rows.Scan(&t.Schema, &t.Name); err != nil {
			rows.Close()
			return nil, fmt.Errorf("postgres source: read publication %s tables: %w", s.opts.Publication, err)
		}
		present[t] = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres source: read publication %s tables: %w", s.opts.Publication, err)
	}
	var missing []string
	for _, t := range s.tables {
		if present[t] {
			continue
		}
		var exists bool
		if err := s.pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", t.quoted()).Scan(&exists); err != nil {
			return nil, fmt.Errorf("postgres source: look up table %s: %w", tableName(t), err)
		}
		if !exists {
			// Dropped or renamed while the stream ran (preflight refuses a
			// missing table at start): nothing to publish or read; the
			// decoder says so (published.go).
			gone = append(gone, t)
			continue
		}
		if all {
			continue // FOR ALL TABLES: only what no longer exists is missing
		}
		missing = append(missing, t.quoted())
		if !opsOff {
			put = append(put, t)
		}
	}
	var stmts []string
	if opsOff {
		// With an operation off, every captured table that exists missed
		// changes.
		stmts = append(stmts, fmt.Sprintf("ALTER PUBLICATION %s SET (publish = '%s')", pub, publishAll))
		put = slices.DeleteFunc(slices.Clone(s.tables), func(t TableRef) bool { return slices.Contains(gone, t) })
	}
	if len(missing) > 0 {
		stmts = append(stmts, fmt.Sprintf("ALTER PUBLICATION %s ADD TABLE %s", pub, strings.Join(missing, ", ")))
	}
	var marks []TableRef
	if mark {
		marks = put
		for _, t := range also {
			if !slices.Contains(marks, t) && !slices.Contains(gone, t) {
				marks = append(marks, t)
			}
		}
	}
	if len(stmts) == 0 && len(marks) == 0 {
		return gone, nil
	}
	if err := s.alterPublication(ctx, stmts, marks); err != nil {
		if len(stmts) == 0 {
			// Only the messages: retried (the stream meets the heartbeat
			// again, or the source opens again).
			return nil, fmt.Errorf("postgres source: announce the tables to read again: %w", err)
		}
		return nil, pipeline.Fatal(fmt.Errorf("postgres source: put publication %s back: %w; run `%s;` as the owner of the publication and the tables",
			s.opts.Publication, err, strings.Join(stmts, "; ")))
	}
	// Changes made before the ALTER were not published. A table new to
	// the pipeline is snapshotted by the engine; one it captured before
	// and that was left out meanwhile is read again and swept
	// (published.go, snapshot/: Invariant 14).
	if opsOff {
		s.log.Warn("publication did not publish every operation; enabled insert, update, delete and truncate: the captured tables are read again",
			zap.String("publication", s.opts.Publication))
	}
	if len(missing) > 0 {
		s.log.Warn("added captured tables to the publication; changes made while a table was left out of it were not published: "+
			"the tables are read again",
			zap.String("publication", s.opts.Publication), zap.Strings("tables", missing))
	}
	return gone, nil
}

// alterPublication runs stmts and, for each table of marks, a rewrite
// message naming it (RewritePrefix, as the event triggers write), in one
// transaction; on a standby it fails with errStandby.
func (s *Source) alterPublication(ctx context.Context, stmts []string, marks []TableRef) error {
	if s.standby {
		return errStandby
	}
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		for _, stmt := range stmts {
			if _, err := tx.Exec(ctx, stmt); err != nil {
				return err
			}
		}
		for _, t := range marks {
			name, err := json.Marshal([]string{t.Schema, t.Name})
			if err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, "SELECT pg_logical_emit_message(true, $1::text, $2::text)", RewritePrefix, string(name)); err != nil {
				return err
			}
		}
		return nil
	})
}

// slotRow is a row of pg_replication_slots.
type slotRow struct {
	slotType, database, plugin, walStatus string
	confirmed, restart                    pglogrepl.LSN
	active                                bool
	activePID                             int32
}

// readSlot returns the slot's row, or ok=false when there is none.
func (s *Source) readSlot(ctx context.Context) (r slotRow, ok bool, err error) {
	walStatus := "''"
	if s.version >= 130000 {
		walStatus = "coalesce(wal_status, '')"
	}
	var confirmed, restart *string
	err = s.pool.QueryRow(ctx, `SELECT slot_type, coalesce(database::text, ''), coalesce(plugin::text, ''), `+walStatus+`,
		confirmed_flush_lsn::text, restart_lsn::text, active, coalesce(active_pid, 0)
		FROM pg_replication_slots WHERE slot_name = $1`, s.opts.Slot).Scan(
		&r.slotType, &r.database, &r.plugin, &r.walStatus, &confirmed, &restart, &r.active, &r.activePID)
	if errors.Is(err, pgx.ErrNoRows) {
		return r, false, nil
	}
	if err != nil {
		return r, false, fmt.Errorf("read slot %s: %w", s.opts.Slot, err)
	}
	if confirmed != nil {
		if r.confirmed, err = parseLSN(*confirmed); err != nil {
			return r, false, err
		}
	}
	if restart != nil {
		if r.restart, err = parseLSN(*restart); err != nil {
			return r, false, err
		}
	}
	return r, true, nil
}

// waitSlotIdle polls until no walsender holds the slot, for at most max.
func (s *Source) waitSlotIdle(ctx context.Context, max time.Duration) (slotRow, bool, error) {
	deadline := time.Now().Add(max)
	logged := false
	for {
		r, ok, err := s.readSlot(ctx)
		if err != nil || !ok || !r.active || time.Now().After(deadline) {
			return r, ok, err
		}
		if !logged {
			s.log.Warn("slot is held by another walsender; waiting for it to go (a previous run's connection the server has not noticed is gone, or another consumer)",
				zap.Int32("pid", r.activePID), zap.Duration("max_wait", max))
			logged = true
		}
		select {
		case <-ctx.Done():
			return r, ok, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// createFreshSlot prepares the slot of a pipeline without a checkpoint. A
// slot already there was never acknowledged into any checkpoint of ours
// (there is none). With an initial load it is dropped and recreated, and
// the fresh load supersedes whatever it was for; without one (snapshot
// mode never) it is kept and streamed from its confirmed_flush_lsn, since
// dropping it would lose what it still holds.
func (s *Source) createFreshSlot(ctx context.Context, repl *pgconn.PgConn) (pglogrepl.CreateReplicationSlotResult, error) {
	var res pglogrepl.CreateReplicationSlotResult
	r, exists, err := s.waitSlotIdle(ctx, slotBusyWait)
	if err != nil {
		return res, fmt.Errorf("postgres source: %w", err)
	}
	if exists {
		if r.slotType != "logical" || r.database != s.database {
			return res, pipeline.Fatal(fmt.Errorf("postgres source: slot name %q is taken by a %s slot of database %q; choose another slot name",
				s.opts.Slot, r.slotType, r.database))
		}
		if r.active {
			return res, fmt.Errorf("postgres source: slot %s is in use by PID %d; stop the other consumer (or wait for the server to notice a dead one) and start again",
				s.opts.Slot, r.activePID)
		}
		if s.opts.Snapshot.Mode == SnapshotNever && r.confirmed != 0 && r.plugin == "pgoutput" {
			// Without a load nothing supersedes what the slot holds: the
			// earlier run may have delivered changes after confirmed_flush
			// to some sinks and not others (nothing was checkpointed, so
			// nothing was acknowledged). Dropping the slot would skip them
			// for good; streaming from it sends them all again, and the
			// sinks ignore what they already hold (Invariant 4).
			s.log.Warn("the pipeline has no checkpoint but its slot exists (a run that never checkpointed); "+
				"snapshot mode is never, so streaming from the slot's confirmed_flush_lsn: changes the earlier run delivered are sent again",
				zap.Stringer("confirmed_flush_lsn", r.confirmed))
			return pglogrepl.CreateReplicationSlotResult{SlotName: s.opts.Slot, ConsistentPoint: r.confirmed.String(),
				OutputPlugin: r.plugin}, nil
		}
		s.log.Warn("the pipeline has no checkpoint but its slot exists: it was left by an interrupted initial load "+
			"(or a run that never checkpointed); dropping and recreating it, and the fresh load supersedes it",
			zap.Stringer("confirmed_flush_lsn", r.confirmed))
		if err := pglogrepl.DropReplicationSlot(ctx, repl, s.opts.Slot, pglogrepl.DropReplicationSlotOptions{}); err != nil {
			return res, fmt.Errorf("postgres source: drop leftover slot %s: %w", s.opts.Slot, err)
		}
		s.redoLoad = s.opts.Snapshot.Mode == SnapshotInitial
	}
	action := "NOEXPORT_SNAPSHOT"
	if s.opts.Snapshot.Mode == SnapshotInitial {
		action = "EXPORT_SNAPSHOT"
	}
	if s.standby {
		s.log.Info("creating the slot on a hot standby: it waits for the primary's next record of running transactions " +
			"(written every 15 s while the primary is busy; `SELECT pg_log_standby_snapshot();` on the primary writes one now)")
	}
	cctx, cancel := context.WithTimeout(ctx, s.opts.SlotCreateTimeout)
	defer cancel()
	res, err = pglogrepl.CreateReplicationSlot(cctx, repl, s.opts.Slot, "pgoutput",
		pglogrepl.CreateReplicationSlotOptions{SnapshotAction: action, Mode: pglogrepl.LogicalReplication})
	if err != nil {
		if ctx.Err() == nil && errors.Is(cctx.Err(), context.DeadlineExceeded) && s.standby {
			return res, fmt.Errorf("postgres source: creating slot %s on a hot standby waited %s for the primary's record of "+
				"running transactions: run `SELECT pg_log_standby_snapshot();` on the primary", s.opts.Slot, s.opts.SlotCreateTimeout)
		}
		if ctx.Err() == nil && errors.Is(cctx.Err(), context.DeadlineExceeded) {
			return res, fmt.Errorf("postgres source: creating slot %s waited %s for transactions that were running when it started "+
				"(slot creation waits for every running transaction, prepared ones included): %s",
				s.opts.Slot, s.opts.SlotCreateTimeout, s.slotBlockers(ctx))
		}
		return res, fmt.Errorf("postgres source: create slot %s: %w", s.opts.Slot, err)
	}
	s.log.Info("created replication slot", zap.String("consistent_point", res.ConsistentPoint),
		zap.Bool("exported_snapshot", res.SnapshotName != ""))
	return res, nil
}

// slotBlockers describes the sessions and prepared transactions slot
// creation waits for.
func (s *Source) slotBlockers(ctx context.Context) string {
	var parts []string
	rows, err := s.pool.Query(ctx, `SELECT pid, coalesce(usename::text, ''), coalesce(datname::text, ''), coalesce(state, ''),
		coalesce(to_char(xact_start AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS'), ''), left(coalesce(query, ''), 120)
		FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND backend_xid IS NOT NULL ORDER BY xact_start`)
	if err == nil {
		for rows.Next() {
			var pid int32
			var user, db, state, since, query string
			if rows.Scan(&pid, &user, &db, &state, &since, &query) == nil {
				parts = append(parts, fmt.Sprintf("PID %d (user %s, database %s, %s since %s UTC, last query %q)", pid, user, db, state, since, query))
			}
		}
		rows.Close()
	}
	rows, err = s.pool.Query(ctx, `SELECT gid, coalesce(owner::text, ''), coalesce(database::text, ''),
		to_char(prepared AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS') FROM pg_prepared_xacts ORDER BY prepared`)
	if err == nil {
		for rows.Next() {
			var gid, owner, db, since string
			if rows.Scan(&gid, &owner, &db, &since) == nil {
				parts = append(parts, fmt.Sprintf("prepared transaction %q (owner %s, database %s, prepared %s UTC)", gid, owner, db, since))
			}
		}
		rows.Close()
	}
	if len(parts) == 0 {
		return "no blocking transaction is visible any more; start again"
	}
	return "blocked by " + strings.Join(parts, "; ") +
		"; finish them (COMMIT or ROLLBACK; COMMIT PREPARED or ROLLBACK PREPARED 'gid'), or end a session with `SELECT pg_terminate_backend(pid);`, then start again"
}

// checkResumeSlot verifies that the slot can still deliver everything after
// the checkpoint at lsn: it exists, its WAL is not lost, and it never
// confirmed beyond the checkpoint (Invariant 1: a slot cannot be rewound, and
// a start below confirmed_flush_lsn is silently moved forward by the server),
// and returns where the stream starts: lsn, or with FromPreviousCheckpoint
// the slot's confirmed_flush_lsn when that is later.
func (s *Source) checkResumeSlot(ctx context.Context, lsn pglogrepl.LSN) (pglogrepl.LSN, error) {
	r, ok, err := s.waitSlotIdle(ctx, slotBusyWait)
	if err != nil {
		return 0, fmt.Errorf("postgres source: %w", err)
	}
	if !ok {
		return 0, pipeline.Fatal(slotGone(s.opts.Slot, lsn, "it does not exist"))
	}
	if r.walStatus == "lost" {
		return 0, pipeline.Fatal(slotGone(s.opts.Slot, lsn, "its wal_status is 'lost': the server removed WAL it still needed (max_slot_wal_keep_size or idle_replication_slot_timeout)"))
	}
	if r.slotType != "logical" || r.plugin != "pgoutput" || r.database != s.database {
		return 0, pipeline.Fatal(fmt.Errorf("postgres source: slot %s is a %s slot of plugin %q in database %q, not a pgoutput slot of %q; "+
			"restore the configuration, or %s", s.opts.Slot, r.slotType, r.plugin, r.database, s.database, resnapshotHint))
	}
	start := lsn
	if r.confirmed > lsn && s.opts.FromPreviousCheckpoint {
		s.log.Warn("the slot confirmed beyond the previous checkpoint (the newest checkpoint, now unreadable, was acknowledged): "+
			"everything up to its confirmed_flush_lsn was durable in every sink, so streaming resumes there",
			zap.Stringer("checkpoint_lsn", lsn), zap.Stringer("confirmed_flush_lsn", r.confirmed))
		start = r.confirmed
	} else if r.confirmed > lsn {
		return 0, pipeline.Fatal(fmt.Errorf("postgres source: slot %s confirmed %s, beyond the checkpoint at %s: the changes between were released by "+
			"something other than this pipeline's checkpoints (another consumer of the slot, or a checkpoint store that lost commits) and the server "+
			"cannot send them again; %s", s.opts.Slot, r.confirmed, lsn, resnapshotHint))
	}
	if r.active {
		return 0, fmt.Errorf("postgres source: slot %s is in use by PID %d; stop the other consumer and start again", s.opts.Slot, r.activePID)
	}
	if r.walStatus == "unreserved" {
		s.log.Warn("slot WAL is unreserved: the server is about to remove WAL the slot needs (max_slot_wal_keep_size)",
			zap.Stringer("restart_lsn", r.restart))
	}
	return start, nil
}

// slotGone is the error for a slot that cannot deliver the changes after
// since any more.
func slotGone(slot string, since pglogrepl.LSN, why string) error {
	return fmt.Errorf("postgres source: slot %s is gone (%s); the changes since %s are lost to sluice: %s", slot, why, since, resnapshotHint)
}

// isSlotGone reports whether a server error means the slot was dropped or
// invalidated.
func isSlotGone(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	msg := strings.ToLower(pgErr.Message + " " + pgErr.Detail)
	switch pgErr.Code {
	case "42704": // undefined_object: replication slot "x" does not exist
		return strings.Contains(msg, "replication slot")
	case "55000": // object_not_in_prerequisite_state
		return strings.Contains(msg, "invalidated") || strings.Contains(msg, "can no longer get changes") ||
			strings.Contains(msg, "cannot read from logical replication slot")
	case "58P01": // undefined_file: requested WAL segment has already been removed
		return strings.Contains(msg, "wal segment")
	}
	return false
}

// dropSlot drops the slot once no walsender holds it (DropSlotOnExit).
func (s *Source) dropSlot(ctx context.Context) error {
	if _, _, err := s.waitSlotIdle(ctx, 15*time.Second); err != nil {
		return fmt.Errorf("postgres source: drop slot %s: %w", s.opts.Slot, err)
	}
	if _, err := s.pool.Exec(ctx, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1", s.opts.Slot); err != nil {
		return fmt.Errorf("postgres source: drop slot %s: %w", s.opts.Slot, err)
	}
	s.log.Info("dropped replication slot (drop_slot_on_exit)")
	return nil
}
