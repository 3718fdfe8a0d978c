package duckdb

import (
	"errors"
	"io"
	"math"
	"testing"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/sinks/sinktest"
	"github.com/sluice-cdc/sluice/sources/generate"
)

// TestGeneratedFeed writes the synthetic feed, restarting midway and
// replaying from an earlier position, and compares with the feed's state.
func TestGeneratedFeed(t *testing.T) {
	opts := generate.Options{Seed: 9, InitialRows: 30, Changes: 900, Batch: 64}
	s := openSink(t, Options{})
	write := func(from pipeline.Position) {
		src := generate.New(opts)
		if err := src.Open(ctx, from); err != nil {
			t.Fatal(err)
		}
		for {
			b, err := src.Read(ctx)
			if errors.Is(err, io.EOF) {
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			mustWrite(t, s, b.Records...)
		}
	}
	write(nil)
	write(generate.Pos(512)) // a replay of everything after 512 changes nothing
	for _, table := range generate.Tables(opts) {
		want := map[string][]any{}
		for _, row := range generate.Expected(opts, math.MaxInt64)[table.ID] {
			want[sinktest.RowKey(table, row)] = row
		}
		if d := sinktest.Diff(table, want, rows(t, s, table)); d != "" {
			t.Fatalf("%s differs from the feed:\n%s", table.ID, d)
		}
	}
}
