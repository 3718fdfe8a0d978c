// Package offsetstoretest is the conformance suite every
// pipeline.OffsetStore implementation runs from its own tests.
package offsetstoretest
