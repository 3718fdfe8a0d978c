package bleve

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/sluice-cdc/sluice/pipeline"
)

// childEnv makes the test binary the writer process of
// TestWrittenBatchesSurviveKill; its value is the index directory.
const childEnv = "SLUICE_BLEVE_DURABILITY_CHILD"

const (
	killAfter    = 5  // batches the child reports durable before it is killed
	rowsPerBatch = 50 // new rows per batch
)

// killBatch is batch n of the child: rowsPerBatch new rows, and an update
// of row 1 saying which batch wrote it last.
func killBatch(n int) []pipeline.Record {
	var recs []pipeline.Record
	for i := 0; i < rowsPerBatch; i++ {
		id := int64(n*rowsPerBatch + i + 2)
		recs = append(recs, pipeline.Record{Op: pipeline.OpInsert, Table: people, Version: pipeline.Version{0, uint64(n + 1), 0, uint64(i + 1)},
			After: []any{id, fmt.Sprintf("row %d", id), fmt.Sprintf("batch %d", n)}})
	}
	return append(recs, pipeline.Record{Op: pipeline.OpUpdate, Table: people, Version: pipeline.Version{0, uint64(n + 1), 0, 1000},
		After: []any{int64(1), "last", fmt.Sprintf("batch %d", n)}})
}

// durabilityChild writes batches until it is killed, printing "durable N"
// after Write returned for batch N.
func durabilityChild(dir string) {
	s := New(Options{Path: dir}, nil)
	if err := s.Open(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		os.Exit(2)
	}
	parent := os.Getppid()
	for n := 0; n < 10_000 && os.Getppid() == parent; n++ {
		if err := s.Write(ctx, killBatch(n)); err != nil {
			fmt.Fprintln(os.Stderr, "write:", err)
			os.Exit(2)
		}
		fmt.Fprintf(os.Stdout, "durable %d\n", n)
	}
	os.Exit(3) // the parent went away without killing us
}

// TestWrittenBatchesSurviveKill runs a writer process that reports each
// batch Write returned for, SIGKILLs it (most likely in the middle of its
// next Write) and checks that the reopened index holds every reported
// batch: Write returns only when the batch is on disk.
func TestWrittenBatchesSurviveKill(t *testing.T) {
	if dir := os.Getenv(childEnv); dir != "" {
		durabilityChild(dir)
		return
	}
	dir := filepath.Join(t.TempDir(), "index")
	cmd := exec.Command(os.Args[0], "-test.run=^TestWrittenBatchesSurviveKill$", "-test.count=1")
	cmd.Env = append(os.Environ(), childEnv+"="+dir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	last := -1
	sc := bufio.NewScanner(out)
	for last < killAfter-1 && sc.Scan() {
		var n int
		if _, err := fmt.Sscanf(sc.Text(), "durable %d", &n); err == nil {
			last = n
		}
	}
	if err := cmd.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	werr := cmd.Wait()
	if last < killAfter-1 {
		t.Fatalf("child reported %d batches before it ended (%v): %s", last+1, werr, stderr.String())
	}
	if ws, ok := cmd.ProcessState.Sys().(interface{ Signaled() bool }); ok && !ws.Signaled() {
		t.Fatalf("child was not killed by the signal: %v: %s", werr, stderr.String())
	}

	s := openSink(t, Options{Path: dir})
	got := rows(t, s, people)
	for n := 0; n <= last; n++ {
		for _, r := range killBatch(n)[:rowsPerBatch] {
			k := fmt.Sprintf("int64:%d", r.After[0])
			if g, ok := got[k]; !ok || g[2] != r.After[2] {
				t.Fatalf("row %s of batch %d (reported durable) lost after kill -9: %v", k, n, g)
			}
		}
	}
	var lastWriter int
	if _, err := fmt.Sscanf(fmt.Sprint(got["int64:1"][2]), "batch %d", &lastWriter); err != nil || lastWriter < last {
		t.Fatalf("row 1 was last written by %v, want batch %d or later", got["int64:1"], last)
	}
	t.Logf("child killed after %d reported batches; the index holds %d rows, row 1 from batch %d",
		last+1, len(got), lastWriter)
	// The index still takes writes.
	mustWrite(t, s, pipeline.Record{Op: pipeline.OpUpdate, Table: people, Version: pipeline.Version{1},
		After: []any{int64(1), "after", "restart"}})
	if g := rows(t, s, people)["int64:1"]; g[1] != "after" {
		t.Fatalf("write after the restart: %v", g)
	}
}
