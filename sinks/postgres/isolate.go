package postgres

import (
	"context"
	"errors"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/zap"

	"github.com/sluice-cdc/sluice/pipeline"
)

// isDataError reports errors that blame the data rather than the
// connection or the server: SQLSTATE class 22 (data exception, e.g. a value
// too long for a pre-created varchar column) and class 23 (integrity
// constraint violation, e.g. a CHECK constraint). Retrying cannot change
// them.
func isDataError(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (strings.HasPrefix(pe.Code, "22") || strings.HasPrefix(pe.Code, "23"))
}

// afterFailure drops or refreshes state a rolled-back transaction may have
// left stale: the cached target tables and barriers are reloaded, or the
// connection is dropped for the next Write to reconnect.
func (s *Sink) afterFailure() {
	if s.conn.IsClosed() {
		s.conn = nil
		return
	}
	if err := s.load(context.Background()); err != nil {
		s.log.Warn("reload after failed write", zap.Error(err))
		s.conn.Close(context.Background())
		s.conn = nil
	}
}

// isolate applies records (except those already in skip) by halving the
// batch until every record the target refuses is alone in its transaction;
// those are appended to out as permanent failures (Invariant 7) and the
// rest is applied. Records applied twice on the way are harmless: a replay
// of a version already held changes nothing (Invariant 4).
func (s *Sink) isolate(ctx context.Context, records []pipeline.Record, skip []pipeline.RecordError, out *[]pipeline.RecordError) error {
	skipped := make(map[int]bool, len(skip))
	for _, f := range skip {
		skipped[f.Index] = true
	}
	idx := make([]int, 0, len(records))
	for i := range records {
		if !skipped[i] {
			idx = append(idx, i)
		}
	}
	return s.bisect(ctx, records, idx, out)
}

func (s *Sink) bisect(ctx context.Context, records []pipeline.Record, idx []int, out *[]pipeline.RecordError) error {
	if len(idx) == 0 {
		return nil
	}
	sub := make([]pipeline.Record, len(idx))
	for i, j := range idx {
		sub[i] = records[j]
	}
	batches, _ := s.prepare(sub)
	err := s.apply(ctx, batches)
	if err == nil {
		return nil
	}
	s.afterFailure()
	if !isDataError(err) || s.conn == nil {
		return err
	}
	if len(idx) == 1 {
		*out = append(*out, pipeline.RecordError{Index: idx[0], Err: err, Permanent: true})
		return nil
	}
	mid := len(idx) / 2
	if err := s.bisect(ctx, records, idx[:mid], out); err != nil {
		return err
	}
	return s.bisect(ctx, records, idx[mid:], out)
}
