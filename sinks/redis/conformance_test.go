package redis

import (
	"context"
	"testing"

	"github.com/sluice-cdc/sluice/integration/harness"
	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/sinks/sinktest"
)

var ctx = context.Background()

// confHarness runs the conformance suite against a fresh Redis server per
// target.
type confHarness struct {
	format string
	addr   string
	cur    *Sink
}

func (h *confHarness) Open(t *testing.T) pipeline.Sink {
	h.addr = harness.RedisT(t).Addr()
	return h.Reopen(t)
}

func (h *confHarness) Reopen(t *testing.T) pipeline.Sink {
	h.cur = New(Options{Addr: h.addr, Format: h.format}, nil)
	return h.cur
}

func (h *confHarness) Read(t *testing.T, table *pipeline.Table) map[string][]any {
	t.Helper()
	return readMap(t, h.cur, table)
}

func readMap(t *testing.T, s *Sink, table *pipeline.Table) map[string][]any {
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

func TestConformanceHash(t *testing.T) { sinktest.Run(t, &confHarness{format: "hash"}) }
func TestConformanceJSON(t *testing.T) { sinktest.Run(t, &confHarness{format: "json"}) }

func TestMatrixHash(t *testing.T) {
	sinktest.Matrix(t, &confHarness{format: "hash"}, "Redis sink, hash format", "../../docs/types/redis-hash.md")
}
func TestMatrixJSON(t *testing.T) {
	sinktest.Matrix(t, &confHarness{format: "json"}, "Redis sink, json format", "../../docs/types/redis-json.md")
}
