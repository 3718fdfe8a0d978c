// Package snapshot is the incremental snapshot engine the Postgres and
// MySQL sources share: it reads tables in key-ordered chunks while the
// stream keeps flowing, with no lock held across chunks, and resumes from
// the last durable chunk after a restart (DBLog's watermark algorithm,
// arXiv 2010.12597).
//
// The Engine wraps a source (pipeline.Source) and is itself one. For each
// chunk a worker
//
//  1. opens a window and commits a low watermark L into the database's
//     log (Reader.Mark),
//  2. reads the chunk: the rows whose keys are above the table's cursor, in
//     key order, up to a row limit, in one consistent read (Reader.Chunk),
//  3. commits a high watermark H, inside whose transaction the table's
//     shape is read under a lock no schema change can pass.
//
// The engine reads the stream in commit order. From L on it records, per
// open window, every key a change of the window's table touched (old and
// new keys of a key update); a truncate empties the window. At H it emits
// the chunk's rows whose keys were not touched, right after H and before
// any later change, as OpRead records versioned just below H: above every
// change committed before H, below every change after it (Invariant 12).
// A touched key's row needs no snapshot row: the change that touched it
// carries the row's state at a version above H's rows, and a delete inside
// the window leaves nothing to resurrect.
//
// A chunk is read again instead of emitted when
//
//   - its read could not see a transaction that committed before L
//     (Postgres: commit order in the log and visibility order differ; the
//     read's in-progress transaction ids against the commits the stream
//     showed before L, Chunk.InProgress), or
//   - its shape differs from the table's shape at H (a schema change
//     between the read and H), or
//   - its shape is one the stream has not shown yet (a schema change
//     before H that the stream meets at the table's next row or shape
//     check): rows go out with the stream's shape only, which carries
//     the missing values of added columns (Invariant 11) that no catalog
//     read knows.
//
// A change in the window that carries an unchanged value (Postgres
// unchanged TOAST) touches its key like any other, but a sink that never
// held the row has no value to keep; such keys are read again in a window
// of their own (Reader.Keys) before the range moves on.
//
// Progress (per table: the key cursor of every range, the max key read
// when the table's snapshot started, the rows done) travels inside the
// positions the engine hands to the runtime, so it is checkpointed only
// together with a position at or after the chunk's rows (Invariant 1):
// a restart re-reads at most the chunks that were in flight. Watermarks
// carry the engine instance's id, so those of an earlier run are ignored.
//
// Rows inserted above the max key after the snapshot of a table started
// arrive through the stream only.
package snapshot
