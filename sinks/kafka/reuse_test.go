package kafka

import (
	"fmt"
	"testing"

	"github.com/sluice-cdc/sluice/integration/harness"
	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/schema"
)

// A batch's record memory goes back to the pool once its promises fired
// and its outcome was read, and later batches write into it: with many
// batches in flight at once, each written as soon as the one before was
// handed over, every record the broker holds must still be the one its
// batch encoded — no value overwritten by a later batch's, none lost or
// doubled. Row envelope, so that every value decodes to its row.
func TestReleasedRecordMemoryIsReusedOnlyAfterItsBatch(t *testing.T) {
	harness.SkipShort(t, "starts a Kafka broker")
	k := harness.KafkaT(t)
	for _, exactly := range []bool{false, true} {
		t.Run(fmt.Sprintf("exactly_once=%v", exactly), func(t *testing.T) {
			reg, _ := registryFor(t)
			name := fmt.Sprintf("reuse%v", exactly)
			tbl := &pipeline.Table{ID: pipeline.TableID{Database: "shop", Schema: "public", Table: name}, KeyIdx: []int{0}, Generation: 1,
				Columns: []pipeline.Column{{Name: "id", Type: pipeline.TypeInt64, Key: true}, {Name: "label", Type: pipeline.TypeString}}}
			s := openSink(t, k, reg, func(o *Options) {
				o.Envelope, o.SubjectStrategy, o.Unchanged = EnvelopeRow, StrategyRecord, false
				o.ExactlyOnce, o.Pipeline = exactly, name
			})
			const batches, per, inFlight = 60, 400, 8
			label := func(id int64) string { return fmt.Sprintf("row %06d with a label long enough to fill the blocks", id) }
			var pend []pipeline.Pending
			settle := func(p pipeline.Pending) {
				<-p.Done()
				if err := p.Err(); err != nil {
					t.Fatal(err)
				}
			}
			for b := range batches {
				recs := make([]pipeline.Record, per)
				for i := range recs {
					id := int64(b*per + i)
					recs[i] = pipeline.Record{Op: pipeline.OpInsert, Table: tbl, After: []any{id, label(id)},
						Version: pipeline.Version{0, uint64(b + 1), 0, uint64(i + 1)}}
				}
				p, err := s.Start(t.Context(), recs)
				if err != nil {
					t.Fatal(err)
				}
				if pend = append(pend, p); len(pend) == inFlight {
					settle(pend[0])
					pend = pend[1:]
				}
			}
			for _, p := range pend {
				settle(p)
			}
			codec, err := schema.NewCodec(tbl, schema.Options{ConnectorName: "postgresql", ServerName: "srv"})
			if err != nil {
				t.Fatal(err)
			}
			got, err := readRecords(t.Context(), k.Brokers(), "srv.public."+name, true)
			if err != nil {
				t.Fatal(err)
			}
			seen := map[int64]int{}
			for _, m := range got {
				_, payload, err := schema.Unframe(m.Value)
				if err != nil {
					t.Fatal(err)
				}
				row, err := codec.DecodeValue(payload)
				if err != nil {
					t.Fatalf("offset %d: %v", m.Offset, err)
				}
				id, _ := row.Values[0].(int64)
				if row.Values[1] != label(id) {
					t.Fatalf("offset %d: row %d reads label %q", m.Offset, id, row.Values[1])
				}
				seen[id]++
			}
			for id := range int64(batches * per) {
				if seen[id] != 1 {
					t.Fatalf("row %d read %d times (of %d records)", id, seen[id], len(got))
				}
			}
		})
	}
}
