package bleve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/pipeline"
)

var products = &pipeline.Table{
	ID: pipeline.TableID{Schema: "shop", Table: "products"},
	Columns: []pipeline.Column{
		{Name: "id", Type: pipeline.TypeInt64, Key: true},
		{Name: "title", Type: pipeline.TypeString},
		{Name: "description", Type: pipeline.TypeText},
		{Name: "qty", Type: pipeline.TypeInt32},
		{Name: "added", Type: pipeline.TypeTimestampTZ},
		{Name: "active", Type: pipeline.TypeBool},
	},
	KeyIdx: []int{0}, Generation: 1,
}

func product(op pipeline.Op, v uint64, id int64, title, desc string, qty int64, day int) pipeline.Record {
	added := time.Date(2024, 1, day, 12, 0, 0, 0, time.UTC)
	return pipeline.Record{Op: op, Table: products, Version: ver(v),
		After: []any{id, title, desc, qty, pipeline.TimestampOf(added), qty > 0}}
}

// keys returns the hits' keys as "table/key" strings, sorted.
func keys(t *testing.T, res SearchResult) []string {
	t.Helper()
	var out []string
	for _, h := range res.Hits {
		out = append(out, fmt.Sprintf("%s/%v", h.Table, h.Key))
	}
	slices.Sort(out)
	return out
}

func expectSearch(t *testing.T, search func(SearchRequest) (SearchResult, error), req SearchRequest, want ...string) {
	t.Helper()
	res, err := search(req)
	if err != nil {
		t.Fatalf("search %+v: %v", req, err)
	}
	slices.Sort(want)
	if got := keys(t, res); !slices.Equal(got, want) || res.Total != uint64(len(want)) {
		t.Fatalf("search %+v: got %v (total %d), want %v", req, got, res.Total, want)
	}
}

