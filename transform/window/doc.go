// Package window computes event-time windowed aggregates over a change
// stream: inserts add to their window, deletes retract, updates retract
// what the row contributed before and add what it contributes now —
// possibly in another window when its event time changed.
//
// This file set holds the engine's core, free of the pipeline's plumbing:
// window assignment (Spec), aggregates that retract exactly (agg.go), and
// the state of open windows, groups and contributing rows (Engine).
//
// Retraction does not read the change's before image. With Postgres'
// REPLICA IDENTITY DEFAULT an update's before image holds only the key, so
// the engine remembers, per primary key, what the row contributed (its
// event time, group and aggregate inputs) for as long as a window it
// contributed to is open; an update or delete retracts that. So windowed
// tables need no full identity, and a row's contribution lives exactly as
// long as its window's state (window end + allowed lateness).
package window
