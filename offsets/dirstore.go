package offsets

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/gofrs/flock"
	"go.uber.org/zap"

	"github.com/sluice-cdc/sluice/pipeline"
)

// File names inside an offsets directory.
const (
	CurrentFile  = "checkpoint.json"
	PreviousFile = "checkpoint.prev.json"
	TempFile     = "checkpoint.json.tmp"
	LockFile     = "LOCK"
	prevTempFile = "checkpoint.prev.json.tmp"
)

// Option configures OpenDir.
type Option func(*DirStore)

// WithLogger makes the store log recoveries (stale temporary files, a
// missing current file, resets) as warnings. The default logs nothing.
func WithLogger(l *zap.Logger) Option {
	return func(s *DirStore) {
		if l != nil {
			s.log = l
		}
	}
}

// WithWriterVersion records the running sluice version in every file it
// writes, so an older sluice meeting the file can name the release to run.
func WithWriterVersion(v string) Option {
	return func(s *DirStore) { s.writer = v }
}

// DirStore is a pipeline.OffsetStore over one local directory, owned by one
// pipeline and locked against other processes for its lifetime. Its methods
// are safe for concurrent use; commits are serialised.
type DirStore struct {
	dir      string
	pipeline string
	lock     *flock.Flock
	log      *zap.Logger
	writer   string
	now      func() time.Time
	// hook, when set (tests only), runs between the steps of Commit; an
	// error stops the commit there, as a crash would.
	hook func(step string) error

	mu     sync.Mutex
	closed bool
	// What the next Commit builds on. baseKnown is false until Load,
	// LoadPrevious, Reset or a successful Commit established it, and again
	// after a failed Commit, so that Commit re-reads the disk first.
	baseKnown      bool
	lastSeq        uint64
	hasCurrent     bool   // checkpoint.json holds the verified lastData
	lastData       []byte // bytes of checkpoint.json when hasCurrent
	discardCurrent bool   // LoadPrevious chose prev: move checkpoint.json aside on Commit
}

var _ pipeline.OffsetStore = (*DirStore)(nil)

// OpenDir opens (creating with mode 0700) the offsets directory dir for
// pipeline and takes an exclusive lock on dir/LOCK for the store's lifetime.
// It fails with an error wrapping ErrLocked, naming the directory, when
// another process (or another open DirStore) holds the lock. It reads no
// checkpoint: a corrupt file surfaces from Load, so Reset stays possible.
func OpenDir(dir string, pipelineName string, opts ...Option) (*DirStore, error) {
	if pipelineName == "" {
		return nil, errors.New("offsets: pipeline name is empty")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("offsets: create offsets directory: %w", err)
	}
	lockPath := filepath.Join(dir, LockFile)
	lk := flock.New(lockPath, flock.SetPermissions(0o600))
	ok, err := lk.TryLock()
	if err != nil {
		return nil, fmt.Errorf("offsets: lock %s: %w", lockPath, err)
	}
	if !ok {
		return nil, fmt.Errorf("offsets: cannot use directory %s: %w (%s is held); "+
			"stop the other sluice daemon or give this pipeline its own offsets directory", dir, ErrLocked, lockPath)
	}
	s := &DirStore{dir: dir, pipeline: pipelineName, lock: lk, log: zap.NewNop(), now: time.Now}
	for _, o := range opts {
		o(s)
	}
	return s, nil
}

// Dir returns the store's directory.
func (s *DirStore) Dir() string { return s.dir }

// Pipeline returns the pipeline the store serves.
func (s *DirStore) Pipeline() string { return s.pipeline }

// Path returns the path of the current checkpoint file.
func (s *DirStore) Path() string { return s.path(CurrentFile) }

func (s *DirStore) path(name string) string { return filepath.Join(s.dir, name) }

