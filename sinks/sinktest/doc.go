// Package sinktest is the conformance suite every pipeline.Sink passes: it
// drives a sink through a generated change log (in order, replayed in
// shuffled order with duplicates, across a restart) and compares the target
// with the state the delivery invariants call for (Invariant 4), computed by
// a reference model.
package sinktest
