package duckdb

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/pipeline"
)

// TestKillDuringWritesChild is the writer TestKillDuringWrites kills: it
// writes into DUCK_CRASH_PATH until killed, each Write a snapshot chunk
// of 4,000 new keys beside 300 updates of random stored keys (an
// incremental snapshot under load), and prints "ok N" after each.
func TestKillDuringWritesChild(t *testing.T) {
	path := os.Getenv("DUCK_CRASH_PATH")
	if path == "" {
		t.Skip("the writer of TestKillDuringWrites")
	}
	s := New(Options{Path: path}, nil)
	if err := s.Open(ctx); err != nil {
		t.Fatal(err)
	}
	seed, _ := strconv.ParseUint(os.Getenv("DUCK_CRASH_SEED"), 10, 64)
	rng := rand.New(rand.NewPCG(seed, 7))
	var next int64 // the highest key written: the table's, after a restart
	_ = s.conn.QueryRowContext(ctx, "SELECT coalesce(max(id), 0) FROM "+s.qualified("public_bench_rows")).Scan(&next)
	lsn := uint64(time.Now().UnixNano())
	updates := benchRecords(pipeline.OpUpdate, 0, 0)
	for {
		lsn += 10
		recs := benchRecords(pipeline.OpRead, next+1, lsn)[:4000]
		next += 4000
		for j := range 300 {
			r := updates[j]
			r.After = append([]any(nil), r.After...)
			r.After[0], r.After[2] = 1+rng.Int64N(next), "upd-"+strconv.Itoa(j)
			r.Version = pipeline.Version{0, lsn + 1, 0, uint64(j + 1)}
			recs = append(recs, r)
		}
		var err error
		for range 5 { // the runtime's retries, Overloaded included
			if err = s.Write(ctx, recs); err == nil {
				break
			}
		}
		if err != nil {
			fmt.Printf("STUCK %v\n", err)
			os.Exit(3)
		}
		fmt.Printf("ok %d\n", next)
	}
}

// A writer killed -9 at random moments of its Writes (SLUICE_TRIALS
// times, 3 by default) reopens the file each time and goes on writing;
// no Write is ever stuck, and the table holds each key once.
func TestKillDuringWrites(t *testing.T) {
	trials := 3
	if s := os.Getenv("SLUICE_TRIALS"); s != "" {
		trials, _ = strconv.Atoi(s)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "crash.duckdb")
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	for i := range trials + 1 {
		cmd := exec.Command(os.Args[0], "-test.run", "^TestKillDuringWritesChild$")
		cmd.Env = append(os.Environ(), "DUCK_CRASH_PATH="+path, "DUCK_CRASH_SEED="+strconv.Itoa(i))
		var out lockedBuf
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		if i < trials {
			select {
			case <-time.After(time.Duration(300+rng.IntN(1500)) * time.Millisecond):
				_ = cmd.Process.Kill()
				<-done
			case err := <-done:
				t.Fatalf("trial %d: the writer exited (%v):\n%s", i, err, out.String())
			}
		} else {
			// The last one must make progress after the last kill.
			deadline := time.After(60 * time.Second)
			for !strings.Contains(out.String(), "ok ") && !strings.Contains(out.String(), "STUCK") {
				select {
				case <-deadline:
					t.Fatalf("no Write passed after the last kill:\n%s", out.String())
				case err := <-done:
					t.Fatalf("the writer exited (%v):\n%s", err, out.String())
				case <-time.After(20 * time.Millisecond):
				}
			}
			_ = cmd.Process.Kill()
			<-done
		}
		if strings.Contains(out.String(), "STUCK") {
			t.Fatalf("trial %d: a Write failed for good after a kill:\n%s", i, out.String())
		}
	}
	s := openSink(t, Options{Path: path})
	var n, keys int64
	if err := s.conn.QueryRowContext(ctx, "SELECT count(*), count(DISTINCT id) FROM "+s.qualified("public_bench_rows")).Scan(&n, &keys); err != nil {
		t.Fatal(err)
	}
	if n == 0 || n != keys {
		t.Fatalf("%d rows for %d keys after %d kills", n, keys, trials)
	}
	t.Logf("%d kills, %d rows", trials, n)
}

// lockedBuf is a strings.Builder the child's output goroutine writes
// while the test reads it.
type lockedBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
