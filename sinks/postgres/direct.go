package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/zap"

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

// directState is one target table's fast-path bookkeeping.
type directState struct {
	skip    int  // batches left before the next attempt
	penalty int  // batches to skip after the next refusal
	off     bool // the path failed for another reason: never again
}

// copyNew tries the fast path and reports whether the rows were written by
// it. false with a nil error means: use the staged upsert (nothing of the
// attempt remains).
func (s *Sink) copyNew(ctx context.Context, tx pgx.Tx, tb *upsert.TableBatch, rows []upsert.Row, now time.Time) (bool, error) {
	st := s.directFor(tb.Target)
	if !st.try() {
		return false, nil
	}
	for i := range tb.Cols {
		// Only values staged in the target's own type can go straight in.
		if ct := typeOf(&tb.Cols[i]); ct.stage != ct.ddl {
			st.off = true
			return false, nil
		}
	}
	names := make([]string, 0, len(tb.Cols)+3)
	for i := range tb.Cols {
		names = append(names, tb.Cols[i].Name)
	}
	names = append(names, colVersion, colDeleted, colUpdatedAt)
	sp, err := tx.Begin(ctx)
	if err != nil {
		return false, err
	}
	_, err = sp.CopyFrom(ctx, pgx.Identifier{s.opts.Schema, tb.Target}, names,
		&rowSource{rows: rows, n: len(tb.Cols), lean: true, ctx: ctx, updatedAt: &now})
	if err == nil {
		if err = sp.Commit(ctx); err == nil {
			st.penalty = 1
			return true, nil
		}
	}
	if ctx.Err() != nil {
		return false, ctx.Err()
	}
	if rerr := sp.Rollback(ctx); rerr != nil {
		return false, errors.Join(err, rerr)
	}
	s.refused(st, tb.Target, err)
	return false, nil
}

// directFor returns the fast-path state of a target table.
func (s *Sink) directFor(target string) *directState {
	if s.direct == nil {
		s.direct = map[string]*directState{}
	}
	st := s.direct[target]
	if st == nil {
		st = &directState{penalty: 1}
		s.direct[target] = st
	}
	return st
}

// try reports whether to attempt the fast path for this batch.
func (st *directState) try() bool {
	if st.off {
		return false
	}
	if st.skip > 0 {
		st.skip--
		return false
	}
	return true
}

// refused records why a fast-path attempt failed.
func (s *Sink) refused(st *directState, target string, err error) {
	var pe *pgconn.PgError
	switch {
	case errors.As(err, &pe) && pe.Code == "23505": // unique_violation: a key exists
		st.skip = st.penalty
		st.penalty = min(2*st.penalty, 64)
	case isDataError(err):
		// A value the target refuses: the staged path finds the record.
	default:
		st.off = true
		s.log.Info("bulk-load path disabled for table; using staged upserts", zap.String("table", target), zap.Error(err))
	}
}
