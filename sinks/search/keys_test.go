package search

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/sluice-cdc/sluice/integration/harness"
	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/sinks/sinktest"
	"github.com/sluice-cdc/sluice/verify"
)

var (
	_ verify.KeyReader = (*Sink)(nil)
	_ verify.Scanner   = (*Sink)(nil)
)

// TestLive checks the document-side form of liveFilter.
func TestLive(t *testing.T) {
	barrier := pipeline.Version{0, 100, 0, 20}.String()
	below, above := pipeline.Version{0, 100, 0, 19}.String(), pipeline.Version{0, 100, 0, 21}.String()
	doc := func(deleted, version string) map[string]json.RawMessage {
		src := map[string]json.RawMessage{"id": json.RawMessage("1")}
		if deleted != "" {
			src[fieldDeleted] = json.RawMessage(deleted)
		}
		if version != "" {
			src[fieldVersion] = json.RawMessage(`"` + version + `"`)
		}
		return src
	}
	for _, c := range []struct {
		src     map[string]json.RawMessage
		barrier string
		want    bool
	}{
		{doc("false", below), "", true},
		{doc("", ""), "", true},
		{doc("true", above), "", false},
		{doc(`"true"`, above), "", false},
		{doc("false", above), barrier, true},
		{doc("false", barrier), barrier, true},
		{doc("false", below), barrier, false},
		{doc("false", ""), barrier, false},
		{doc("true", above), barrier, false},
	} {
		if got := live(c.src, c.barrier); got != c.want {
			t.Errorf("live(%s, %q) = %v, want %v", c.src, c.barrier, got, c.want)
		}
	}
}

// TestKeyIDMatchesRecordID checks that a key read looks up the document id
// a write of that key uses, and that keys the sink cannot stage have none.
func TestKeyIDMatchesRecordID(t *testing.T) {
	for _, r := range []pipeline.Record{row(pipeline.OpInsert, 1, 42, "a", nil), row(pipeline.OpDelete, 2, -7, nil, nil)} {
		want, _ := recordID(&r)
		img := r.After
		if img == nil {
			img = r.Before
		}
		if got, ok := keyID(acct, []any{img[0]}); !ok || got != want {
			t.Errorf("keyID = %q, %v; the write uses %q", got, ok, want)
		}
	}
	if id, ok := keyID(acct, []any{int32(42)}); ok {
		t.Errorf("an int32 key value has id %q", id)
	}
}

// testKeyReadsDuringWrites: sinktest.KeyReadsDuringWrites on this sink,
// against a real engine (the first read finds no index yet).
func testKeyReadsDuringWrites(t *testing.T, n *harness.SearchNode) {
	s := openSink(t, target(n, Options{}))
	sinktest.KeyReadsDuringWrites(t, s, 20, func(table *pipeline.Table) map[string][]any { return readMap(t, s, table) })
}

// testScanStops reads pages of 3 hits: Scan skips tombstones, does not
// hold the sink's lock while it pages (a Write from its callback goes
// through, unseen by the scan), and returns its callback's error and a
// cancelled ctx's error at once, midway through the second page.
func testScanStops(t *testing.T, n *harness.SearchNode) {
	s := openSink(t, target(n, Options{}))
	s.page = 3
	var recs []pipeline.Record
	for i := int64(1); i <= 11; i++ {
		recs = append(recs, row(pipeline.OpInsert, 10, i, "x", nil))
	}
	mustWrite(t, s, recs...)
	mustWrite(t, s, row(pipeline.OpDelete, 11, 11, nil, nil))
	seen := 0
	err := s.Scan(ctx, acct, func(r []any) error {
		if seen++; seen == 1 {
			mustWrite(t, s, row(pipeline.OpInsert, 12, 20, "late", nil))
		}
		return nil
	})
	if err != nil || seen != 10 {
		t.Fatalf("scan: %v, %d rows, want 10", err, seen)
	}
	stop := errors.New("stop")
	c, cancel := context.WithCancel(ctx)
	defer cancel()
	for _, tc := range []struct {
		ctx  context.Context
		at4  func() error
		want error
	}{
		{ctx, func() error { return stop }, stop},
		{c, func() error { cancel(); return nil }, context.Canceled},
	} {
		n := 0
		err := s.Scan(tc.ctx, acct, func([]any) error {
			if n++; n == 4 {
				return tc.at4()
			}
			return nil
		})
		if !errors.Is(err, tc.want) || n != 4 {
			t.Fatalf("scan: %v after %d rows, want %v after 4", err, n, tc.want)
		}
	}
}
