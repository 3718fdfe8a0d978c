package duckdb

import (
	"context"
	"database/sql"
	"fmt"

	"go.uber.org/zap"
)

// Invariant 4 needs the target to hold what DuckDB committed and nothing
// else. A COMMIT that fails (DuckDB runs out of memory while it applies
// the transaction) rolls the transaction back but can leave its keys in
// the in-memory primary-key index: every later write of those keys is
// refused as a duplicate (a pipeline stalled for good), and the next
// checkpoint, automatic or the one DuckDB takes when it closes, writes
// the stale entries into the file. commit therefore drops the database
// without that checkpoint when COMMIT fails; the next write reopens it
// from the file and its WAL, which hold only committed transactions.

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
	return fmt.Errorf("commit failed; database reopened from its file before the next write: %w", err)
}

// commitFault, set by tests, runs on the connection before each COMMIT;
// an error it returns stands for the COMMIT's.
var commitFault func(context.Context, *sql.Conn) error

// drop closes the database without its shutdown checkpoint after a
// failed commit; ready reopens it.
func (s *Sink) drop(cause error) {
	if s.conn == nil {
		return
	}
	if _, err := s.conn.ExecContext(context.Background(), "PRAGMA disable_checkpoint_on_shutdown"); err != nil {
		s.log.Error("duckdb checkpoint on close not disabled after a failed commit", zap.Error(err))
	}
	if err := s.closeLocked(); err != nil {
		s.log.Warn("duckdb close after a failed commit", zap.Error(err))
	}
	s.log.Warn("duckdb commit failed: database dropped without a checkpoint; the next write reopens it from its file and WAL", zap.Error(cause))
}
