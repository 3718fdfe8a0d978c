// Package transform holds the operators that run between source and sinks
// and implement pipeline.Operator. transform/join denormalises (a from
// table's rows with the rows they refer to embedded); filters,
// projections, masks, windows and aggregates come with their own issues.
package transform
