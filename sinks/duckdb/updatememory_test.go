package duckdb

import (
	"path/filepath"
	"testing"

	"github.com/sluice-cdc/sluice/pipeline"
)

// A long stream of updates must not grow DuckDB's memory. Updated in
// place, its memory of updated rows grew without bound (DuckDB 1.5 frees
// it only in part at a checkpoint: 1,000,000 updates of a 910,000-row
// table held 108 MiB and rising); the sink replaces rows instead (a
// delete and an insert, merge.go), which holds none: 120 batches of
// 10,000 updates stay under a quarter of MemoryLimit.
func TestUpdatesDoNotGrowDuckDBMemory(t *testing.T) {
	const limit = 64 << 20
	s := New(Options{Path: filepath.Join(t.TempDir(), "u.duckdb"), MemoryLimit: limit}, nil)
	if err := s.Open(ctx); err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	const tables = 20 // batches of benchBatch keys
	lsn := uint64(0)
	for i := range tables {
		lsn++
		if err := s.Write(ctx, benchRecords(pipeline.OpInsert, 1+int64(i)*benchBatch, lsn)); err != nil {
			t.Fatal(err)
		}
	}
	held := func() int64 {
		var n int64
		if err := s.conn.QueryRowContext(ctx, "SELECT coalesce(sum(memory_usage_bytes), 0) FROM duckdb_memory() WHERE tag = 'ALLOCATOR'").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	most := int64(0)
	for i := 0; i < 120; i++ {
		lsn++
		recs := benchRecords(pipeline.OpUpdate, 1+int64(i%tables)*benchBatch, lsn)
		for j := range recs {
			recs[j].After[2] = "updated-" + recs[j].After[2].(string)
		}
		if err := s.Write(ctx, recs); err != nil {
			t.Fatalf("update batch %d: %v", i, err)
		}
		h := held()
		most = max(most, h)
		if h > limit/4 {
			t.Fatalf("after update batch %d DuckDB holds %d bytes for updated rows, over the budget %d", i, h, limit/4)
		}
	}
	t.Logf("at most %d MiB held between writes", most>>20)
	var rows, updated int
	if err := s.conn.QueryRowContext(ctx, `SELECT count(*), count(*) FILTER (label LIKE 'updated-%') FROM public_bench_rows`).Scan(&rows, &updated); err != nil {
		t.Fatal(err)
	}
	if rows != tables*benchBatch || updated == 0 {
		t.Fatalf("%d rows, %d updated; want %d rows", rows, updated, tables*benchBatch)
	}
	got, err := s.RowsByKey(ctx, benchTable, [][]any{{int64(1)}})
	if err != nil || len(got) != 1 {
		t.Fatalf("read after reopening: %v, %v", got, err)
	}
}
