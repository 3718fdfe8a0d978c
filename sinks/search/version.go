package search

import (
	"fmt"

	"github.com/sluice-cdc/sluice/pipeline"
)

// External versions. The engines compare a document's version as one
// signed 64-bit integer; pipeline.Version has four 64-bit components, so
// no order-preserving map covers all of them. The sources that feed this
// sink produce {0, LSN, 0, index}: the Postgres stream {0, commit LSN, 0,
// 1 + index of the change in its transaction}, its snapshot {0, consistent
// point LSN, 0, 0 or 1}, and the generate source {0, 0, 0, sequence}. The
// layout packs those as
//
//	external = LSN << indexBits | min(index, maxIndex)
//
// with indexBits = 12 (maxIndex = 4095) and LSN < 2^51 (2 PiB of WAL).
//
//   - Below maxIndex the map is injective and strictly order-preserving,
//     and the sink writes with version_type=external: the engine itself
//     refuses a version that is not greater than the stored one
//     (Invariant 4; an equal version changes nothing, as the Sink contract
//     asks, which is why external_gte is not used for these).
//   - From maxIndex on (a transaction with more than 4094 changes, the
//     generate source after 4094 records) the index saturates: several
//     versions share one external version. Those records take the exact
//     path: the sink reads the stored document (a realtime multi-get),
//     compares the full pipeline.Version kept in the document's
//     _sluice_version field, skips the record when the stored version is
//     not older and otherwise writes with version_type=external_gte (which
//     accepts the equal external version and still refuses a greater one).
//     The sink is the single writer of its indices and Write calls are
//     serialized, so nothing changes between the read and the write. The
//     order is never lost; such records only cost a read.
//   - A version whose first or third component is not 0 (a source with
//     another version form) or whose LSN is 2^51 or more cannot be packed:
//     Write fails with a Fatal error naming the version, and nothing of the
//     batch is written. (The LSN bound is the WAL position, which starts
//     near 0 when a cluster is created: 2 PiB of WAL is decades of writes
//     for the busiest servers.)
const (
	indexBits = 12
	maxIndex  = 1<<indexBits - 1
	maxLSN    = 1<<(63-indexBits) - 1
)

// external returns the external version of v and whether v saturates the
// index part (exact path).
func external(v pipeline.Version) (ext int64, saturated bool, err error) {
	if v[0] != 0 || v[2] != 0 {
		return 0, false, fmt.Errorf("version %s: the search sink packs versions of the form {0, LSN, 0, index} "+
			"(Postgres, generate) into the engine's 64-bit document version; this one has another form", v)
	}
	if v[1] > maxLSN {
		return 0, false, fmt.Errorf("version %s: LSN %#x is beyond the %d bits the search sink's external version "+
			"layout gives it", v, v[1], 63-indexBits)
	}
	idx := v[3]
	if idx >= maxIndex {
		idx, saturated = maxIndex, true
	}
	return int64(v[1]<<indexBits | idx), saturated, nil
}
