package bleve

import (
	"path/filepath"
	"strconv"
	"testing"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/sinks/sinktest"
	"github.com/sluice-cdc/sluice/sinks/upsert"
)

// A crash after the fill of an added column rewrote the documents but
// before the state recorded the column: the restarted sink finds the
// column unknown again, rewrites only the documents still lacking it
// (none here), records it, and every older row holds the missing value
// with its own version (Invariant 4: the fill changes no version).
func TestAddedColumnFillResumesAfterACrash(t *testing.T) {
	path := filepath.Join(t.TempDir(), "index")
	s := openSink(t, Options{Path: path})
	const n = 2500 // more than one fill flush
	var recs []pipeline.Record
	for i := 1; i <= n; i++ {
		recs = append(recs, change(pipeline.OpInsert, uint64(i), int64(i), "p"+strconv.Itoa(i), nil))
	}
	mustWrite(t, s, recs...)
	v2 := &pipeline.Table{ID: people.ID, KeyIdx: people.KeyIdx, Generation: 2,
		Columns: append(append([]pipeline.Column{}, people.Columns...), pipeline.Column{Name: "tier", Type: pipeline.TypeText, Nullable: true, Missing: "basic"})}
	// The fill alone, as a crash after it would leave it.
	tb := &upsert.TableBatch{ID: v2.ID, Target: tablePrefix(v2.ID), Cols: v2.Columns}
	s.mu.Lock()
	err := s.fillMissing(ctx, []*upsert.TableBatch{tb})
	_, known := s.state.Tables[tb.Target].byName["tier"]
	s.mu.Unlock()
	if err != nil || known {
		t.Fatalf("fill: %v, column recorded %v; want filled and not recorded", err, known)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	s = openSink(t, Options{Path: path})
	mustWrite(t, s, pipeline.Record{Op: pipeline.OpUpdate, Table: v2, Version: ver(n + 1), After: []any{int64(1), "p1'", nil, "gold"}})
	got := rows(t, s, v2)
	if len(got) != n {
		t.Fatalf("%d rows, want %d", len(got), n)
	}
	for i := 1; i <= n; i++ {
		want := []any{int64(i), "p" + strconv.Itoa(i), nil, "basic"}
		if i == 1 {
			want = []any{int64(1), "p1'", nil, "gold"}
		}
		key := sinktest.RowKey(v2, want)
		if d := sinktest.Diff(v2, map[string][]any{key: want}, map[string][]any{key: got[key]}); d != "" {
			t.Fatal(d)
		}
		if v, _, ok := storedDoc(t, s, strconv.Itoa(i)); i > 1 && (!ok || v != ver(uint64(i))) {
			t.Fatalf("row %d: version %s; the fill changed it", i, v)
		}
	}
}