// LoadResult is the detailed outcome of LoadDetailed.
type LoadResult struct {
	Checkpoint pipeline.Checkpoint
	Found      bool
	// From is the file the checkpoint was read from; "" when none was found.
	From string
	// Warnings describes recoveries Load made on the way; each is also
	// logged. They are:
	//   - a stale checkpoint.json.tmp (a commit interrupted before it
	//     completed): ignored, and overwritten by the next commit;
	//   - checkpoint.json missing while checkpoint.prev.json exists (deleted
	//     by hand or lost by the filesystem; Commit never leaves this state):
	//     the previous checkpoint is returned and its changes since replayed.
	Warnings []string
}

// Load returns the newest valid checkpoint, false when none was ever
// committed (empty or missing directory contents). See LoadDetailed for the
// recoveries it makes. A corrupt file is a *CorruptError, a file of another
// pipeline a *ForeignError, a newer format a *FormatError; none is modified.
// Asking for a pipeline other than the store's is an error. Load does not
// block beyond file I/O.
func (s *DirStore) Load(ctx context.Context, pipelineName string) (pipeline.Checkpoint, bool, error) {
	if pipelineName != s.pipeline {
		return pipeline.Checkpoint{}, false, fmt.Errorf("offsets: directory %s serves pipeline %q, asked for %q", s.dir, s.pipeline, pipelineName)
	}
	res, err := s.LoadDetailed(ctx)
	return res.Checkpoint, res.Found, err
}

// LoadDetailed is Load for the store's pipeline, reporting where the
// checkpoint came from and which recoveries were made.
func (s *DirStore) LoadDetailed(ctx context.Context) (LoadResult, error) {
	if err := ctx.Err(); err != nil {
		return LoadResult{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return LoadResult{}, errClosed
	}
	res, err := s.loadLocked()
	for _, w := range res.Warnings {
		s.log.Warn(w, zap.String("dir", s.dir), zap.String("pipeline", s.pipeline))
	}
	return res, err
}

var errClosed = errors.New("offsets: store is closed")

func (s *DirStore) loadLocked() (LoadResult, error) {
	var res LoadResult
	if _, err := os.Lstat(s.path(TempFile)); err == nil {
		res.Warnings = append(res.Warnings, fmt.Sprintf("ignoring %s left by an interrupted commit; the next commit overwrites it", s.path(TempFile)))
	}
	cur := s.path(CurrentFile)
	data, err := os.ReadFile(cur)
	switch {
	case err == nil:
		cp, err := decode(cur, s.pipeline, data)
		if err != nil {
			var ce *CorruptError
			if errors.As(err, &ce) {
				ce.PreviousAvailable = exists(s.path(PreviousFile))
			}
			return res, err
		}
		s.setBase(cp.Seq, data, false)
		res.Checkpoint, res.Found, res.From = cp, true, cur
		return res, nil
	case !errors.Is(err, fs.ErrNotExist):
		return res, fmt.Errorf("offsets: read %s: %w", cur, err)
	}
	prev := s.path(PreviousFile)
	data, err = os.ReadFile(prev)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		s.setBase(0, nil, false)
		return res, nil
	case err != nil:
		return res, fmt.Errorf("offsets: read %s: %w", prev, err)
	}
	cp, err := decode(prev, s.pipeline, data)
	if err != nil {
		var ce *CorruptError
		if errors.As(err, &ce) {
			ce.Reason = cur + " is missing and the previous checkpoint is unusable too: " + ce.Reason
		}
		return res, err
	}
	res.Warnings = append(res.Warnings, fmt.Sprintf("%s is missing; resuming from the previous checkpoint %s (seq %d, committed %s); changes since it are replayed",
		cur, prev, cp.Seq, cp.CommittedAt.Format(time.RFC3339)))
	s.setBase(cp.Seq, nil, false)
	res.Checkpoint, res.Found, res.From = cp, true, prev
	return res, nil
}

