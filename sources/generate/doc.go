// Package generate is a deterministic synthetic change feed, a
// pipeline.Source for demos, benchmarks and end-to-end tests.
//
// It writes up to three fixed, typed tables (demo.customers, demo.orders,
// demo.events): InitialRows inserts per table first, then a weighted mix of
// inserts, updates and deletes of live keys. Every change is a pure function
// of the seed, the options and its sequence number, so a reader resuming
// from a position regenerates the key space up to it (quickly, unpaced) and
// continues with exactly the records a single reader would have seen.
// Expected gives the live rows after any prefix of the feed, to compare a
// sink's target with.
package generate
