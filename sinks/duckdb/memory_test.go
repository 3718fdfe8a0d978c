package duckdb

import (
	"database/sql"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-cdc/sluice/pipeline"
)

// randomKeyBatch is n inserts of benchTable rows with scattered 64-bit
// keys, the index shape that costs DuckDB the most memory.
func randomKeyBatch(batch, n int) []pipeline.Record {
	recs := benchRecords(pipeline.OpInsert, int64(batch)*int64(n), uint64(batch+1))[:n]
	for i := range recs {
		g := uint64(batch*n + i)
		recs[i].After[0] = int64((g * 0x9E3779B97F4A7C15) >> 1)
	}
	return recs
}

func memoryOf(t *testing.T, s *Sink, tag string) int64 {
	t.Helper()
	var n int64
	if err := s.conn.QueryRowContext(ctx, "SELECT coalesce(sum(memory_usage_bytes), 0) FROM duckdb_memory() WHERE tag = ?", tag).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// With memory_limit 0 the limit follows the primary-key index. Scattered
// keys make the largest index: with a fixed 32MiB a write failed to pin
// the index at about 550,000 of them, while a followed limit takes
// 1,000,000 without a single out-of-memory retry and still holds DuckDB
// far below its default of 80% of the machine, the cached table blocks
// within the headroom.
func TestMemoryLimitFollowsTheIndexes(t *testing.T) {
	s := openSink(t, Options{Path: filepath.Join(t.TempDir(), "m.duckdb")})
	var most int64
	for b := range 100 {
		mustWrite(t, s, randomKeyBatch(b, 10_000)...)
		s.mu.Lock()
		most = max(most, s.limit)
		if cached := memoryOf(t, s, "BASE_TABLE"); cached > s.headroom {
			t.Errorf("batch %d: cached table blocks %d MiB, over the %d MiB headroom", b, cached>>20, s.headroom>>20)
		}
		s.mu.Unlock()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.headroom != startHeadroom {
		t.Errorf("headroom %d: a write ran out of memory", s.headroom)
	}
	var setting string
	if err := s.conn.QueryRowContext(ctx, "SELECT current_setting('memory_limit')").Scan(&setting); err != nil {
		t.Fatal(err)
	}
	if s.limit < startHeadroom || most > 128<<20 {
		t.Errorf("memory_limit %d MiB (at most %d MiB; DuckDB says %s)", s.limit>>20, most>>20, setting)
	}
	t.Logf("memory_limit %s at the end, at most %d MiB; index %d MiB", setting, most>>20, memoryOf(t, s, "ART_INDEX")>>20)
}

// A write DuckDB cannot fit in the headroom is Overloaded, and the
// headroom doubles until it fits: the retry succeeds.
func TestMemoryHeadroomGrowsWhenAWriteOutgrowsIt(t *testing.T) {
	s := openSink(t, Options{Path: filepath.Join(t.TempDir(), "m.duckdb")})
	s.mu.Lock()
	s.headroom = limitStep / 2
	s.mu.Unlock()
	recs := randomKeyBatch(0, 8000)
	pad := strings.Repeat("2 KB of text ", 160)
	for i := range recs {
		recs[i].After[2] = pad + recs[i].After[2].(string)
	}
	var overloads int
	for {
		err := s.Write(ctx, recs)
		if err == nil {
			break
		}
		if !pipeline.IsOverloaded(err) {
			t.Fatal(err)
		}
		if overloads++; overloads > 10 {
			t.Fatalf("still out of memory after %d doublings: %v", overloads, err)
		}
	}
	if overloads == 0 {
		t.Fatal("8,000 rows of 2 KB fit in the least limit: the test shows nothing")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.headroom != limitStep/2<<overloads {
		t.Errorf("headroom %d after %d overloads", s.headroom, overloads)
	}
	var n int
	if err := s.conn.QueryRowContext(ctx, "SELECT count(*) FROM "+s.qualified("public_bench_rows")).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != len(recs) {
		t.Fatalf("%d rows after the retries, want %d", n, len(recs))
	}
	t.Logf("%d overloads, headroom %d bytes, memory_limit %d MiB", overloads, s.headroom, s.limit>>20)
}

// The file is written in row groups of Options.RowGroupSize rows (DuckDB
// compresses a group at once, so memory grows with its size), and opens
// as a plain DuckDB database afterwards, as a reader of the sink would
// open it.
func TestRowGroupsFollowTheOptionAndTheFileOpensPlainly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "g.duckdb")
	s := New(Options{Path: path}, nil)
	if err := s.Open(ctx); err != nil {
		t.Fatal(err)
	}
	for b := range 5 {
		mustWrite(t, s, randomKeyBatch(b, 10_000)...)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("duckdb", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n, groups int
	if err := db.QueryRow(`SELECT count(*) FROM public_bench_rows`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRow(`SELECT count(DISTINCT row_group_id) FROM pragma_storage_info('public_bench_rows')`).Scan(&groups); err != nil {
		t.Fatal(err)
	}
	// 50,000 rows: 4 groups of at most 16,384 (DuckDB's default would
	// make one).
	if n != 50_000 || groups < 4 {
		t.Fatalf("%d rows in %d row groups; want 50,000 in at least 4", n, groups)
	}
}
