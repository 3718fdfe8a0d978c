package duckdb

import (
	"context"
	"strconv"

	"go.uber.org/zap"
)

// Invariant 6: DuckDB's buffer manager keeps every block of a table it has
// read or written cached until its memory_limit is reached, and DuckDB's
// own default limit is 80% of the machine: a sink's memory grew with its
// tables (240,000 rows of 2 KB text: 209 MiB of anonymous memory and
// growing; a 2,000,000-change drain: about 100 MiB of the daemon's 222).
// Those cached blocks are only a cache — the file and the page cache hold
// them — but the tables' primary-key indexes (ART) must stay in memory, or
// a write fails ("failed to pin block"; random 64-bit keys need about 55
// bytes each), so a fixed small limit refuses large tables.
//
// With Options.MemoryLimit 0 the sink therefore follows the indexes:
// before each write it sets memory_limit to what the indexes hold plus a
// working headroom (for the write's staging, joins and cached blocks),
// rounded up to limitStep so that it changes only when the indexes have
// grown or shrunk by a step. DuckDB evicts cached blocks to stay under
// it. When DuckDB still runs out of memory (one statement needs more than
// the headroom, such as an ALTER's backfill of a wide table), the
// headroom doubles for the rest of the sink's life and the write is
// retried (the runtime sees pipeline.Overloaded).

// startHeadroom is the working memory above the indexes' at first.
const startHeadroom = 32 << 20

// limitStep is the granularity of the followed limit.
const limitStep = 8 << 20

// followIndexes sets memory_limit to the indexes' memory plus the
// headroom (see above) unless Options.MemoryLimit fixes it. It runs with
// s.mu held, between transactions. A failure is logged and leaves the
// limit as it was: DuckDB refuses a limit below what it cannot evict.
func (s *Sink) followIndexes(ctx context.Context) {
	if s.opts.MemoryLimit > 0 {
		return
	}
	var index int64
	if err := s.conn.QueryRowContext(ctx,
		"SELECT coalesce(sum(memory_usage_bytes), 0) FROM duckdb_memory() WHERE tag = 'ART_INDEX'").Scan(&index); err != nil {
		s.log.Debug("duckdb index memory unreadable", zap.Error(err))
		return
	}
	want := (index + s.headroom + limitStep - 1) / limitStep * limitStep
	if want == s.limit {
		return
	}
	if _, err := s.conn.ExecContext(ctx, "SET memory_limit = '"+strconv.FormatInt(want>>20, 10)+"MiB'"); err != nil {
		s.log.Debug("duckdb memory limit unchanged", zap.Int64("want", want), zap.Error(err))
		return
	}
	s.limit = want
}

// outgrown doubles the headroom after DuckDB ran out of memory under a
// followed limit; it runs with s.mu held.
func (s *Sink) outgrown(err error) {
	if s.opts.MemoryLimit > 0 {
		return
	}
	s.headroom = max(2*s.headroom, limitStep)
	s.log.Warn("duckdb needed more memory than its indexes plus the working headroom: headroom doubled",
		zap.Int64("headroom_bytes", s.headroom), zap.Error(err))
}
