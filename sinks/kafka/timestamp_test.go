package kafka

import (
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/schema"
)

// The records of one Write share one clock read: their Kafka timestamp
// and their envelope's ts_ms are the time the Write's first record was
// encoded, between the Write's start and end; a later Write's is not
// earlier.
func TestKfakeWriteTimestamps(t *testing.T) {
	c := fakeCluster(t)
	s := fakeSink(t, c, nil)
	codec, err := schema.NewCodec(fakeTable, schema.Options{ConnectorName: s.opts.ConnectorName, ServerName: s.opts.ServerName, Unchanged: s.opts.Unchanged})
	if err != nil {
		t.Fatal(err)
	}
	var bounds [2][2]time.Time
	for w := range 2 {
		bounds[w][0] = time.Now().Truncate(time.Millisecond)
		if err := s.Write(t.Context(), []pipeline.Record{fakeRec(3*w, 10), fakeRec(3*w+1, 10), fakeRec(3*w+2, 10)}); err != nil {
			t.Fatal(err)
		}
		bounds[w][1] = time.Now()
	}
	recs, err := readRecords(t.Context(), c.ListenAddrs(), fakeTopic, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 6 {
		t.Fatalf("%d records, want 6", len(recs))
	}
	for i, r := range recs {
		w := i / 3
		first := recs[3*w]
		if !r.Timestamp.Equal(first.Timestamp) {
			t.Errorf("record %d: timestamp %v, want its Write's %v", i, r.Timestamp, first.Timestamp)
		}
		if r.Timestamp.Before(bounds[w][0]) || r.Timestamp.After(bounds[w][1]) {
			t.Errorf("record %d: timestamp %v outside its Write (%v to %v)", i, r.Timestamp, bounds[w][0], bounds[w][1])
		}
		_, payload, err := schema.Unframe(r.Value)
		if err != nil {
			t.Fatal(err)
		}
		env, err := codec.DecodeEnvelope(payload)
		if err != nil {
			t.Fatal(err)
		}
		if env.TsMs == nil || *env.TsMs != r.Timestamp.UnixMilli() {
			t.Errorf("record %d: ts_ms %v, want the record's timestamp %d", i, env.TsMs, r.Timestamp.UnixMilli())
		}
	}
	if recs[3].Timestamp.Before(recs[0].Timestamp) {
		t.Errorf("the second Write's timestamp %v is before the first's %v", recs[3].Timestamp, recs[0].Timestamp)
	}
}
