// Package aggregate is the materialized aggregate: a group-by over one
// captured table without windows (a live view), kept up to date change
// by change. An insert adds its row to its group, a delete retracts what
// the row contributed, an update retracts and adds (possibly moving the
// row to another group). Every group changed by a batch is written once
// after the batch's records, keyed by its group values: an insert when it
// appears, an update while it lives, a delete when its last row leaves.
//
// Functions: count(), count(col), sum, avg (exact, as a window's:
// transform/window), min, max and count_distinct. A group's count, sums
// and averages are accumulators in the group's entry; min, max and
// count_distinct keep the multiset of their values in the store, one key
// per distinct value with its multiplicity, so the next extreme is found
// when the current one is retracted, however many rows a group has.
//
// Retraction does not read the change's before image: with Postgres'
// REPLICA IDENTITY DEFAULT an update's or delete's before image holds
// only the key, so the state keeps per source row what it contributed
// (its group and arguments).
//
// The state (pebble, transform/state), one store per aggregate:
//
//	rows/<row key>                        a row's group values and arguments
//	groups/<group key>                    a group's values, row count,
//	                                      accumulators and extremes, the
//	                                      version of its last output and
//	                                      whether that was a delete (a
//	                                      tombstone, A3)
//	vals/<n><len><group key><value key>   aggregate n's multiset: the
//	                                      multiplicity and the value
//	pending/<origin><group key>           the groups written by a batch whose
//	                                      outputs may not be durable yet (A2)
//	tombs/<version><group key>            the tombstones, by the later of
//	                                      the delete's version and its
//	                                      batch's Origin: the version (A3)
//	meta/...                              the newest stream change applied,
//	                                      the output's shape, the definition
//
// Process applies a batch in one transaction that commits (fsync) before
// the outputs leave it (Invariant 5: the state is never behind the
// checkpoint; it may be ahead).
//
// Invariant A1 (a replay changes nothing): changes of the stream arrive
// in version order, so the newest stream change applied, stored with the
// state, tells a replayed change from a new one (pipeline.Applied; a
// replay from another server, a generation up, by Options.Covers); a
// replayed change is not applied again. Snapshot rows carry one version and are upserts of
// their row's contribution, which applying twice leaves as once.
//
// Invariant A2 (a replay writes again what may be lost): every group a
// batch writes (or a truncate clears) is recorded under the batch's
// Origin in the same transaction, and forgotten once a stored checkpoint
// covers that batch (its outputs are then durable in every sink). A
// resumed run writes each recorded group again, from the state, in the
// first batch whose newest version reaches the Origin it was recorded
// under: the outputs of the batches after the checkpoint may never have
// reached the sinks, and their replayed changes, skipped under A1, would
// not write them. Outputs carry their own batch's newest version as
// Origin, never one ahead of the replay: the exactly-once Kafka sink
// skips every record whose Origin is below one it wrote.
//
// Invariant A3 (a group's outputs are newer each time, which Invariant 4,
// the sinks' version guard, needs to take them): an output's
// version is the version of the newest change that touched its group in
// the batch, raised to just above the group's last output when it would
// not be newer (snapshot rows share a version; re-writes under A2 repeat
// one), so no version-guarded sink drops it as stale. A group whose last
// row left keeps a tombstone with its last output's version until the
// replay floor (state.Floor) passes both that version and the Origin of
// the batch that wrote the delete: every later change is newer than the
// floor, so a group that comes back is never written below its delete,
// and the delete is durable, so A2 need not write it again (a delete
// rewritten after a crash carries a version below the replay's, which
// the floor may pass before the rewrite is durable). A truncate of the input is written at its version raised above
// every group's last output (a sink's barrier clears what is below it),
// and the groups' tombstones take that version.
package aggregate