func (s *DirStore) setBase(seq uint64, current []byte, discard bool) {
	s.baseKnown = true
	s.lastSeq = seq
	s.hasCurrent = current != nil
	s.lastData = current
	s.discardCurrent = discard
}

// LoadPrevious returns the checkpoint committed before the current one, for
// `sluice run --from-previous-checkpoint`; false when there is none. After
// it, the next Commit builds on that checkpoint (Seq continues from it) and
// first moves checkpoint.json, whatever its state, aside to
// checkpoint.json.discarded-<unix> — it is kept for inspection, not deleted.
// A damaged previous file is a *CorruptError.
func (s *DirStore) LoadPrevious(ctx context.Context) (pipeline.Checkpoint, bool, error) {
	if err := ctx.Err(); err != nil {
		return pipeline.Checkpoint{}, false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return pipeline.Checkpoint{}, false, errClosed
	}
	prev := s.path(PreviousFile)
	data, err := os.ReadFile(prev)
	if errors.Is(err, fs.ErrNotExist) {
		return pipeline.Checkpoint{}, false, nil
	}
	if err != nil {
		return pipeline.Checkpoint{}, false, fmt.Errorf("offsets: read %s: %w", prev, err)
	}
	cp, err := decode(prev, s.pipeline, data)
	if err != nil {
		return pipeline.Checkpoint{}, false, err
	}
	discard := exists(s.path(CurrentFile))
	s.setBase(cp.Seq, nil, discard)
	s.log.Warn("resuming from the previous checkpoint; the current checkpoint file is set aside at the next commit",
		zap.String("path", prev), zap.Uint64("seq", cp.Seq), zap.Time("committed_at", cp.CommittedAt))
	return cp, true, nil
}

// Commit stores cp as the new current checkpoint, durably, before returning.
// The store sets cp.Seq (previous + 1, starting at 1) and cp.CommittedAt;
// cp.Pipeline must be the store's pipeline or empty. If no checkpoint was
// loaded yet, Commit reads the current one first and refuses to overwrite
// one it cannot verify. After a crash at any point, Load returns cp or the
// checkpoint before it. Commit blocks for two directory fsyncs and one file
// fsync.
//
// Invariant 1: Commit returns only once the checkpoint file and its
// directory entry are fsynced, so the caller acknowledges the source after a
// durable commit. Invariant 5: cp.Operators travels in the same file, and so
// the same atomic rename, as cp.Position.
func (s *DirStore) Commit(ctx context.Context, cp pipeline.Checkpoint) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if cp.Pipeline == "" {
		cp.Pipeline = s.pipeline
	}
	if cp.Pipeline != s.pipeline {
		return fmt.Errorf("offsets: directory %s serves pipeline %q, refusing a checkpoint of %q", s.dir, s.pipeline, cp.Pipeline)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errClosed
	}
	if !s.baseKnown {
		// Never silently replace a checkpoint we cannot read.
		res, err := s.loadLocked()
		if err != nil {
			return fmt.Errorf("offsets: refusing to commit over an unusable checkpoint: %w", err)
		}
		for _, w := range res.Warnings {
			s.log.Warn(w, zap.String("dir", s.dir))
		}
	}
	cp.Seq = s.lastSeq + 1
	cp.CommittedAt = s.now().UTC()
	data, err := encode(cp, s.writer)
	if err != nil {
		return err
	}
	if err := s.commitLocked(data); err != nil {
		s.baseKnown = false // re-read the disk before the next attempt
		return err
	}
	s.setBase(cp.Seq, data, false)
	return nil
}

func (s *DirStore) step(name string) error {
	if s.hook != nil {
		return s.hook(name)
	}
	return nil
}

