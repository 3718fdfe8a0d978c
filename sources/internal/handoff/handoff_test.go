package handoff

import (
	"context"
	"errors"
	"testing"

	"github.com/sluice-cdc/sluice/pipeline"
)

type item struct {
	n     int  // records
	final bool // a transaction's last chunk
	id    int
}

func part(it *item) Part {
	p := Part{Records: make([]pipeline.Record, it.n)}
	for i := range p.Records {
		p.Records[i].TxID = uint64(it.id)
	}
	if it.final {
		p.Pos = pipeline.Position(`{"id":` + string(rune('0'+it.id)) + `}`)
	}
	return p
}

func queue(items ...item) (*Queue[item], chan item, chan struct{}) {
	out, done := make(chan item, len(items)+1), make(chan struct{})
	for _, it := range items {
		out <- it
	}
	return New("test source", out, done, func() error { return nil }, part), out, done
}

func TestBatchMergesWholeTransactionsOnly(t *testing.T) {
	// 1, 2 whole; 3 a first chunk (no position); 4 its last chunk.
	q, _, _ := queue(item{2, true, 1}, item{3, true, 2}, item{4, false, 3}, item{1, true, 4})
	var seen []int
	hand := func(it *item) { seen = append(seen, it.id) }
	first, err := q.Next(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	b := q.Batch(first, 100, hand)
	if len(b.Records) != 5 || string(b.Pos) != `{"id":2}` || len(seen) != 2 {
		t.Fatalf("first batch: %d records at %s, handed %v; want 5 at id 2, items 1 and 2", len(b.Records), b.Pos, seen)
	}
	if b.Records[0].TxID != 1 || b.Records[4].TxID != 2 {
		t.Fatalf("records out of order: %+v", b.Records)
	}
	// The first chunk of 3 stands alone, without a position (Invariant 2).
	first, _ = q.Next(context.Background())
	if b := q.Batch(first, 100, hand); len(b.Records) != 4 || b.Pos != nil {
		t.Fatalf("partial chunk: %d records at %s, want 4 and no position", len(b.Records), b.Pos)
	}
	first, _ = q.Next(context.Background())
	if b := q.Batch(first, 100, hand); len(b.Records) != 1 || string(b.Pos) != `{"id":4}` {
		t.Fatalf("last chunk: %d records at %s", len(b.Records), b.Pos)
	}
	if len(seen) != 4 || seen[2] != 3 || seen[3] != 4 {
		t.Fatalf("handed over %v, want 1 2 3 4", seen)
	}
}

func TestBatchKeepsWhatDoesNotFitForNext(t *testing.T) {
	q, _, _ := queue(item{3, true, 1}, item{3, true, 2}, item{3, true, 3})
	first, _ := q.Next(context.Background())
	b := q.Batch(first, 7, func(*item) {})
	if len(b.Records) != 6 || string(b.Pos) != `{"id":2}` {
		t.Fatalf("%d records at %s, want 6 at id 2", len(b.Records), b.Pos)
	}
	first, _ = q.Next(context.Background())
	if first.id != 3 {
		t.Fatalf("next item %d, want the one left over (3)", first.id)
	}
}

func TestNextDrainsBeforeReportingTheStop(t *testing.T) {
	boom := errors.New("boom")
	out, done := make(chan item, 2), make(chan struct{})
	q := New("test source", out, done, func() error { return boom }, part)
	out <- item{1, true, 1}
	close(done)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if it, err := q.Next(ctx); err != nil || it.id != 1 {
		t.Fatalf("queued item: %+v, %v; want it before the stop and the cancellation", it, err)
	}
	if _, err := q.Next(context.Background()); !errors.Is(err, boom) {
		t.Fatalf("after the queue drained: %v, want the reader's failure", err)
	}
	q2 := New("test source", make(chan item), done, func() error { return nil }, part)
	if _, err := q2.Next(context.Background()); err == nil || err.Error() != "test source: closed" {
		t.Fatalf("clean stop: %v", err)
	}
}
