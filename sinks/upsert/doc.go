// Package upsert folds a sink batch into the newest change per key per
// table, the shared first step of every version-guarded upsert sink.
//
// Prepare groups a Write's records by table, builds the union of the
// columns of every shape of the table seen in the batch, converts values to
// the sink's staging values through a Converter and keeps, per key, the
// change with the highest version. Columns a change leaves as they are
// (Unchanged values, columns its shape lacks, a delete's non-key columns)
// are marked kept, with the newest value an older change of the same key in
// the batch wrote as the fallback the sink's upsert applies when that change
// is newer than the target's row. Applying the folded rows therefore gives
// the same result as applying the changes one by one.
package upsert
