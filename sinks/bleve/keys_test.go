package bleve

import (
	"testing"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/sinks/sinktest"
	"github.com/sluice-cdc/sluice/verify"
)

var (
	_ verify.KeyReader = (*Sink)(nil)
	_ verify.Scanner   = (*Sink)(nil)
)

// TestRowsByKeyDuringWrites: sinktest.KeyReadsDuringWrites on this sink.
func TestRowsByKeyDuringWrites(t *testing.T) {
	s := openSink(t, Options{})
	sinktest.KeyReadsDuringWrites(t, s, 20, func(table *pipeline.Table) map[string][]any { return rows(t, s, table) })
}
