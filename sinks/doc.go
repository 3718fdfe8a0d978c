// Package sinks groups the pipeline.Sink implementations, one sub-package
// per target, and sinktest, the conformance suite each of them passes.
package sinks
