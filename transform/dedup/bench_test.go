package dedup

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/pipeline"
)

// BenchmarkProcess runs an outbox's changes through the dedup in batches
// of 1,000, a checkpoint after each (so the sweep runs): every event
// written twice, each row inserted then deleted, a millisecond of source
// time apart. It reports records per second and the state's size.
func BenchmarkProcess(b *testing.B) {
	dropped := 0
	o := options(b.TempDir(), &dropped)
	o.TTL = 10 * time.Second
	d, err := Open(o)
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	if err := d.Begin(context.Background(), false); err != nil {
		b.Fatal(err)
	}
	batch := make([]pipeline.Record, 1000)
	v, id := uint64(0), int64(0)
	b.ResetTimer()
	start := time.Now()
	for i := range b.N {
		for j := 0; j < len(batch); j += 4 {
			ev := fmt.Sprint("e", id/2)
			for k, op := range []pipeline.Op{pipeline.OpInsert, pipeline.OpInsert, pipeline.OpDelete, pipeline.OpDelete} {
				v++
				row := id + int64(k%2)
				batch[j+k] = rec(op, row, ev, time.Duration(v)*time.Millisecond, v)
			}
			id += 2
		}
		if _, err := d.Process(context.Background(), batch); err != nil {
			b.Fatal(err)
		}
		d.Checkpointed(uint64(i + 1))
	}
	b.ReportMetric(float64(b.N*len(batch))/time.Since(start).Seconds(), "records/s")
	b.ReportMetric(0, "ns/op")
}