func TestSearch(t *testing.T) {
	s := openSink(t, Options{})
	find := func(req SearchRequest) (SearchResult, error) { return s.Search(ctx, req) }
	mustWrite(t, s,
		product(pipeline.OpRead, 1, 1, "Red kettle", "A stainless steel kettle that whistles", 5, 1),
		product(pipeline.OpRead, 1, 2, "Blue teapot", "Porcelain teapot for loose leaf tea", 0, 2),
		product(pipeline.OpRead, 1, 3, "Green kettle", "Electric kettle with a blue light", 12, 3),
		change(pipeline.OpInsert, 1, int64(1), "Kettle Person", "collects kettles"))
	expectSearch(t, find, SearchRequest{Query: "kettle"}, "shop.products/[1]", "shop.products/[3]", "public.people/[1]")
	expectSearch(t, find, SearchRequest{Query: "kettle", Table: "shop.products"}, "shop.products/[1]", "shop.products/[3]")
	expectSearch(t, find, SearchRequest{Query: "title:blue"}, "shop.products/[2]")
	expectSearch(t, find, SearchRequest{Query: "blue"}, "shop.products/[2]", "shop.products/[3]")
	expectSearch(t, find, SearchRequest{Query: `"loose leaf"`}, "shop.products/[2]")
	expectSearch(t, find, SearchRequest{Query: "qty:>=5 kettle", Table: "shop.products"}, "shop.products/[1]", "shop.products/[3]")
	expectSearch(t, find, SearchRequest{Query: "+qty:>4 +qty:<10"}, "shop.products/[1]")
	expectSearch(t, find, SearchRequest{Query: `added:>="2024-01-02T00:00:00Z"`}, "shop.products/[2]", "shop.products/[3]")
	expectSearch(t, find, SearchRequest{Query: "active:false"}, "shop.products/[2]")
	expectSearch(t, find, SearchRequest{Query: "+kettle -electric", Table: "shop.products"}, "shop.products/[1]")
	expectSearch(t, find, SearchRequest{Query: "+_table:shop.products +steel"}, "shop.products/[1]")
	expectSearch(t, find, SearchRequest{Query: "id:3"}, "shop.products/[3]")

	// The hit carries the row in its stored form.
	res, err := s.Search(ctx, SearchRequest{Query: "whistles"})
	if err != nil || len(res.Hits) != 1 {
		t.Fatalf("%+v %v", res, err)
	}
	h := res.Hits[0]
	want := map[string]any{"id": json.Number("1"), "title": "Red kettle", "description": "A stainless steel kettle that whistles",
		"qty": json.Number("5"), "added": "2024-01-01T12:00:00.000000Z", "active": true}
	if h.Table != "shop.products" || h.Score <= 0 || !reflect.DeepEqual(h.Row, want) {
		t.Fatalf("hit %+v", h)
	}

	// Updates and deletes change the results; tombstones never appear.
	mustWrite(t, s, product(pipeline.OpUpdate, 2, 1, "Red jug", "A stainless steel jug", 5, 1),
		pipeline.Record{Op: pipeline.OpDelete, Table: products, Version: ver(2), Before: []any{int64(3), nil, nil, nil, nil, nil}},
		product(pipeline.OpUpdate, 1, 2, "stale kettle", "", 0, 2)) // older than the stored row: ignored
	expectSearch(t, find, SearchRequest{Query: "kettle"}, "public.people/[1]")
	expectSearch(t, find, SearchRequest{Query: "jug"}, "shop.products/[1]")
	expectSearch(t, find, SearchRequest{Query: "*", Table: "shop.products"}, "shop.products/[1]", "shop.products/[2]")
	expectSearch(t, find, SearchRequest{}, "shop.products/[1]", "shop.products/[2]", "public.people/[1]")

	// Paging.
	res, err = s.Search(ctx, SearchRequest{Size: 2, From: 1})
	if err != nil || res.Total != 3 || len(res.Hits) != 2 {
		t.Fatalf("paging: %+v %v", res, err)
	}
	if _, err := s.Search(ctx, SearchRequest{Query: `title:"unterminated`}); !errors.Is(err, ErrQuery) {
		t.Fatalf("bad query: %v", err)
	}
	if _, err := s.Search(ctx, SearchRequest{From: MaxWindow}); !errors.Is(err, ErrQuery) {
		t.Fatalf("window: %v", err)
	}
	// A From near the int limit (a query parameter) must not overflow the
	// window check and reach bleve.
	if _, err := s.Search(ctx, SearchRequest{From: math.MaxInt - 3}); !errors.Is(err, ErrQuery) {
		t.Fatalf("huge from: %v", err)
	}
}

// TestSearchLockedAndReadOnly covers `sluice search`: while a sink (the
// daemon) holds the index the package-level Search fails fast with
// ErrLocked and the sink's own Search answers; once it is closed the
// package-level Search opens the index read-only.
func TestSearchLockedAndReadOnly(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "index")
	s := openSink(t, Options{Path: dir})
	mustWrite(t, s, product(pipeline.OpInsert, 1, 1, "Red kettle", "whistles", 5, 1),
		product(pipeline.OpInsert, 1, 2, "Blue teapot", "porcelain", 1, 2))
	req := SearchRequest{Query: "kettle"}

	start := time.Now()
	c, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err := Search(c, dir, req)
	cancel()
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("search of a held index: %v", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("locked search took %v", took)
	}
	// Without a deadline the wait is DefaultLockWait.
	start = time.Now()
	if _, err := Search(ctx, dir, req); !errors.Is(err, ErrLocked) {
		t.Fatalf("search of a held index: %v", err)
	}
	if took := time.Since(start); took > DefaultLockWait+5*time.Second {
		t.Fatalf("locked search took %v", took)
	}
	expectSearch(t, func(r SearchRequest) (SearchResult, error) { return s.Search(ctx, r) }, req, "shop.products/[1]")

	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Search(ctx, req); !errors.Is(err, ErrClosed) {
		t.Fatalf("search of a closed sink: %v", err)
	}
	expectSearch(t, func(r SearchRequest) (SearchResult, error) { return Search(ctx, dir, r) }, req, "shop.products/[1]")

	// While a reader holds the index, the sink's Open fails retryably
	// after its bounded wait, then succeeds once the reader is gone.
	defer func(w time.Duration) { lockWait = w }(lockWait)
	lockWait = 200 * time.Millisecond
	ro, err := openReadOnly(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	s2 := New(Options{Path: dir}, nil)
	if err := s2.Open(ctx); !errors.Is(err, ErrLocked) || pipeline.IsFatal(err) {
		t.Fatalf("open while a reader holds the index: %v", err)
	}
	ro.Close()
	if err := s2.Open(ctx); err != nil {
		t.Fatal(err)
	}
	defer s2.Close(ctx)
	expectSearch(t, func(r SearchRequest) (SearchResult, error) { return s2.Search(ctx, r) }, req, "shop.products/[1]")
}

