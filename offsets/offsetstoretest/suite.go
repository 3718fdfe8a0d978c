package offsetstoretest

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/pipeline"
)

// Pipeline is the pipeline name the suite commits under; stores bound to one
// pipeline must be opened for it.
const Pipeline = "conformance"

// Other is a second pipeline name the suite uses to check isolation. A store
// bound to Pipeline may reject it with an error.
const Other = "conformance-other"

// OpenFunc returns a store over fresh, empty storage able to serve Pipeline.
// The suite closes it.
type OpenFunc func(t *testing.T) pipeline.OffsetStore

// ReopenFunc returns a new store over the same storage as prev, which the
// suite has already closed (as a restarted daemon would).
type ReopenFunc func(t *testing.T, prev pipeline.OffsetStore) pipeline.OffsetStore

// Run runs the conformance suite as subtests of t. Every OffsetStore must
// pass it:
//
//   - LoadEmpty: fresh storage loads (zero, false, nil).
//   - CommitLoad: a commit loads back with equal position and operator
//     state, Seq 1 and a store-set CommittedAt.
//   - CommitManyReopen: after many commits and a reopen, Load returns the
//     last one, and Seq continues from it.
//   - SeqMonotonic: Seq is previous+1 per commit, whatever the caller sets.
//   - ConcurrentReaders: loads racing one committer always return a
//     complete checkpoint no older than one seen before.
//   - Isolation: another pipeline never sees this pipeline's checkpoint.
//   - CanceledCommit: a commit with a canceled context either fails and
//     leaves the previous checkpoint, or succeeds completely.
func Run(t *testing.T, open OpenFunc, reopen ReopenFunc) {
	t.Run("LoadEmpty", func(t *testing.T) { testLoadEmpty(t, open) })
	t.Run("CommitLoad", func(t *testing.T) { testCommitLoad(t, open) })
	t.Run("CommitManyReopen", func(t *testing.T) { testCommitManyReopen(t, open, reopen) })
	t.Run("SeqMonotonic", func(t *testing.T) { testSeqMonotonic(t, open) })
	t.Run("ConcurrentReaders", func(t *testing.T) { testConcurrent(t, open) })
	t.Run("Isolation", func(t *testing.T) { testIsolation(t, open) })
	t.Run("CanceledCommit", func(t *testing.T) { testCanceled(t, open) })
}

// checkpoint returns a checkpoint whose position and operator state encode n.
func checkpoint(pipe string, n int) pipeline.Checkpoint {
	return pipeline.Checkpoint{
		Pipeline:  pipe,
		Position:  json.RawMessage(fmt.Sprintf(`{"lsn":"0/%X","n":%d}`, 0x16B3748+n, n)),
		Operators: map[string]json.RawMessage{"dedup": json.RawMessage(fmt.Sprintf(`{"state":[%d,"x"]}`, n))},
	}
}

// positionN extracts n from a checkpoint made by checkpoint.
func positionN(t *testing.T, cp pipeline.Checkpoint) int {
	t.Helper()
	var p struct {
		N int `json:"n"`
	}
	if err := json.Unmarshal(cp.Position, &p); err != nil {
		t.Fatalf("position %q does not decode: %v", cp.Position, err)
	}
	return p.N
}

