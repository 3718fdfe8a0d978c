package search

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/integration/harness"
)

var ctx = context.Background()

// One node per engine per test process, and never both at once: the
// tests of an engine run as subtests of one top-level test, and asking for
// the other engine stops the running node first. TestMain stops the last.
var nodes struct {
	mu      sync.Mutex
	cur     *harness.SearchNode
	failed  map[harness.SearchEngine]error
	targets atomic.Int64
}

func node(t testing.TB, engine harness.SearchEngine) *harness.SearchNode {
	t.Helper()
	nodes.mu.Lock()
	defer nodes.mu.Unlock()
	if err := nodes.failed[engine]; err != nil {
		harness.SkipOrFail(t, err)
	}
	if nodes.cur != nil && nodes.cur.Engine == engine {
		return nodes.cur
	}
	if nodes.cur != nil {
		_ = nodes.cur.Stop()
		nodes.cur = nil
	}
	start := time.Now()
	// Requests above maxContent are refused with 413 (testTooLarge); the
	// sink's default bulk_max_bytes stays below it.
	n, err := harness.StartSearch(ctx, engine, harness.SearchOptions{Settings: map[string]string{"http.max_content_length": maxContent}})
	if err != nil {
		if nodes.failed == nil {
			nodes.failed = map[harness.SearchEngine]error{}
		}
		nodes.failed[engine] = err
		harness.SkipOrFail(t, err)
	}
	t.Logf("%s %s started at %s in %s", n.Engine, n.Version, n.URL, time.Since(start).Round(time.Millisecond))
	nodes.cur = n
	return n
}

func TestMain(m *testing.M) {
	code := m.Run()
	nodes.mu.Lock()
	if nodes.cur != nil {
		_ = nodes.cur.Stop()
	}
	nodes.mu.Unlock()
	os.Exit(code)
}

// maxContent is the nodes' http.max_content_length.
const maxContent = "10mb"

// engines are the engines every node test runs against.
var engines = []harness.SearchEngine{harness.OpenSearch, harness.Elasticsearch}

// target is a fresh, empty target on n: a unique index prefix and state
// index.
func target(n *harness.SearchNode, o Options) Options {
	id := nodes.targets.Add(1)
	o.Kind, o.URLs = string(n.Engine), []string{n.URL}
	if o.IndexTemplate == "" {
		o.IndexTemplate = fmt.Sprintf("t%d-{schema}.{table}", id)
	}
	o.StateIndex = fmt.Sprintf("t%d-state", id)
	return o
}

func openSink(t testing.TB, o Options) *Sink {
	t.Helper()
	s := New(o, nil)
	if err := s.Open(ctx); err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { s.Close(ctx) })
	return s
}
