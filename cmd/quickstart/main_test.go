package main

import (
	"context"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/sluice-cdc/sluice/integration/harness"
)

// The quickstart runs end to end: throwaway PostgreSQL, initial load, a
// write workload streamed into DuckDB and the search index, catch-up; the
// copy equals the source and searches count the rows PostgreSQL counts.
func TestQuickstartCopiesPostgresIntoDuckDBAndTheIndex(t *testing.T) {
	if _, _, err := harness.PostgresBinDir(); err != nil {
		harness.SkipOrFail(t, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	res, err := run(ctx, options{For: 4 * time.Second, Dir: t.TempDir(), Listen: "127.0.0.1:0", Rate: 100, Log: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Log(res.summary())
	if !res.Equal || len(res.Tables) != 3 {
		t.Fatalf("copy differs:\n%s", res.summary())
	}
	if len(res.Searches) != 4 {
		t.Fatalf("searches: %+v", res.Searches)
	}
	for _, q := range res.Searches {
		if q.IndexN == 0 {
			t.Fatalf("search %s found nothing", q.Query)
		}
	}
	for _, tr := range res.Tables {
		if tr.SinkN < 1000 {
			t.Fatalf("%s has %d rows in DuckDB", tr.Name, tr.SinkN)
		}
	}
}