// jsonEqual compares JSON semantically: stores may re-encode it.
func jsonEqual(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

func mustClose(t *testing.T, s pipeline.OffsetStore) {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

func mustCommit(t *testing.T, s pipeline.OffsetStore, cp pipeline.Checkpoint) {
	t.Helper()
	if err := s.Commit(context.Background(), cp); err != nil {
		t.Fatalf("Commit: %v", err)
	}
}

func mustLoad(t *testing.T, s pipeline.OffsetStore) pipeline.Checkpoint {
	t.Helper()
	cp, ok, err := s.Load(context.Background(), Pipeline)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if !ok {
		t.Fatalf("Load: no checkpoint after a commit")
	}
	return cp
}

func testLoadEmpty(t *testing.T, open OpenFunc) {
	s := open(t)
	defer mustClose(t, s)
	cp, ok, err := s.Load(context.Background(), Pipeline)
	if err != nil || ok {
		t.Fatalf("Load on empty storage = (%+v, %v, %v), want (zero, false, nil)", cp, ok, err)
	}
	if !reflect.DeepEqual(cp, pipeline.Checkpoint{}) {
		t.Fatalf("Load on empty storage returned a non-zero checkpoint %+v", cp)
	}
}

func testCommitLoad(t *testing.T, open OpenFunc) {
	s := open(t)
	defer mustClose(t, s)
	before := time.Now()
	want := checkpoint(Pipeline, 7)
	mustCommit(t, s, want)
	got := mustLoad(t, s)
	if got.Pipeline != Pipeline {
		t.Errorf("Pipeline = %q, want %q", got.Pipeline, Pipeline)
	}
	if !jsonEqual(got.Position, want.Position) {
		t.Errorf("Position = %s, want %s", got.Position, want.Position)
	}
	if len(got.Operators) != 1 || !jsonEqual(got.Operators["dedup"], want.Operators["dedup"]) {
		t.Errorf("Operators = %v, want %v", got.Operators, want.Operators)
	}
	if got.Seq != 1 {
		t.Errorf("Seq = %d after the first commit, want 1", got.Seq)
	}
	if got.CommittedAt.IsZero() || got.CommittedAt.Before(before.Add(-time.Minute)) || got.CommittedAt.After(time.Now().Add(time.Minute)) {
		t.Errorf("CommittedAt = %v, want about %v", got.CommittedAt, before)
	}
}

func testCommitManyReopen(t *testing.T, open OpenFunc, reopen ReopenFunc) {
	s := open(t)
	const n = 50
	for i := 1; i <= n; i++ {
		mustCommit(t, s, checkpoint(Pipeline, i))
	}
	mustClose(t, s)
	s = reopen(t, s)
	got := mustLoad(t, s)
	if positionN(t, got) != n || got.Seq != n {
		t.Fatalf("after reopen: position n=%d seq=%d, want %d and %d", positionN(t, got), got.Seq, n, n)
	}
	mustCommit(t, s, checkpoint(Pipeline, n+1))
	mustClose(t, s)
	s = reopen(t, s)
	defer mustClose(t, s)
	if got := mustLoad(t, s); got.Seq != n+1 || positionN(t, got) != n+1 {
		t.Fatalf("commit after reopen: seq=%d n=%d, want %d", got.Seq, positionN(t, got), n+1)
	}
}

func testSeqMonotonic(t *testing.T, open OpenFunc) {
	s := open(t)
	defer mustClose(t, s)
	var last time.Time
	for i := 1; i <= 20; i++ {
		cp := checkpoint(Pipeline, i)
		cp.Seq = 1000 + uint64(i)*7 // the store, not the caller, sets Seq
		mustCommit(t, s, cp)
		got := mustLoad(t, s)
		if got.Seq != uint64(i) {
			t.Fatalf("commit %d: Seq = %d, want %d", i, got.Seq, i)
		}
		if got.CommittedAt.Before(last) {
			t.Fatalf("commit %d: CommittedAt %v went backwards from %v", i, got.CommittedAt, last)
		}
		last = got.CommittedAt
	}
}

func testConcurrent(t *testing.T, open OpenFunc) {
	s := open(t)
	defer mustClose(t, s)
	mustCommit(t, s, checkpoint(Pipeline, 1))
	const commits = 100
	done := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for r := 0; r < 4; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var seen uint64
			for {
				select {
				case <-done:
					return
				default:
				}
				cp, ok, err := s.Load(context.Background(), Pipeline)
				if err != nil || !ok {
					errs <- fmt.Errorf("concurrent Load = (%v, %v)", ok, err)
					return
				}
				var p struct {
					N int `json:"n"`
				}
				if err := json.Unmarshal(cp.Position, &p); err != nil || uint64(p.N) != cp.Seq {
					errs <- fmt.Errorf("torn checkpoint: seq %d with position %s", cp.Seq, cp.Position)
					return
				}
				if cp.Seq < seen {
					errs <- fmt.Errorf("Load went backwards: seq %d after %d", cp.Seq, seen)
					return
				}
				seen = cp.Seq
			}
		}()
	}
	// One writer, as the runtime's committer goroutine.
	for i := 2; i <= commits; i++ {
		if err := s.Commit(context.Background(), checkpoint(Pipeline, i)); err != nil {
			errs <- err
			break
		}
	}
	close(done)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got := mustLoad(t, s); got.Seq != commits {
		t.Fatalf("final seq %d, want %d", got.Seq, commits)
	}
}

func testIsolation(t *testing.T, open OpenFunc) {
	s := open(t)
	defer mustClose(t, s)
	mustCommit(t, s, checkpoint(Pipeline, 3))
	if cp, ok, err := s.Load(context.Background(), Other); err == nil && ok {
		t.Fatalf("Load(%q) returned %+v committed for %q", Other, cp, Pipeline)
	}
	// A store may refuse other pipelines; if it accepts, they stay apart.
	if err := s.Commit(context.Background(), checkpoint(Other, 9)); err != nil {
		if got := mustLoad(t, s); positionN(t, got) != 3 {
			t.Fatalf("refused foreign commit changed %q's checkpoint to %s", Pipeline, got.Position)
		}
		return
	}
	other, ok, err := s.Load(context.Background(), Other)
	if err != nil || !ok || positionN(t, other) != 9 || other.Pipeline != Other {
		t.Fatalf("Load(%q) = (%+v, %v, %v), want its own checkpoint", Other, other, ok, err)
	}
	if got := mustLoad(t, s); positionN(t, got) != 3 || got.Pipeline != Pipeline {
		t.Fatalf("commit of %q changed %q's checkpoint to %+v", Other, Pipeline, got)
	}
}

func testCanceled(t *testing.T, open OpenFunc) {
	s := open(t)
	defer mustClose(t, s)
	mustCommit(t, s, checkpoint(Pipeline, 1))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := s.Commit(ctx, checkpoint(Pipeline, 2))
	got := mustLoad(t, s)
	switch n := positionN(t, got); {
	case err != nil && (n != 1 || got.Seq != 1):
		t.Fatalf("failed commit (%v) changed the checkpoint to n=%d seq=%d", err, n, got.Seq)
	case err == nil && (n != 2 || got.Seq != 2):
		t.Fatalf("successful commit not visible: n=%d seq=%d", n, got.Seq)
	}
}
