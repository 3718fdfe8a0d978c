// Package postgres is the Postgres sink: it keeps tables of a Postgres
// database (an analytics store or a replica) in step with the captured
// tables, idempotently, with the semantics of the DuckDB sink.
//
// Each source table maps to one target table "<prefix><table>" (prefix
// "<source schema>_" unless configured) in the configured schema, created
// from the record's shape with type-faithful columns (smallint … bigint,
// numeric(p,s) or numeric, real, double precision, timestamptz, timestamp,
// date, time, timetz, interval, uuid, jsonb for JSON, bytea, text, arrays as
// <element>[]; enums, sets and network addresses as text; unsigned 64-bit
// integers as numeric(20,0)) plus _sluice_version (the pipeline.Version's
// 32-byte form: bytea comparison is memcmp, so byte order is version
// order), _sluice_deleted and _sluice_updated_at, with a primary key on the
// key columns. Columns that appear in a newer shape are added (existing
// rows get the column's pipeline.Column.Missing value when it has one);
// dropped columns stay, nullable.
//
// Write converts a batch in Go, keeps the highest-version change per key
// and, in one transaction committed before it returns, copies the rows per
// table into a temporary table (binary COPY, ON COMMIT DROP) and applies
// them with one version-guarded INSERT … ON CONFLICT … DO UPDATE … WHERE
// target version < new version. When some row keeps a stored value
// (Unchanged values, a delete's non-key columns, columns missing from the
// record's shape) per-column keep flags and fallbacks are staged as well and
// the rows are applied as a version-guarded UPDATE … FROM the staging table
// followed by INSERT … ON CONFLICT DO NOTHING. A batch made only of inserts
// and snapshot reads is first COPYed straight into the target (the
// bulk-load paths: stream.go converts the records as the COPY streams when
// they share one shape and the target has every column; direct.go copies a
// table's folded rows in a savepoint otherwise): with no stored row to
// compare against, that is what the guarded upsert would do; an existing or
// repeated key makes the primary key refuse it and the batch takes the
// staged path. Delivery guarantees
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
//     barrier in _sluice_barriers(target, version); records older than it
//     are ignored.
//
// Values Postgres cannot hold (infinite decimals or too many digits for a
// numeric(p,s) column, dates and timestamps outside Postgres's range, text
// with NUL bytes or invalid UTF-8, invalid JSON or JSON with \u0000,
// ragged multi-dimensional arrays) fail their record permanently through a
// *pipeline.BatchError so the runtime dead-letters it (Invariant 7); the
// rest of the batch applies. So do values the target itself refuses (a
// pre-created table's narrower column or CHECK constraint: SQLSTATE classes
// 22 and 23), found by halving the batch until each refused record stands
// alone (isolate.go). Heartbeats are ignored.
package postgres
