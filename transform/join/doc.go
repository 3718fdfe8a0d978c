// Package join is the join and nest transforms: every row of a from table
// becomes a row of an output table that embeds, per lookup, the row of
// another table it refers to (many-to-one, by that table's primary key) as
// a JSON object, and per child (nest, one-to-many), the rows of another
// table that refer to it as a JSON array of objects in a defined order
// (nest.go, Invariant N1); the output column's Fields describe the
// members.
//
// State. The latest row of every joined table, a tombstone per deleted
// row, each table's truncate barrier, and a reverse index (looked-up key →
// from keys) live in a pebble store in Options.Dir (transform/state). Process applies a
// batch in one transaction that commits (fsync) before it returns, so the
// state is durable before any output reaches a sink. Every row write is
// guarded by the row's version (Invariant 4 applied to the state), which
// makes a state that ran ahead of the checkpoint harmless: the inputs
// replayed after a crash change nothing in it (Invariant 5).
//
// Start and resume (pipeline.StateOwner). A run without a checkpoint
// starts the state over: nothing was acknowledged, so the source sends
// every input again (an interrupted initial load is redone from a new
// snapshot, and state left by the first attempt would keep rows deleted
// in between alive). A run that resumes from a checkpoint needs state
// built for the same definition (from, and per lookup table, on, as and
// columns) since the pipeline started; without it (a join added to a
// running pipeline, a moved state_dir, a changed definition) the join
// refuses to start and names `sluice run --reset-offsets`.
//
// Outputs. After each input record of a joined table (passed through
// unchanged), Process appends the output rows that record touches (for a
// child row: the row it belongs to and those it left, N1), built
// from the state as it now is, whether the record changed the state or was
// a replay: a replayed input's outputs may never have reached the sinks.
// An output's version is its input's, raised to just above the last
// version emitted for the same output row when it would not be newer
// (snapshot rows share one version; replays repeat versions), so every
// output row is newer than the one before it and no sink drops it as
// stale. A truncate of the from table becomes a truncate of the output; a
// truncate of a looked-up table writes again every output row that refers
// to that lookup, and so does a new shape of a looked-up table that
// changes the embedded columns (a column added, dropped or retyped); such a
// rewrite is recorded and done again when a resumed run replays the change
// that caused it (N2, refresh.go).
//
// Keys. A foreign key finds a primary key when their values are equal as
// SQL compares numbers (5 = 5.00, signed = unsigned); text and bytes are
// compared exactly, so case- or pad-insensitive collations are not
// followed.
//
// Text that is not UTF-8 (which sources convert away) is embedded with
// U+FFFD in place of the invalid bytes: JSON cannot hold it.
package join
