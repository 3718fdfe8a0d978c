// Package duckdb is the embedded analytics-store sink: it keeps a DuckDB
// database file in step with the captured tables, idempotently.
//
// Each source table maps to one target table "<schema>_<table>" created from
// the record's shape (types mapped faithfully: DECIMAL(p,s) up to 38 digits
// and exact text beyond, TIMESTAMPTZ, INTERVAL by fields, UUID, LIST for
// arrays, ...). Columns that appear in a newer shape are added; dropped
// columns stay, nullable.
//
// Write converts a batch in Go, keeps the highest-version change per key,
// and hands the rows to a DuckDB query Appender that applies them with one
// MERGE per table, all in one transaction that is committed before Write
// returns. When no row of a table keeps a stored value (no Unchanged value,
// no delete of a row with non-key columns, no column missing from the
// record's shape), only the values, version and deleted flag are staged and
// the MERGE is a plain version-guarded upsert. Delivery guarantees
// (Invariant 4):
//
//   - a change whose version is not newer than the stored row's changes
//     nothing, so replays and duplicates are harmless;
//   - a delete leaves a tombstone (_sluice_deleted = true with the delete's
//     version), so a late snapshot row cannot resurrect the key; in
//     HardDelete mode tombstones are purged once older than TombstoneTTL
//     and once no snapshot record of their table was written for
//     TombstoneTTL either (the time is kept in _sluice_snapshots), so they
//     live at least until the table's snapshot is over, then TombstoneTTL;
//   - a truncate turns every older row into a tombstone and stores a
//     barrier in _sluice_barriers; records older than it are ignored.
//
// Unchanged values (unchanged TOAST) keep the stored value on update. When
// such a record inserts a key the target does not hold, the column is NULL:
// there is nothing to keep.
//
// A multi-dimensional array, which a LIST column cannot hold, and a decimal
// NaN or infinity, which a DECIMAL(p,s) column cannot, land as text in the
// row's companion column _sluice_text_<column> (companion.go). Values
// DuckDB cannot hold otherwise (dates and timestamps outside its range,
// invalid JSON) fail their record
// permanently through a *pipeline.BatchError so the runtime dead-letters
// it (Invariant 7); the rest of the batch applies.
package duckdb
