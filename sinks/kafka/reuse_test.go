package kafka

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

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

// A batch abandoned while its acknowledgements are pending (the runtime's
// write timeout) keeps its record memory: the client still holds its
// records, and sends or finishes them later. Later batches, to another
// topic so the held acknowledgements do not stall them, run while the
// abandoned batch's records are still in the client; then the broker
// answers. Every record the topics hold must read as its batch encoded
// it.
func TestAbandonedBatchKeepsItsRecordMemory(t *testing.T) {
	c := fakeCluster(t)
	hold, answer := holdAcks(c)
	s := fakeSink(t, c, nil)
	other := &pipeline.Table{ID: pipeline.TableID{Database: "d", Schema: "public", Table: "others"},
		Columns: fakeTable.Columns, KeyIdx: fakeTable.KeyIdx, Generation: 1}
	label := func(n int) string { return fmt.Sprintf("value %07d", n) }
	batch := func(tbl *pipeline.Table, from, n int) []pipeline.Record {
		out := make([]pipeline.Record, n)
		for i := range out {
			k := from + i
			out[i] = pipeline.Record{Op: pipeline.OpUpdate, Table: tbl, After: []any{int64(k), label(k)},
				Version: pipeline.Version{0, 0, 0, uint64(k + 1)}, EventTime: time.Now()}
		}
		return out
	}
	settle := func(ctx context.Context, recs []pipeline.Record) error {
		p, err := s.Start(ctx, recs)
		if err != nil {
			return err
		}
		<-p.Done()
		return p.Err()
	}
	for _, tbl := range []*pipeline.Table{fakeTable, other} { // topics and schemas ready
		if err := settle(t.Context(), batch(tbl, 0, 1)); err != nil {
			t.Fatal(err)
		}
	}
	hold()
	const abandoned = 4_000
	ctx, cancel := context.WithCancel(t.Context())
	p, err := s.Start(ctx, batch(fakeTable, 1, abandoned))
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	<-p.Done()
	if err := p.Err(); !errors.Is(err, context.Canceled) {
		t.Fatalf("abandoned batch: %v, want context.Canceled", err)
	}
	// Encoded while the abandoned records are still in the client: the
	// memory a batch takes at Start is what a release would hand over.
	const later = 4_000
	var started []pipeline.Pending
	for from := 1; from <= later; from += 1_000 {
		p, err := s.Start(t.Context(), batch(other, from, 1_000))
		if err != nil {
			t.Fatal(err)
		}
		started = append(started, p)
	}
	answer()
	for _, p := range started {
		<-p.Done()
		if err := p.Err(); err != nil {
			t.Fatal(err)
		}
	}
	for topic, n := range map[string]int{fakeTopic: 0, "srv.public.others": later} {
		got, err := readRecords(t.Context(), c.ListenAddrs(), topic, false)
		if err != nil {
			t.Fatal(err)
		}
		seen := 0
		for _, m := range got {
			v, _ := header(m, headerVersion)
			ver, err := pipeline.ParseVersion(v)
			if err != nil {
				t.Fatalf("%s offset %d: version header %q: %v", topic, m.Offset, v, err)
			}
			k := int(ver[3]) - 1
			if !bytes.Contains(m.Value, []byte(label(k))) {
				t.Fatalf("%s offset %d: record %d does not hold %q", topic, m.Offset, k, label(k))
			}
			if k >= 1 {
				seen++
			}
		}
		if seen < n {
			t.Fatalf("%s: %d records of the later batches, want %d", topic, seen, n)
		}
	}
}
