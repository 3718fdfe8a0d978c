package generate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/pipeline/sourcetest"
)

var ctx = context.Background()

func readAll(t *testing.T, opts Options, from pipeline.Position) []pipeline.Batch {
	t.Helper()
	s := New(opts)
	if err := s.Open(ctx, from); err != nil {
		t.Fatal(err)
	}
	var out []pipeline.Batch
	for {
		b, err := s.Read(ctx)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
}

func dump(batches []pipeline.Batch) []string {
	var out []string
	for _, b := range batches {
		for _, r := range b.Records {
			out = append(out, fmt.Sprintf("%s %s %v before=%v after=%v pos=%s t=%v",
				r.Table.ID, r.Op, r.Version, r.Before, r.After, b.Pos, r.EventTime))
		}
	}
	return out
}

var small = Options{Seed: 42, InitialRows: 20, Changes: 600, Batch: 32}

func TestDeterministic(t *testing.T) {
	a, b := dump(readAll(t, small, nil)), dump(readAll(t, small, nil))
	if len(a) != 660 {
		t.Fatalf("%d records, want 60 initial + 600 changes", len(a))
	}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("record %d differs:\n%s\n%s", i, a[i], b[i])
		}
	}
	other := small
	other.Seed = 43
	c := dump(readAll(t, other, nil))
	same := 0
	for i := range a {
		if a[i] == c[i] {
			same++
		}
	}
	if same == len(a) {
		t.Fatal("another seed produced the same feed")
	}
}

func TestPositionsAndVersions(t *testing.T) {
	var seq int64
	for _, b := range readAll(t, small, nil) {
		if b.Pos == nil || len(b.Records) == 0 || len(b.Records) > small.Batch {
			t.Fatalf("batch with %d records, pos %s", len(b.Records), b.Pos)
		}
		for _, r := range b.Records {
			seq++
			if r.Version != (pipeline.Version{0, 0, 0, uint64(seq)}) {
				t.Fatalf("record %d has version %v", seq, r.Version)
			}
		}
		if got, _ := ParsePos(b.Pos); got != seq {
			t.Fatalf("pos %s after %d changes", b.Pos, seq)
		}
	}
}

func TestResumeEquivalence(t *testing.T) {
	full := dump(readAll(t, small, nil))
	for _, k := range []int64{0, 1, 45, 60, 333, 659, 660} {
		got := dump(readAll(t, small, Pos(k)))
		want := full[k:]
		if len(got) != len(want) {
			t.Fatalf("from %d: %d records, want %d", k, len(got), len(want))
		}
		for i := range want {
			// Batches end at multiples of Batch, so positions match too.
			if got[i] != want[i] {
				t.Fatalf("from %d: record %d differs:\n%s\n%s", k, i, got[i], want[i])
			}
		}
	}
	if err := New(small).Open(ctx, Pos(661)); err == nil || !pipeline.IsFatal(err) {
		t.Fatalf("opening past the end: %v", err)
	}
}

func TestMixProportions(t *testing.T) {
	opts := Options{Seed: 7, Tables: 2, InitialRows: 100, Changes: 20000, Batch: 500, Mix: Mix{Insert: 3, Update: 5, Delete: 2}}
	count := map[pipeline.Op]int{}
	for _, r := range dump(readAll(t, opts, nil))[200:] {
		switch {
		case strings.Contains(r, " c "):
			count[pipeline.OpInsert]++
		case strings.Contains(r, " u "):
			count[pipeline.OpUpdate]++
		case strings.Contains(r, " d "):
			count[pipeline.OpDelete]++
		}
	}
	for op, want := range map[pipeline.Op]float64{pipeline.OpInsert: 0.3, pipeline.OpUpdate: 0.5, pipeline.OpDelete: 0.2} {
		// Empty tables force an insert now and then, so allow some slack.
		if got := float64(count[op]) / 20000; math.Abs(got-want) > 0.03 {
			t.Errorf("op %s: share %.3f, want about %.2f (%v)", op, got, want, count)
		}
	}
}

func TestExpectedMatchesTheFeed(t *testing.T) {
	live := map[pipeline.TableID]map[string][]any{}
	var seq int64
	check := func() {
		want := Expected(small, seq)
		for id, rows := range want {
			if len(rows) != len(live[id]) {
				t.Fatalf("after %d: %s has %d rows, feed gives %d", seq, id, len(rows), len(live[id]))
			}
			for k, row := range rows {
				if fmt.Sprint(row) != fmt.Sprint(live[id][k]) {
					t.Fatalf("after %d: %s row %s: %v, feed gives %v", seq, id, k, row, live[id][k])
				}
			}
		}
	}
	for _, b := range readAll(t, small, nil) {
		for _, r := range b.Records {
			seq++
			if live[r.Table.ID] == nil {
				live[r.Table.ID] = map[string][]any{}
			}
			switch r.Op {
			case pipeline.OpDelete:
				delete(live[r.Table.ID], KeyText(r.Before[0]))
			default:
				live[r.Table.ID][KeyText(r.After[0])] = r.After
			}
		}
		check()
	}
	if got := Expected(small, math.MaxInt64); fmt.Sprint(len(got)) != "3" {
		t.Fatalf("expected tables: %d", len(got))
	}
}

func TestEOFAndRate(t *testing.T) {
	opts := Options{Seed: 1, Tables: 1, Changes: 300, Rate: 3000, Batch: 50}
	start := time.Now()
	n := len(dump(readAll(t, opts, nil)))
	if d := time.Since(start); n != 300 || d < 80*time.Millisecond || d > 2*time.Second {
		t.Fatalf("%d records in %v; want 300 in about 100ms", n, d)
	}
	s := New(opts)
	if err := s.Open(ctx, Pos(300)); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := s.Read(ctx); !errors.Is(err, io.EOF) {
			t.Fatalf("at the end: %v", err)
		}
	}
	// Catching up is neither paced nor slow.
	slow := Options{Seed: 1, Rate: 1, InitialRows: 10}
	start = time.Now()
	if err := New(slow).Open(ctx, Pos(500_000)); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("catch-up to 500k took %v", d)
	}
}

func TestAck(t *testing.T) {
	s := New(small)
	if err := s.Open(ctx, nil); err != nil {
		t.Fatal(err)
	}
	b, err := s.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Ack(ctx, b.Pos); err != nil || s.Acked() != 32 {
		t.Fatalf("ack: %v, acked %d", err, s.Acked())
	}
}

func TestSourceConformance(t *testing.T) {
	sourcetest.Run(t, sourcetest.Config{
		New:         func(*testing.T) pipeline.Source { return New(small) },
		Records:     1000,
		ExactResume: true,
		Blocking: func(*testing.T) pipeline.Source {
			return New(Options{Seed: 1, Rate: 0.5, Batch: 1})
		},
	})
}
