// Package sourcetest is the conformance suite every pipeline.Source passes:
// each batch position is a resume point, a restart from an acknowledged
// position leaves no gap (Invariants 1 and 2), versions increase per key,
// and Read honours context cancellation.
package sourcetest
