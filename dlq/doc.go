// Package dlq is sluice's embedded dead-letter queue: an append-only,
// fsynced JSON-lines file per pipeline holding the records that could not be
// processed (Invariant 7), with depth and oldest-age gauges for alerting
// (Invariant 9).
package dlq
