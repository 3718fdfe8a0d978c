package postgres

import (
	"github.com/jackc/pglogrepl"

	"github.com/sluice-cdc/sluice/pipeline"
)

// Row indexes in versions (docs/versions.md). An initial load's table
// barrier and rows sit at the slot's consistent point with indexes 0 and
// 1; every change of a streamed transaction has an index of at least
// rowBase. The consistent point is the end of the record that made
// decoding consistent, so the next transaction's commit record may start
// exactly there: that transaction is not in the exported snapshot, is
// streamed, and its commit LSN equals the consistent point. Its changes
// still sort above every snapshot row (Invariant 3 and 4) only because
// their indexes start above snapshotRow. The MySQL source uses the same
// three indexes for the same reason.
const (
	barrierIndex = 0
	snapshotRow  = 1
	rowBase      = 2
)

// streamVersion is the version of the i-th (0-based) change of the
// transaction whose commit record starts at commitLSN, in generation gen
// (Invariant 10).
func streamVersion(gen uint64, commitLSN pglogrepl.LSN, i uint64) pipeline.Version {
	return pipeline.Version{gen, uint64(commitLSN), 0, rowBase + i}
}

// snapshotVersion is the version of an initial load's barrier
// (barrierIndex) or rows (snapshotRow) taken at the consistent point cp.
func snapshotVersion(gen uint64, cp pglogrepl.LSN, index uint64) pipeline.Version {
	return pipeline.Version{gen, uint64(cp), 0, index}
}
