package join

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/pipeline/binform"
	"github.com/sluice-cdc/sluice/transform/state"
)

// BenchmarkJoin measures order inserts joined with their customers, in
// batches of 1,000, against the state store's own floor measured in the
// same run: the same batches' rows put into the state's engine (pebble)
// with one commit per batch and nothing else (the join puts each row, its index entry and its
// emitted version, and reads the customer).
//
//	go test -run '^$' -bench Join -benchtime 1x ./transform/join/
func BenchmarkJoin(b *testing.B) {
	const rows, batch, custs = 200_000, 1_000, 10_000
	mk := func(from int) []pipeline.Record {
		out := make([]pipeline.Record, batch)
		for i := range out {
			id := int64(from + i)
			out[i] = rec(pipeline.OpInsert, orders, ver(uint64(2+id)), nil, order(id, 1+id%custs, fmt.Sprint("note ", id)))
		}
		return out
	}
	for range b.N {
		dir := b.TempDir()
		j, err := Open(Options{Output: "public.order_docs", From: "public.orders", Dir: dir,
			With: []Lookup{{Table: "public.customers", On: []string{"customer_id"}, As: "customer"}}})
		if err != nil {
			b.Fatal(err)
		}
		if err := j.Begin(context.Background(), false); err != nil {
			b.Fatal(err)
		}
		cs := make([]pipeline.Record, custs)
		for i := range cs {
			cs[i] = rec(pipeline.OpInsert, customers, ver(1), nil, customer(int64(i+1), fmt.Sprint("customer ", i)))
		}
		if _, err := j.Process(context.Background(), cs); err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		t0 := time.Now()
		for from := 0; from < rows; from += batch {
			if _, err := j.Process(context.Background(), mk(from)); err != nil {
				b.Fatal(err)
			}
		}
		joinRate := rows / time.Since(t0).Seconds()
		b.StopTimer()
		_ = j.Close()

		floor, err := state.Open(state.Spec{What: "floor", Dir: b.TempDir(), File: "floor", Engine: state.Pebble,
			Spaces: []state.Space{{Name: "rows"}, {Name: "meta"}}, Meta: "meta"})
		if err != nil {
			b.Fatal(err)
		}
		t0 = time.Now()
		for from := 0; from < rows; from += batch {
			recs := mk(from)
			err := floor.Update(time.Time{}, func(tx *state.Tx) error {
				bk, err := tx.Space("rows")
				if err != nil {
					return err
				}
				for i := range recs {
					k, _ := binform.RowKey(orders, recs[i].After)
					e := &entry{version: recs[i].Version, names: []string{"id", "customer_id", "note"}, values: recs[i].After}
					v, err := e.encode()
					if err != nil {
						return err
					}
					if err := bk.Put(k, v); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
		}
		floorRate := rows / time.Since(t0).Seconds()
		_ = floor.Close()
		b.ReportMetric(joinRate, "rows/s")
		b.ReportMetric(floorRate, "floor-rows/s")
		b.ReportMetric(joinRate/floorRate, "x-floor")
		b.StartTimer()
	}
}