func TestSearchWithoutIndex(t *testing.T) {
	if _, err := Search(ctx, filepath.Join(t.TempDir(), "none"), SearchRequest{}); !errors.Is(err, ErrNoIndex) {
		t.Fatalf("got %v", err)
	}
}

// TestSearchDuringWrites searches while another goroutine writes: searches
// never fail and see a growing, consistent set of rows.
func TestSearchDuringWrites(t *testing.T) {
	s := openSink(t, Options{})
	const batches = 20
	done := make(chan error, 1)
	go func() {
		for n := 0; n < batches; n++ {
			recs := make([]pipeline.Record, 0, 10)
			for i := 0; i < 10; i++ {
				id := int64(n*10 + i + 1)
				recs = append(recs, product(pipeline.OpInsert, uint64(n+1), id, "lamp", "a desk lamp", id, 1))
			}
			if err := s.Write(ctx, recs); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	var last uint64
	for running := true; running; {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			running = false
		default:
		}
		res, err := s.Search(ctx, SearchRequest{Query: "lamp"})
		if err != nil {
			t.Fatal(err)
		}
		if res.Total < last || res.Total%10 != 0 {
			t.Fatalf("search saw %d rows after %d", res.Total, last)
		}
		last = res.Total
	}
	if res, err := s.Search(ctx, SearchRequest{Query: "lamp"}); err != nil || res.Total != 10*batches {
		t.Fatalf("final search: %d, %v", res.Total, err)
	}
}

// TestScanStops checks that Scan reads one snapshot (a Write during the
// scan changes nothing it yields), and that it returns its callback's
// error and a cancelled ctx's error at once.
func TestScanStops(t *testing.T) {
	s := openSink(t, Options{})
	for i := range 11 { // a batch each: several segments
		mustWrite(t, s, change(pipeline.OpInsert, uint64(i+1), int64(i), "n", nil))
	}
	mustWrite(t, s, del(20, 10), product(pipeline.OpInsert, 21, 1, "t", "d", 1, 1))
	var ids []int64
	err := s.Scan(ctx, people, func(r []any) error {
		if len(ids) == 0 {
			mustWrite(t, s, del(22, 9), change(pipeline.OpInsert, 23, int64(30), "late", nil))
		}
		ids = append(ids, r[0].(int64))
		return nil
	})
	slices.Sort(ids)
	if want := []int64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}; err != nil || !slices.Equal(ids, want) {
		t.Fatalf("scan: %v, ids %v, want %v", err, ids, want)
	}
	stop := errors.New("stop")
	c, cancel := context.WithCancel(ctx)
	defer cancel()
	for _, tc := range []struct {
		ctx  context.Context
		at3  func() error
		want error
	}{
		{ctx, func() error { return stop }, stop},
		{c, func() error { cancel(); return nil }, context.Canceled},
	} {
		n := 0
		err := s.Scan(tc.ctx, people, func([]any) error {
			if n++; n == 3 {
				return tc.at3()
			}
			return nil
		})
		if !errors.Is(err, tc.want) || n != 3 {
			t.Fatalf("scan: %v after %d rows, want %v after 3", err, n, tc.want)
		}
	}
}
