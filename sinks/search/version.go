package search

import (
	"github.com/sluice-cdc/sluice/pipeline"
)

// External versions. The engines compare a document's version as one
// signed 64-bit integer; pipeline.Version has four 64-bit components, so
// no order-preserving map covers all of them. The sink packs the version
// forms its sources produce as a mixed-radix number of 63 bits:
//
//	Postgres {generation, LSN, 0, index} and generate {generation, 0, 0, sequence}:
//	    external = generation (4 bits) | LSN (47 bits) | index (12 bits)
//	MySQL/MariaDB {epoch, file number, transaction offset, row index}
//	(the offset is never 0, which tells the forms apart):
//	    external = epoch (3 bits) | file (16 bits) | offset (32 bits) | index (12 bits)
//
// The generation (the MySQL epoch is one) comes first, so a reset or a
// new server sorts above everything before (Invariant 10).
//
// A component at or above its field's maximum saturates: it and every
// less significant field are set to their maximum. The map is thus
// non-decreasing in version order everywhere and strictly increasing
// below saturation.
//
//   - Below saturation the sink writes with version_type=external: the
//     engine itself refuses a version that is not greater than the stored
//     one (Invariant 4; an equal version changes nothing, as the Sink
//     contract asks, which is why external_gte is not used for these).
//   - A saturated version (a transaction with more than 4093 changes, the
//     generate source after 4094 records, the 65535th binlog file, WAL
//     past 128 TiB, a 15th Postgres or 7th MySQL generation) takes
//     the exact path: the sink reads the stored document (a realtime
//     multi-get), compares the full pipeline.Version kept in the
//     document's _sluice_version field, skips the record when the stored
//     version is not older and otherwise writes with
//     version_type=external_gte (which accepts the equal external version
//     and still refuses a greater one). The sink is the single writer of
//     its indices and Write calls are serialized, so nothing changes
//     between the read and the write. The order is never lost; such
//     records only cost a read.
var (
	lsnLayout   = [4]uint{4, 47, 0, 12}
	mysqlLayout = [4]uint{3, 16, 32, 12}
)

const (
	indexBits = 12
	maxIndex  = 1<<indexBits - 1
	maxLSN    = 1<<(63-4-indexBits) - 1
)

// external returns the external version of v and whether v saturates
// (exact path). err is always nil: every version has an external form.
func external(v pipeline.Version) (ext int64, saturated bool, err error) {
	layout := lsnLayout
	if v[2] != 0 {
		layout = mysqlLayout
	}
	var x uint64
	for i, bits := range layout {
		if bits == 0 {
			continue // the form guarantees 0 here
		}
		top := uint64(1)<<bits - 1
		c := v[i]
		if saturated || c >= top {
			c, saturated = top, true
		}
		x = x<<bits | c
	}
	return int64(x), saturated, nil
}
