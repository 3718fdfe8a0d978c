package offsets

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-cdc/sluice/offsets/offsetstoretest"
	"github.com/sluice-cdc/sluice/pipeline"
)

var ctx = context.Background()

func TestConformance(t *testing.T) {
	offsetstoretest.Run(t,
		func(t *testing.T) pipeline.OffsetStore {
			s, err := OpenDir(t.TempDir(), offsetstoretest.Pipeline)
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		func(t *testing.T, prev pipeline.OffsetStore) pipeline.OffsetStore {
			s, err := OpenDir(prev.(*DirStore).Dir(), offsetstoretest.Pipeline)
			if err != nil {
				t.Fatal(err)
			}
			return s
		})
}

func open(t *testing.T, dir, pipe string) *DirStore {
	t.Helper()
	s, err := OpenDir(dir, pipe)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func cp(n int) pipeline.Checkpoint {
	return pipeline.Checkpoint{Position: json.RawMessage(fmt.Sprintf(`{"n":%d}`, n))}
}

func commit(t *testing.T, s *DirStore, n int) {
	t.Helper()
	if err := s.Commit(ctx, cp(n)); err != nil {
		t.Fatal(err)
	}
}

// posN returns n of a checkpoint made by cp.
func posN(t *testing.T, c pipeline.Checkpoint) int {
	t.Helper()
	var p struct{ N int }
	if err := json.Unmarshal(c.Position, &p); err != nil {
		t.Fatalf("position %s: %v", c.Position, err)
	}
	return p.N
}

func load(t *testing.T, s *DirStore) (pipeline.Checkpoint, LoadResult) {
	t.Helper()
	res, err := s.LoadDetailed(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Found {
		t.Fatal("no checkpoint found")
	}
	return res.Checkpoint, res
}

func TestRoundTripAndFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "offsets")
	s := open(t, dir, "p1")
	if _, ok, err := s.Load(ctx, "p1"); ok || err != nil {
		t.Fatalf("empty dir: ok=%v err=%v", ok, err)
	}
	commit(t, s, 1)
	if exists(filepath.Join(dir, PreviousFile)) {
		t.Fatal("prev file after the first commit")
	}
	commit(t, s, 2)
	got, res := load(t, s)
	if posN(t, got) != 2 || got.Seq != 2 || got.Pipeline != "p1" || res.From != s.Path() {
		t.Fatalf("got %+v from %s", got, res.From)
	}
	prev, ok, err := s.LoadPrevious(ctx)
	if err != nil || !ok || posN(t, prev) != 1 || prev.Seq != 1 {
		t.Fatalf("LoadPrevious = %+v %v %v", prev, ok, err)
	}
	for _, name := range []string{"", CurrentFile, PreviousFile} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		want := os.FileMode(0o600)
		if name == "" {
			want = 0o700 | os.ModeDir
		}
		if fi.Mode() != want {
			t.Errorf("%s mode %v, want %v", name, fi.Mode(), want)
		}
	}
	if exists(filepath.Join(dir, TempFile)) {
		t.Error("tmp file left after commit")
	}
	// Survives reopen.
	s.Close()
	s = open(t, dir, "p1")
	if got, _ := load(t, s); posN(t, got) != 2 || got.Seq != 2 {
		t.Fatalf("after reopen: %+v", got)
	}
}

func TestLockHeld(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, "p1")
	_, err := OpenDir(dir, "p1")
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), dir) {
		t.Fatalf("second open: %v", err)
	}
	s.Close()
	s2, err := OpenDir(dir, "p1")
	if err != nil {
		t.Fatalf("open after close: %v", err)
	}
	s2.Close()
}