func (s *DirStore) commitLocked(data []byte) error {
	cur, prev, tmp := s.path(CurrentFile), s.path(PreviousFile), s.path(TempFile)
	if err := writeFileSync(tmp, data); err != nil {
		return err
	}
	if err := s.step("tmp-written"); err != nil {
		return err
	}
	switch {
	case s.discardCurrent:
		aside, err := s.moveAside(CurrentFile, "discarded")
		if err != nil {
			return err
		}
		s.log.Warn("moved the current checkpoint aside (--from-previous-checkpoint)", zap.String("path", aside))
		if err := syncDir(s.dir); err != nil {
			return err
		}
	case s.hasCurrent:
		// Keep the current file as the previous one: checkpoint.json stays in
		// place throughout, so a crash never leaves it missing.
		pt := s.path(prevTempFile)
		if err := os.Remove(pt); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("offsets: %w", err)
		}
		if err := os.Link(cur, pt); err != nil {
			// Filesystems without hard links: write the same bytes.
			if err := writeFileSync(pt, s.lastData); err != nil {
				return err
			}
		}
		if err := os.Rename(pt, prev); err != nil {
			return fmt.Errorf("offsets: %w", err)
		}
		// Make prev durable before cur changes, so that after power loss
		// prev is never older than the checkpoint before cur.
		if err := syncDir(s.dir); err != nil {
			return err
		}
	}
	if err := s.step("prev-kept"); err != nil {
		return err
	}
	if err := os.Rename(tmp, cur); err != nil {
		return fmt.Errorf("offsets: %w", err)
	}
	if err := s.step("renamed"); err != nil {
		return err
	}
	return syncDir(s.dir)
}

// Reset moves every checkpoint file of the directory aside to
// <name>.reset-<unix> (nothing is deleted), for `sluice run --reset-offsets`.
// Afterwards Load reports no checkpoint and Seq restarts at 1. It blocks for
// one directory fsync.
func (s *DirStore) Reset(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errClosed
	}
	s.baseKnown = false
	var moved []string
	for _, name := range []string{CurrentFile, PreviousFile, TempFile, prevTempFile} {
		if !exists(s.path(name)) {
			continue
		}
		aside, err := s.moveAside(name, "reset")
		if err != nil {
			return err
		}
		moved = append(moved, aside)
	}
	if err := syncDir(s.dir); err != nil {
		return err
	}
	s.setBase(0, nil, false)
	s.log.Warn("offsets reset: the pipeline starts over", zap.String("dir", s.dir), zap.Strings("moved_aside", moved))
	return nil
}

// moveAside renames name to name.<why>-<unix>[-n], never overwriting.
func (s *DirStore) moveAside(name, why string) (string, error) {
	base := s.path(name) + "." + why + "-" + strconv.FormatInt(s.now().Unix(), 10)
	dst := base
	for i := 1; exists(dst); i++ {
		dst = base + "-" + strconv.Itoa(i)
	}
	if err := os.Rename(s.path(name), dst); err != nil {
		return "", fmt.Errorf("offsets: move %s aside: %w", s.path(name), err)
	}
	return dst, nil
}

// Close releases the directory lock. It is idempotent; the store is unusable
// afterwards.
func (s *DirStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	return s.lock.Close()
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

func writeFileSync(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("offsets: %w", err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("offsets: write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("offsets: fsync %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("offsets: close %s: %w", path, err)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("offsets: fsync directory: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("offsets: fsync directory %s: %w", dir, err)
	}
	return nil
}

// Peek reads the current checkpoint of pipelineName in dir without taking
// the store's lock, so it works while a daemon runs: commits replace the
// file by rename, so Peek sees one whole checkpoint or the one before. It
// is for readers such as `sluice verify`; found is false when none was
// committed yet.
func Peek(dir, pipelineName string) (cp pipeline.Checkpoint, found bool, err error) {
	path := filepath.Join(dir, CurrentFile)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return pipeline.Checkpoint{}, false, nil
	}
	if err != nil {
		return pipeline.Checkpoint{}, false, fmt.Errorf("offsets: read %s: %w", path, err)
	}
	cp, err = decode(path, pipelineName, data)
	return cp, err == nil, err
}
