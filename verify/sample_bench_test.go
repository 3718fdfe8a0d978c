package verify

import (
	"context"
	"io"
	"strconv"
	"testing"

	"github.com/sluice-cdc/sluice/pipeline"
)

// benchSource hands over n batches of 1000 changes over 10,000 keys, each
// batch a transaction with its own position.
type benchSource struct {
	batches, next int
}

func (s *benchSource) Open(context.Context, pipeline.Position) error { return nil }
func (s *benchSource) Read(context.Context) (pipeline.Batch, error) {
	if s.next == s.batches {
		return pipeline.Batch{}, io.EOF
	}
	s.next++
	pos := pipeline.Position(strconv.Itoa(s.next))
	recs := make([]pipeline.Record, 1000)
	for i := range recs {
		id := int64((s.next*7919 + i*104729) % 10000)
		recs[i] = pipeline.Record{Op: pipeline.OpUpdate, Table: sampleTable, After: []any{id, "value"}, Pos: pos,
			Version: pipeline.Version{0, uint64(s.next), 0, uint64(i)}, Size: 64}
	}
	return pipeline.Batch{Records: recs, Pos: pos}, nil
}
func (s *benchSource) Ack(context.Context, pipeline.Position) error { return nil }
func (s *benchSource) Close(context.Context) error                  { return nil }

type nopSink struct{}

func (nopSink) Open(context.Context) error                     { return nil }
func (nopSink) Write(context.Context, []pipeline.Record) error { return nil }
func (nopSink) Close(context.Context) error                    { return nil }

type memStore struct{ cp pipeline.Checkpoint }

func (m *memStore) Load(context.Context, string) (pipeline.Checkpoint, bool, error) {
	return m.cp, m.cp.Position != nil, nil
}
func (m *memStore) Commit(_ context.Context, cp pipeline.Checkpoint) error { m.cp = cp; return nil }
func (m *memStore) Close() error                                           { return nil }

// BenchmarkRuntimeWithSampler is what continuous verification costs the
// pipeline: the runtime moving 200,000 changes from a source to a sink
// that does nothing (so the sampler's share is as large as it can be),
// without a sampler (the reference, in the same run) and with one at
// rates 0.01 and 1. The checker does not run: its cost is its reads,
// bounded by max_keys_per_second. Compare ns/record across the three.
func BenchmarkRuntimeWithSampler(b *testing.B) {
	for _, c := range []struct {
		name string
		rate float64
	}{{"reference", 0}, {"rate=0.01", 0.01}, {"rate=1", 1}} {
		b.Run(c.name, func(b *testing.B) {
			for range b.N {
				var tap pipeline.Tap
				if c.rate > 0 {
					db := &sampleDB{rows: map[int64]string{}}
					tap = NewSampler(db, []NamedSink{{Name: "s", Sink: &sampleHeld{}}}, SampleOptions{Rate: c.rate}, nil, nil)
				}
				rt, err := pipeline.New(pipeline.Config{Pipeline: "bench"}, &benchSource{batches: 200}, []pipeline.NamedSink{{Name: "s", Sink: nopSink{}}},
					&memStore{}, pipeline.Options{Tap: tap})
				if err != nil {
					b.Fatal(err)
				}
				if err := rt.Run(context.Background()); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*200*1000), "ns/record")
		})
	}
}