// damage commits twice, applies f to checkpoint.json and reopens.
func damage(t *testing.T, f func([]byte) []byte) (*DirStore, string) {
	t.Helper()
	dir := t.TempDir()
	s := open(t, dir, "p1")
	commit(t, s, 1)
	commit(t, s, 2)
	s.Close()
	path := filepath.Join(dir, CurrentFile)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, f(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return open(t, dir, "p1"), path
}

func expectCorrupt(t *testing.T, s *DirStore, path, reason string) {
	t.Helper()
	before, _ := os.ReadFile(path)
	_, ok, err := s.Load(ctx, "p1")
	var ce *CorruptError
	if !errors.As(err, &ce) || ok {
		t.Fatalf("Load = ok %v, err %v; want *CorruptError", ok, err)
	}
	msg := err.Error()
	for _, want := range []string{path, "--from-previous-checkpoint", "--reset-offsets", reason} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q lacks %q", msg, want)
		}
	}
	if err := s.Commit(ctx, cp(3)); err == nil {
		t.Fatal("Commit replaced a corrupt checkpoint")
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
		t.Fatal("corrupt file was modified")
	}
	// Recovery: --from-previous-checkpoint.
	prev, ok, err := s.LoadPrevious(ctx)
	if err != nil || !ok || posN(t, prev) != 1 {
		t.Fatalf("LoadPrevious = %v %v %v", prev, ok, err)
	}
	commit(t, s, 5)
	got, _ := load(t, s)
	if posN(t, got) != 5 || got.Seq != 2 {
		t.Fatalf("after recovery: %+v", got)
	}
	matches, _ := filepath.Glob(path + ".discarded-*")
	if len(matches) != 1 {
		t.Fatalf("corrupt file not kept aside: %v", matches)
	}
	if kept, _ := os.ReadFile(matches[0]); !bytes.Equal(kept, before) {
		t.Fatal("set-aside file differs from the corrupt one")
	}
	if p, _, _ := s.LoadPrevious(ctx); posN(t, p) != 1 {
		t.Fatalf("prev after recovery commit = %s, want the one resumed from", p.Position)
	}
}

func TestCorruptFlippedByte(t *testing.T) {
	s, path := damage(t, func(b []byte) []byte {
		i := bytes.Index(b, []byte(`"n": 2`))
		if i < 0 {
			t.Fatalf("position not found in %s", b)
		}
		b[i+5] ^= 0x01 // '2' becomes '3': still valid JSON, wrong checksum
		return b
	})
	expectCorrupt(t, s, path, "sha256 mismatch")
}

func TestCorruptTorn(t *testing.T) {
	s, path := damage(t, func(b []byte) []byte { return b[:len(b)/2] })
	expectCorrupt(t, s, path, "not valid JSON")
}

func TestCorruptEmpty(t *testing.T) {
	s, path := damage(t, func(b []byte) []byte { return nil })
	expectCorrupt(t, s, path, "empty")
}

func TestEditedValidJSON(t *testing.T) {
	s, path := damage(t, func(b []byte) []byte {
		var env map[string]any
		if err := json.Unmarshal(b, &env); err != nil {
			t.Fatal(err)
		}
		env["checkpoint"].(map[string]any)["position"] = map[string]any{"n": 99}
		out, _ := json.Marshal(env)
		return out
	})
	expectCorrupt(t, s, path, "sha256 mismatch")
}

func TestNewerFormat(t *testing.T) {
	s, path := damage(t, func(b []byte) []byte {
		b = bytes.Replace(b, []byte(`"format": 1`), []byte(`"format": 2`), 1)
		return bytes.Replace(b, []byte(`"pipeline"`), []byte(`"writer": "v9.1.0", "pipeline"`), 1)
	})
	_, _, err := s.Load(ctx, "p1")
	var fe *FormatError
	if !errors.As(err, &fe) || fe.Format != 2 {
		t.Fatalf("err = %v", err)
	}
	for _, want := range []string{path, "format 2", "v9.1.0", "do not downgrade"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

func TestForeignPipeline(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, "orders")
	commit(t, s, 1)
	s.Close()
	s = open(t, dir, "payments")
	_, _, err := s.Load(ctx, "payments")
	var fe *ForeignError
	if !errors.As(err, &fe) {
		t.Fatalf("err = %v", err)
	}
	for _, want := range []string{`"orders"`, `"payments"`, filepath.Join(dir, CurrentFile)} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %s", err, want)
		}
	}
	if err := s.Commit(ctx, cp(2)); err == nil {
		t.Fatal("committed over a foreign checkpoint")
	}
}

func TestStaleTmpIgnored(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, "p1")
	commit(t, s, 1)
	if err := os.WriteFile(filepath.Join(dir, TempFile), []byte(`{"format":1,"pipel`), 0o600); err != nil {
		t.Fatal(err)
	}
	got, res := load(t, s)
	if posN(t, got) != 1 || len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0], TempFile) {
		t.Fatalf("got %+v warnings %q", got, res.Warnings)
	}
	commit(t, s, 2)
	if exists(filepath.Join(dir, TempFile)) {
		t.Fatal("stale tmp survived a commit")
	}
}

