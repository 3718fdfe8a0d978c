package duckdb

import (
	"context"
	"path/filepath"
	"testing"

	"go.uber.org/zap"
)

// An open sink has set DuckDB's allocator to return freed pages at once,
// for the arenas in use and for those created later (allocator.go).
func TestOpenSinkReturnsFreedPagesAtOnce(t *testing.T) {
	s := New(Options{Name: "alloc", Path: filepath.Join(t.TempDir(), "a.duckdb")}, zap.NewNop())
	if err := s.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	for _, name := range []string{"arenas.dirty_decay_ms", "arenas.muzzy_decay_ms", "arena.0.dirty_decay_ms", "arena.0.muzzy_decay_ms"} {
		if got := allocatorDecay(name); got != 0 {
			t.Errorf("%s = %d, want 0", name, got)
		}
	}
}
