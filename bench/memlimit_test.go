package bench

import "testing"

// The bench's default pipeline parses, and its limit counts the
// incremental snapshot's windows (Postgres pipelines run the engine).
func TestDaemonMemoryLimit(t *testing.T) {
	limit, err := daemonMemoryLimit()
	if err != nil {
		t.Fatal(err)
	}
	if limit != 192<<20 {
		t.Fatalf("the daemon's default memory limit = %d MiB, want 192 MiB", limit>>20)
	}
}