func TestMissingCurrentFallsBackToPrevious(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, "p1")
	commit(t, s, 1)
	commit(t, s, 2)
	s.Close()
	if err := os.Remove(filepath.Join(dir, CurrentFile)); err != nil {
		t.Fatal(err)
	}
	// A crash can leave a temporary file next to it.
	if err := os.WriteFile(filepath.Join(dir, TempFile), []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	s = open(t, dir, "p1")
	got, res := load(t, s)
	if posN(t, got) != 1 || res.From != filepath.Join(dir, PreviousFile) || len(res.Warnings) != 2 ||
		!strings.Contains(res.Warnings[1], "is missing") {
		t.Fatalf("got %+v from %s, warnings %q", got, res.From, res.Warnings)
	}
	commit(t, s, 3)
	if got, _ := load(t, s); posN(t, got) != 3 || got.Seq != 2 {
		t.Fatalf("after commit: %+v", got)
	}
}

// TestCrashDuringCommit stops a commit after each of its steps, as a crash
// would, and checks a fresh store loads the new or the previous checkpoint.
func TestCrashDuringCommit(t *testing.T) {
	for _, step := range []string{"tmp-written", "prev-kept", "renamed"} {
		t.Run(step, func(t *testing.T) {
			dir := t.TempDir()
			s := open(t, dir, "p1")
			commit(t, s, 1)
			commit(t, s, 2)
			s.hook = func(got string) error {
				if got == step {
					return errors.New("crash")
				}
				return nil
			}
			if err := s.Commit(ctx, cp(3)); err == nil {
				t.Fatal("commit survived the crash")
			}
			s.Close()
			s = open(t, dir, "p1")
			got, _ := load(t, s)
			if n := posN(t, got); n != 2 && n != 3 {
				t.Fatalf("after crash at %s: n=%d", step, n)
			}
			// The store carries on from whatever it found.
			commit(t, s, 4)
			if got2, _ := load(t, s); posN(t, got2) != 4 || got2.Seq != got.Seq+1 {
				t.Fatalf("after recovery commit: %+v (loaded seq %d before)", got2, got.Seq)
			}
		})
	}
}

func TestFailedCommitRereads(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, "p1")
	commit(t, s, 1)
	s.hook = func(step string) error {
		if step == "renamed" {
			return errors.New("fsync failed")
		}
		return nil
	}
	if err := s.Commit(ctx, cp(2)); err == nil {
		t.Fatal("want error")
	}
	s.hook = nil
	commit(t, s, 3) // re-reads seq 2 from disk
	if got, _ := load(t, s); got.Seq != 3 {
		t.Fatalf("seq %d, want 3", got.Seq)
	}
}

func TestReset(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, "p1")
	commit(t, s, 1)
	commit(t, s, 2)
	if err := s.Reset(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := s.Load(ctx, "p1"); ok || err != nil {
		t.Fatalf("after reset: ok=%v err=%v", ok, err)
	}
	for _, name := range []string{CurrentFile, PreviousFile} {
		if m, _ := filepath.Glob(filepath.Join(dir, name+".reset-*")); len(m) != 1 {
			t.Errorf("%s not moved aside: %v", name, m)
		}
	}
	commit(t, s, 7)
	if got, _ := load(t, s); got.Seq != 1 || posN(t, got) != 7 {
		t.Fatalf("after reset+commit: %+v", got)
	}
	// A second reset in the same second does not overwrite the first.
	if err := s.Reset(ctx); err != nil {
		t.Fatal(err)
	}
	if m, _ := filepath.Glob(filepath.Join(dir, CurrentFile+".reset-*")); len(m) != 2 {
		t.Errorf("want two reset copies, got %v", m)
	}
}

func TestLoadWrongPipelineName(t *testing.T) {
	s := open(t, t.TempDir(), "p1")
	if _, _, err := s.Load(ctx, "p2"); err == nil {
		t.Fatal("Load for another pipeline succeeded")
	}
	if err := s.Commit(ctx, pipeline.Checkpoint{Pipeline: "p2"}); err == nil {
		t.Fatal("Commit for another pipeline succeeded")
	}
}
