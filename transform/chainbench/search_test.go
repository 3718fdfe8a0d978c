package chainbench

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/sluice-cdc/sluice/integration/harness"
	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/sinks/search"
)

// An OpenSearch node for -sink opensearch, started once per process (a
// JVM start takes tens of seconds) and stopped by TestMain; every run
// writes indexes of its own.
var node struct {
	once sync.Once
	n    *harness.SearchNode
	err  error
	runs int
}

// searchSink returns an OpenSearch sink writing into fresh indexes.
func searchSink(b *testing.B) pipeline.Sink {
	b.Helper()
	node.once.Do(func() {
		node.n, node.err = harness.StartSearch(context.Background(), harness.OpenSearch, harness.SearchOptions{})
	})
	if node.err != nil {
		b.Fatalf("start OpenSearch: %v", node.err)
	}
	node.runs++
	name := fmt.Sprintf("bench%d", node.runs)
	return search.New(search.Options{Name: name, Kind: "opensearch", URLs: []string{node.n.URL},
		IndexTemplate: name + "-{schema}.{table}"}, nil)
}

func TestMain(m *testing.M) {
	code := m.Run()
	if node.n != nil {
		_ = node.n.Stop()
	}
	stopKafka()
	os.Exit(code)
}
