// Package pipeline holds sluice's shared record model, the contracts every
// source, sink, operator and offset store implements, and the runtime that
// wires them together with an ack ledger.
//
// Delivery invariants (from DESIGN.md; cited in code as "Invariant N"):
//
//  1. A position is acknowledged upstream only after every record at or before
//     it is durable in every sink and the checkpoint holding it is committed.
//     Order: sink write → checkpoint commit → source ack, from one goroutine.
//  2. Checkpoints sit on transaction boundaries.
//  3. The stream never starts later than the snapshot's position.
//  4. Every sink rejects a write whose version is older than what it holds;
//     deletes leave versioned tombstones; truncate is a versioned barrier.
//  5. Operator state is committed atomically with the position it reflects,
//     or is itself version-guarded and durable before the operator's outputs
//     leave it, so that state ahead of the checkpoint is harmless when the
//     inputs after the checkpoint are replayed (transform/join).
//  6. Memory is bounded: an in-flight cap (records and bytes) blocks the
//     source — backpressure, never dropping.
//  7. A record that cannot be processed goes to the dead-letter queue with raw
//     bytes, error and position, and is then acknowledged.
//  8. Idle databases still advance: heartbeats flow through the pipeline as
//     position-carrying control records.
//  9. Every condition that risks loss or delay is a metric and a log line.
//  10. A run's versions sort above everything a sink already holds, even after
//     a reset, a new server or a restore: a version's first component is a
//     generation; every sink that keeps versions records the highest
//     generation it has written no later than the first record of it
//     (GenerationKeeper), and a run without a checkpoint, or on another
//     server, takes one above the highest any sink recorded
//     (docs/versions.md).
//  11. Every schema change reaches the sinks, even when no row of the table
//     changes after it: a source that learns of a new shape without a row
//     of it emits an OpShape record placed after the change and before any
//     change of a later shape, and every sink applies it (adds the columns
//     and fills the rows that predate them) as it would for a row. No
//     checkpoint passes a schema change whose missing values only the
//     running source knows before a shape carrying them is handed over,
//     and a missing value stays with its column in every later shape.
//  12. A snapshot read while the stream flows never sorts above a change it
//     did not see: a chunk's rows are emitted at their high watermark,
//     versioned just below it, only for keys no change touched since the
//     low watermark, and only when the read saw every transaction that
//     committed before the low watermark and read the table's shape at the
//     high one; a table's snapshot progress is checkpointed only inside a
//     position at or after its rows (snapshot/).
//  13. A value the source did not know never stays in a sink: a change
//     that leaves a column Unchanged where the sinks may hold nothing to
//     keep (an insert whose MySQL/MariaDB row image left columns out) is
//     marked Refetch, and its row is read again by key (a repair,
//     snapshot/) and emitted above it; the request is checkpointed with
//     the change's position, so a restart loses neither.
//  14. A row deleted where no change of it reaches the pipeline (while the
//     table was out of the publication, while it was not captured) never
//     stays in a sink once the table is read again: every full read of a
//     table either clears the sinks' rows first (a fresh pipeline's
//     barrier) or, after its last chunk, sweeps them with a truncate
//     versioned below everything the read and the stream emitted since it
//     began (Record.Replaces on an OpTruncate), which leaves exactly the
//     rows the read did not find; the sweep's version is checkpointed
//     with the first chunk, so a restart sweeps at the same point.
package pipeline
