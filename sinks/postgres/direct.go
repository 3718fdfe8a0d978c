package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/zap"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/sinks/upsert"
)

// The bulk-load fast path. A batch of a table made only of inserts and
// snapshot reads mostly carries keys the target does not hold yet (an
// initial load, an append-mostly table). Such a batch is first COPYed
// straight into the target inside a savepoint: with no stored version to
// compare against, a plain insert is exactly what the version-guarded
// upsert would do (Invariant 4). If any key exists (a replay, a tombstone,
// a key inserted again after a delete), the primary key refuses the COPY,
// the savepoint is rolled back and the batch takes the staged upsert path.
// A table whose batches keep meeting existing keys skips the attempt for a
// growing number of batches, so update-heavy tables do not pay for it.

// copyNew tries the fast path and reports whether the rows were written by
// it. false with a nil error means: use the staged upsert (nothing of the
// attempt remains).
func (s *Sink) copyNew(ctx context.Context, tx pgx.Tx, tb *upsert.TableBatch, rows []upsert.Row, now time.Time) (bool, error) {
	st := s.direct.For(tb.Target)
	if !directTypes(tb.Cols) || !st.Try() {
		return false, nil
	}
	return s.bulkCopy(ctx, tx, tb.Target, tb.Cols,
		&rowSource{rows: rows, n: len(tb.Cols), lean: true, ctx: ctx, updatedAt: &now}, st)
}

// directTypes reports whether every column's values are staged in the
// target's own type, so they can go straight into the target.
func directTypes(cols []pipeline.Column) bool {
	for i := range cols {
		if ct := typeOf(&cols[i]); ct.stage != ct.ddl {
			return false
		}
	}
	return true
}

// beginner starts a transaction: a *pgx.Conn, or a pgx.Tx (a savepoint).
type beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// bulkCopy COPYs src (the columns cols, then the version, deleted flag
// and update time) into target in a transaction begun from b, and commits
// it. It reports whether the rows went in; false with a nil error means
// the attempt was rolled back, its refusal recorded in st, and the staged
// upsert must run.
func (s *Sink) bulkCopy(ctx context.Context, b beginner, target string, cols []pipeline.Column, src pgx.CopyFromSource,
	st *upsert.BulkPath) (bool, error) {
	names := make([]string, 0, len(cols)+3)
	for i := range cols {
		names = append(names, cols[i].Name)
	}
	names = append(names, colVersion, colDeleted, colUpdatedAt)
	tx, err := b.Begin(ctx)
	if err != nil {
		return false, err
	}
	_, err = tx.CopyFrom(ctx, pgx.Identifier{s.opts.Schema, target}, names, src)
	if err == nil {
		if err = tx.Commit(ctx); err == nil {
			st.Succeeded()
			return true, nil
		}
	}
	if ctx.Err() != nil {
		return false, ctx.Err()
	}
	if rerr := tx.Rollback(ctx); rerr != nil {
		return false, errors.Join(err, rerr)
	}
	s.refused(st, target, err)
	return false, nil
}

// refused records why a fast-path attempt failed.
func (s *Sink) refused(st *upsert.BulkPath, target string, err error) {
	var pe *pgconn.PgError
	switch {
	case errors.As(err, &pe) && pe.Code == "23505": // unique_violation: a key exists
		st.KeyExists()
	case isDataError(err):
		// A value the target refuses: the staged path finds the record.
	default:
		st.Off = true
		s.log.Info("bulk-load path disabled for table; using staged upserts", zap.String("table", target), zap.Error(err))
	}
}
