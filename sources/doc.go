// Package sources groups the pipeline.Source implementations, one
// sub-package per kind of source.
package sources
