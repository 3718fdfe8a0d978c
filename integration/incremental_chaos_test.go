package integration

import (
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/integration/harness"
	"github.com/sluice-cdc/sluice/pipeline"
)

// snapshotPending reads the checkpoint at path: whether one exists, and
// the tables whose incremental snapshot it shows unfinished.
func snapshotPending(t *testing.T, path string) (exists bool, pending []string) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		return false, nil
	}
	var env struct {
		Checkpoint pipeline.Checkpoint `json:"checkpoint"`
	}
	if err := json.Unmarshal(raw, &env); err != nil {
		return false, nil // a torn read of a file being replaced
	}
	var pos struct {
		Snapshot *struct {
			Tables []struct {
				Schema string `json:"schema"`
				Table  string `json:"table"`
			} `json:"tables"`
		} `json:"snapshot"`
	}
	if err := json.Unmarshal(env.Checkpoint.Position, &pos); err != nil || pos.Snapshot == nil {
		t.Fatalf("checkpoint position %s carries no snapshot progress (%v)", env.Checkpoint.Position, err)
	}
	for _, tb := range pos.Snapshot.Tables {
		pending = append(pending, tb.Schema+"."+tb.Table)
	}
	return true, pending
}

// waitSnapshotsOver polls, while the daemon d runs, until the checkpoint
// at path shows no snapshot unfinished: a table rewritten late in a run
// is read again after the last transaction is already checkpointed.
func waitSnapshotsOver(t *testing.T, d *daemonProc, path string) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		if ok, pending := snapshotPending(t, path); ok && len(pending) == 0 {
			return
		}
		select {
		case <-d.done:
			t.Fatalf("daemon exited (%d) with snapshots unfinished:\n%s", d.exitCode(), d.logs())
		default:
		}
		if time.Now().After(deadline) {
			_, pending := snapshotPending(t, path)
			t.Fatalf("snapshots of %v still unfinished after 3 minutes:\n%s", pending, d.logs())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// snapshot.mode incremental under kill -9: harness.Trials(8) kills at
// random moments, half while the tables are still being read in chunks
// (each run resumes from the chunks its checkpoint covers), under the
// concurrent workload of the chaos test (inserts, updates, deletes, key
// updates, columns added with DEFAULTs, truncates) paced to 400
// transactions a second: a chunk is emitted when its high watermark comes
// through the stream, so a stream that falls behind slows the snapshot
// with it. DuckDB then equals PostgreSQL row by row, and sluice verify
// finds both sinks equal. The table grows with the kills (60,000 rows for
// 8), so that half of them still land while it is read.
func TestKill9DuringIncrementalSnapshotPostgres(t *testing.T) {
	runPostgresChaos(t, postgresChaos{name: "inc", items: 7500 * harness.Trials(8), events: 20000, perSecond: 400,
		snapshot: "{mode: incremental, parallel: 2, chunk_time: 50ms, max_chunk_rows: 1000}",
		loaded:   loadedAll})
}
