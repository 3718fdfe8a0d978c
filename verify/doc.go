// Package verify compares what sinks hold with their source: every
// captured table's current rows, read and decoded as the source decodes
// them, routed as the pipeline routes them, against the rows each sink
// holds for it, matched by key and compared value by value through
// canonical forms (Canon). While the pipeline streams, differences are
// rechecked once the pipeline's checkpoint has passed the source position
// taken after the first pass, so changes still in flight are not reported.
// `sluice verify` is its command.
package verify
