// Package transform will hold the operators that run between source and
// sinks (filter, project, mask, route; windows; stateful operators), which
// implement pipeline.Operator and carry their inputs' acks.
package transform
