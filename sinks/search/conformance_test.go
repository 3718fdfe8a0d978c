package search

import (
	"testing"

	"github.com/sluice-cdc/sluice/integration/harness"
	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/sinks/sinktest"
)

// confHarness runs the conformance suite against one node, each target
// a fresh set of indices.
type confHarness struct {
	node *harness.SearchNode
	opts Options
	cur  *Sink
}

func (h *confHarness) Open(t *testing.T) pipeline.Sink {
	h.opts = target(h.node, Options{})
	return h.Reopen(t)
}

func (h *confHarness) Reopen(t *testing.T) pipeline.Sink {
	h.cur = New(h.opts, nil)
	return h.cur
}

func (h *confHarness) Read(t *testing.T, table *pipeline.Table) map[string][]any {
	t.Helper()
	return readMap(t, h.cur, table)
}

func readMap(t testing.TB, s *Sink, table *pipeline.Table) map[string][]any {
	t.Helper()
	rows, err := s.Rows(ctx, table)
	if err != nil {
		t.Fatalf("read %s: %v", table.ID, err)
	}
	out := make(map[string][]any, len(rows))
	for _, r := range rows {
		out[sinktest.RowKey(table, r)] = r
	}
	return out
}

// TestOpenSearch runs every node test against OpenSearch, then
// TestElasticsearch against Elasticsearch: one node at a time.
func TestOpenSearch(t *testing.T)    { nodeTests(t, harness.OpenSearch) }
func TestElasticsearch(t *testing.T) { nodeTests(t, harness.Elasticsearch) }

var engineTitle = map[harness.SearchEngine]string{harness.OpenSearch: "OpenSearch", harness.Elasticsearch: "Elasticsearch"}

func nodeTests(t *testing.T, engine harness.SearchEngine) {
	harness.SkipShort(t, "starts a JVM search node")
	n := node(t, engine)
	t.Run("Conformance", func(t *testing.T) { sinktest.Run(t, &confHarness{node: n}) })
	t.Run("Matrix", func(t *testing.T) {
		sinktest.Matrix(t, &confHarness{node: n}, engineTitle[engine]+" sink", "../../docs/types/"+string(engine)+".md")
	})
	for _, tc := range []struct {
		name string
		fn   func(*testing.T, *harness.SearchNode)
	}{
		{"TypesRoundTrip", testTypesRoundTrip},
		{"PoisonRecordIsPermanent", testPoisonRecord},
		{"ManyPoisonRecords", testManyPoisonRecords},
		{"LateSnapshotRowDoesNotResurrect", testLateSnapshot},
		{"TruncateBarrier", testTruncateBarrier},
		{"SaturatedVersionsExactPath", testSaturated},
		{"UnchangedKeepsStored", testUnchanged},
		{"NewColumnMapped", testNewColumn},
		{"TombstonePurge", testTombstonePurge},
		{"AsyncDurabilityIsFatal", testAsyncDurability},
		{"WrongKindIsFatal", testWrongKind},
		{"NodeUnreachable", testUnreachable},
		{"IndexRefusalsQuarantineTable", testIndexRefusals},
		{"TooLargeIsSplit", testTooLarge},
		{"KeyReadsDuringWrites", testKeyReadsDuringWrites},
		{"ScanStops", testScanStops},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, n) })
	}
}
