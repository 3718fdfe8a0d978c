package duckdb

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"go.uber.org/zap"
)

// Invariant 4 needs the target to hold what DuckDB committed and nothing
// else. Two failures inside a write transaction leave DuckDB's in-memory
// state out of step with it after the rollback:
//
//   - a COMMIT that fails (DuckDB runs out of memory while it applies the
//     transaction) leaves the transaction's keys in the primary-key index:
//     every later write of those keys is refused as a duplicate;
//   - a DELETE that runs out of memory part way (the merge's, right after
//     a restart, when the index is read back from the file) leaves its
//     rows marked deleted by the rolled-back transaction: every later
//     delete of them fails with "Conflict on tuple deletion!".
//
// Either way the pipeline stalls for good, and the next checkpoint,
// automatic or the one DuckDB takes when it closes, writes the stale
// state into the file. The sink therefore drops the database without that
// checkpoint after such a failure (tainted), before any other statement
// commits; the next write reopens it from the file and its WAL, which
// hold only committed transactions.

// tainted reports whether err leaves the database's in-memory state in
// doubt (above): a failed commit, running out of memory inside a write,
// or the symptoms of an earlier such failure.
func tainted(err error) bool {
	if err == nil {
		return false
	}
	msg := err.Error()
	return outOfMemory(err) || strings.Contains(msg, "Failed to commit") || strings.Contains(msg, "Conflict on tuple deletion")
}

// dropIfTainted drops the database when err is tainted; it reports
// whether it did.
func (s *Sink) dropIfTainted(err error) bool {
	if s.conn == nil || !tainted(err) {
		return false
	}
	s.drop(err)
	return true
}

// commit commits the open transaction. When that fails the database is
// dropped (above) and the error says so; the caller must not use s.conn
// again in this Write.
func (s *Sink) commit(ctx context.Context) error {
	var err error
	if commitFault != nil {
		err = commitFault(ctx, s.conn)
	}
	if err == nil {
		_, err = s.conn.ExecContext(ctx, "COMMIT")
	}
	if err == nil {
		return nil
	}
	s.drop(err)
	return fmt.Errorf("commit failed; database dropped, the next write reopens it from its file: %w", err)
}

// commitFault, set by tests, runs on the connection before each COMMIT;
// an error it returns stands for the COMMIT's.
var commitFault func(context.Context, *sql.Conn) error

// drop closes the database without its shutdown checkpoint after a
// tainted failure; ready reopens it.
func (s *Sink) drop(cause error) {
	if s.conn == nil {
		return
	}
	if _, err := s.conn.ExecContext(context.Background(), "PRAGMA disable_checkpoint_on_shutdown"); err != nil {
		s.log.Error("duckdb checkpoint on close not disabled before dropping the database", zap.Error(err))
	}
	if err := s.closeLocked(); err != nil {
		s.log.Warn("duckdb close while dropping the database", zap.Error(err))
	}
	s.log.Warn("duckdb write failed in a way that leaves its memory in doubt: database dropped without a checkpoint; the next write reopens it from its file and WAL", zap.Error(cause))
}
