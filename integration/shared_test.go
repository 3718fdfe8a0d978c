package integration

import (
	"context"
	"os"
	"sync"
	"testing"

	"github.com/sluice-cdc/sluice/integration/harness"
)

// A search node takes tens of seconds and a few GiB to start: tests that
// only need an engine to write into share one per engine for the whole
// package, each with its own index names and sink names (so its own state
// documents). Tests that stop, restart or reconfigure a node start their
// own.
var shared struct {
	mu    sync.Mutex
	nodes map[harness.SearchEngine]*harness.SearchNode
	errs  map[harness.SearchEngine]error
}

// sharedSearch returns the package's node of engine, starting it on first
// use. A node that failed to start fails (in CI) or skips every test that
// asks for it.
func sharedSearch(t *testing.T, engine harness.SearchEngine) *harness.SearchNode {
	t.Helper()
	harness.SkipShort(t, "starts a JVM search node")
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.nodes == nil {
		shared.nodes, shared.errs = map[harness.SearchEngine]*harness.SearchNode{}, map[harness.SearchEngine]error{}
	}
	if n, ok := shared.nodes[engine]; ok {
		return n
	}
	if err, ok := shared.errs[engine]; ok {
		harness.SkipOrFail(t, err)
	}
	n, err := harness.StartSearch(context.Background(), engine, harness.SearchOptions{})
	if err != nil {
		shared.errs[engine] = err
		harness.SkipOrFail(t, err)
	}
	shared.nodes[engine] = n
	return n
}

func TestMain(m *testing.M) {
	code := m.Run()
	shared.mu.Lock()
	for _, n := range shared.nodes {
		_ = n.Stop()
	}
	shared.mu.Unlock()
	stopSharedKafka()
	os.Exit(code)
}
