package duckdb

import (
	"path/filepath"
	"testing"

	"github.com/sluice-cdc/sluice/pipeline"
)

// A long stream of updates would grow DuckDB's memory of updated rows
// without bound; the sink reopens the database once it passes the budget
// (a quarter of MemoryLimit here), after the batch committed, and every
// later write and read works on the reopened database.
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
	reopened, most := 0, int64(0)
	for i := 0; i < 120 && reopened < 2; i++ {
		lsn++
		recs := benchRecords(pipeline.OpUpdate, 1+int64(i%tables)*benchBatch, lsn)
		for j := range recs {
			recs[j].After[2] = "updated-" + recs[j].After[2].(string)
		}
		db := s.db
		if err := s.Write(ctx, recs); err != nil {
			t.Fatalf("update batch %d: %v", i, err)
		}
		if s.db != db {
			reopened++
		}
		h := held()
		most = max(most, h)
		if h > limit/4 {
			t.Fatalf("after update batch %d DuckDB holds %d bytes for updated rows, over the budget %d", i, h, limit/4)
		}
	}
	if reopened < 2 {
		t.Fatalf("the database was reopened %d times in 120 update batches; want 2", reopened)
	}
	t.Logf("reopened %d times; at most %d MiB held between writes", reopened, most>>20)
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

// An in-memory database is never reopened: that would lose it.
func TestInMemoryDatabaseIsNotReopened(t *testing.T) {
	s := New(Options{Path: ":memory:", MemoryLimit: 64 << 20}, nil)
	if err := s.Open(ctx); err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	lsn := uint64(1)
	if err := s.Write(ctx, benchRecords(pipeline.OpInsert, 1, lsn)); err != nil {
		t.Fatal(err)
	}
	db := s.db
	for i := 0; i < 40; i++ {
		lsn++
		if err := s.Write(ctx, benchRecords(pipeline.OpUpdate, 1, lsn)); err != nil {
			t.Fatal(err)
		}
	}
	if s.db != db {
		t.Fatal("the in-memory database was reopened")
	}
	var n int
	if err := s.conn.QueryRowContext(ctx, `SELECT count(*) FROM public_bench_rows`).Scan(&n); err != nil || n != benchBatch {
		t.Fatalf("%d rows (%v); want %d", n, err, benchBatch)
	}
}
