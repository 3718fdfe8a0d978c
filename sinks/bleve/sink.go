package bleve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/blevesearch/bleve/v2"
	"github.com/blevesearch/bleve/v2/analysis"
	"github.com/blevesearch/bleve/v2/analysis/analyzer/keyword"
	"github.com/blevesearch/bleve/v2/analysis/analyzer/standard"
	"github.com/blevesearch/bleve/v2/index/scorch"
	"github.com/blevesearch/bleve/v2/mapping"
	bolterrors "go.etcd.io/bbolt/errors"
	"go.uber.org/zap"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/sinks/upsert"
)

// Options configures a Sink.
type Options struct {
	// Name identifies the sink in logs ("bleve" when empty).
	Name string
	// Path is the index directory; it is created when absent (an existing
	// empty directory is taken over).
	Path string
	// TombstoneTTL is how long a delete's tombstone is kept once neither it
	// nor a snapshot record of its table was written for that long (see
	// doc.go); zero or less keeps tombstones forever. It must exceed the
	// longest replay horizon: a record older than a purged tombstone could
	// bring its row back.
	TombstoneTTL time.Duration
	// BatchMaxBytes bounds the estimated size of one bleve batch; a Write
	// larger than that is applied as several batches, each durable before
	// the next starts (default 32 MiB).
	BatchMaxBytes int
}

const defaultBatchMaxBytes = 4 << 20

var (
	// ErrLocked is returned (wrapped) when another process holds the index:
	// a running sluice whose sink writes it, or, for Open, a reader.
	ErrLocked = errors.New("bleve index is locked by another process")
	// ErrNoIndex is returned (wrapped) by Search when the directory holds
	// no index.
	ErrNoIndex = errors.New("no bleve index")
	// ErrClosed is returned by the Sink's methods before Open or after
	// Close.
	ErrClosed = errors.New("bleve sink is not open")

	errNoVersion = errors.New("stored document has no version")
)

// lockWait bounds how long Open waits for the index lock held by another
// process before failing (retryably); tests shorten it.
var lockWait = 5 * time.Second

// stateKey is the bleve internal key holding the sink's per-table state.
var stateKey = []byte("sluice/state")

// Sink keeps a bleve index in step with the captured tables, idempotently
// (Invariant 4). It implements pipeline.Sink and serves searches.
//
// A Sink is safe for concurrent use: Write calls are serialized, Search
// and Rows run concurrently with them and with each other.
type Sink struct {
	opts Options
	log  *zap.Logger
	now  func() time.Time

	// mu serializes Open, Write and Close; it guards state, purger and
	// broken.
	mu     sync.Mutex
	state  *sinkState
	purger upsert.Purge
	// broken is set when a bleve batch failed: the index is reopened
	// before the next Write.
	broken bool
	// stopRelease stops the loop that drops mapped segment pages
	// (release.go); nil while the sink is closed.
	stopRelease func()
	// idxMu guards idx: readers hold it shared for a whole search, so Close
	// waits for them.
	idxMu sync.RWMutex
	idx   bleve.Index
	text  analysis.Analyzer
}

var _ pipeline.Sink = (*Sink)(nil)

// sinkState is what the sink keeps about each table, stored in the index
// under stateKey and updated in the same bleve batch as the rows.
type sinkState struct {
	Tables map[string]*tableState `json:"tables"` // by tablePrefix
	// Generation is the highest generation of the versions written
	// (Invariant 10); nil before the first write.
	Generation *uint64 `json:"generation,omitempty"`
}

// generation is the recorded generation in the form upsert shares.
func (st *sinkState) generation() upsert.Generation {
	if st.Generation == nil {
		return upsert.Generation{}
	}
	return upsert.Generation{Gen: *st.Generation, Held: true}
}

type tableState struct {
	ID string `json:"id"` // "schema.table"
	// Barrier is the highest truncate version (64 hex digits), "" if none.
	Barrier string `json:"barrier,omitempty"`
	// SnapshotAt is when a snapshot record of the table was last written,
	// Unix milliseconds; tombstones are kept at least TombstoneTTL past it.
	SnapshotAt int64 `json:"snapshot_at,omitempty"`
	// Columns is the union of the columns ever written, in first-seen order.
	Columns []colState `json:"columns"`

	barrier *pipeline.Version
	byName  map[string]int
}

type colState struct {
	Name string        `json:"name"`
	Type pipeline.Type `json:"-"`
	Elem pipeline.Type `json:"-"`
	// TypeName and ElemName are the types' names (pipeline.Type.String),
	// so the stored state does not depend on the enum's numbering.
	TypeName string `json:"type"`
	ElemName string `json:"elem,omitempty"`
}

// typeByName maps pipeline.Type names back to types.
var typeByName = func() map[string]pipeline.Type {
	m := map[string]pipeline.Type{}
	for t := pipeline.Type(0); !strings.HasPrefix(t.String(), "type("); t++ {
		m[t.String()] = t
	}
	return m
}()

func (t *tableState) index() error {
	t.byName = make(map[string]int, len(t.Columns))
	for i := range t.Columns {
		c := &t.Columns[i]
		typ, ok := typeByName[c.TypeName]
		elem, eok := typeByName[c.ElemName]
		if !ok || (c.ElemName != "" && !eok) {
			return fmt.Errorf("table %s: column %s has unknown type %q", t.ID, c.Name, c.TypeName)
		}
		c.Type, c.Elem = typ, elem
		t.byName[c.Name] = i
	}
	t.barrier = nil
	if t.Barrier != "" {
		v, err := pipeline.ParseVersion(t.Barrier)
		if err != nil {
			return fmt.Errorf("table %s: barrier: %w", t.ID, err)
		}
		t.barrier = &v
	}
	return nil
}

func (t *tableState) clone() *tableState {
	c := *t
	c.Columns = append([]colState(nil), t.Columns...)
	c.byName = make(map[string]int, len(t.byName))
	for k, v := range t.byName {
		c.byName[k] = v
	}
	return &c
}

// New returns an unopened Sink. A nil logger logs nothing.
func New(opts Options, log *zap.Logger) *Sink {
	if opts.Name == "" {
		opts.Name = "bleve"
	}
	if opts.BatchMaxBytes <= 0 {
		opts.BatchMaxBytes = defaultBatchMaxBytes
	}
	if log == nil {
		log = zap.NewNop()
	}
	return &Sink{opts: opts, log: log.With(zap.String("sink", opts.Name)), now: time.Now,
		purger: upsert.Purge{HardDelete: true, TTL: opts.TombstoneTTL}}
}

// Open creates the index directory when absent, opens the index as its
// single writer and loads the sink's state. It blocks for at most a few
// seconds when another process holds the index (then it returns an error
// wrapping ErrLocked, which the runtime retries); a Path that is not an
// index fails with a pipeline.Fatal error. Opening an open Sink does
// nothing. ctx is checked before the (uncancellable) bleve open.
func (s *Sink) Open(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.idx != nil {
		return nil
	}
	if s.opts.Path == "" {
		return pipeline.Fatal(errors.New("bleve sink: path is required"))
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := s.openLocked(); err != nil {
		return err
	}
	s.stopRelease = s.startRelease()
	return nil
}

// maxSegmentDocs is the most documents a merge puts into one segment.
const maxSegmentDocs = 200_000

func (s *Sink) openLocked() error {
	if err := ensureIndex(s.opts.Path); err != nil {
		return fmt.Errorf("bleve sink: %w", err)
	}
	idx, err := bleve.OpenUsing(s.opts.Path, map[string]any{
		// Batch blocks until the batch is persisted (the default, made
		// explicit in case the stored index config says otherwise).
		"unsafe_batch": false,
		"bolt_timeout": lockWait.String(),
		// Invariant 6: merging two segments builds the merged term
		// dictionaries (FSTs) in memory, so a merge into one segment of
		// millions of documents held hundreds of MB (a 2,000,000-change
		// drain peaked at 1.6 GiB RSS). Segments stop growing at
		// maxSegmentDocs; lookups visit a few more segments instead.
		"scorchMergePlanOptions": map[string]any{"MaxSegmentSize": maxSegmentDocs},
	})
	if err != nil {
		return fmt.Errorf("bleve sink: open %s: %w", s.opts.Path, lockedErr(err))
	}
	state, err := loadState(idx)
	if err != nil {
		idx.Close()
		return pipeline.Fatal(fmt.Errorf("bleve sink: %s: %w", s.opts.Path, err))
	}
	s.state = state
	s.text = idx.Mapping().AnalyzerNamed(standard.Name)
	if s.text == nil {
		idx.Close()
		return pipeline.Fatal(errors.New("bleve sink: standard analyzer unavailable"))
	}
	s.idxMu.Lock()
	s.idx = idx
	s.idxMu.Unlock()
	s.broken = false
	s.log.Info("bleve sink open", zap.String("path", s.opts.Path), zap.Int("tables", len(state.Tables)))
	return nil
}

// reopenLocked closes and reopens the index after a failed bleve batch:
// scorch may have introduced the batch in memory without persisting it,
// and lookups must not take such rows for stored ones (a retry would skip
// them as not newer and report them durable).
func (s *Sink) reopenLocked() error {
	s.idxMu.Lock()
	if s.idx != nil {
		if err := s.idx.Close(); err != nil {
			s.log.Warn("close after a failed write", zap.Error(err))
		}
		s.idx = nil
	}
	s.idxMu.Unlock()
	return s.openLocked()
}

// Close waits for a running Write and running searches to finish, then
// closes the index and releases its lock. Write already made everything
// durable; Close flushes nothing new. It ignores ctx (closing a scorch
// index only stops its background routines). Closing a closed Sink does
// nothing.
func (s *Sink) Close(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopRelease != nil {
		s.stopRelease()
		s.stopRelease = nil
	}
	s.idxMu.Lock()
	defer s.idxMu.Unlock()
	s.broken = false
	if s.idx == nil {
		return nil
	}
	err := s.idx.Close()
	s.idx = nil
	return err
}

// lockedErr turns bolt's lock timeout into ErrLocked.
func lockedErr(err error) error {
	if errors.Is(err, bolterrors.ErrTimeout) {
		return fmt.Errorf("%w (held by a running sluice or another reader; query the running sluice instead)", ErrLocked)
	}
	return err
}

// indexMapping is the mapping stored with a new index. Documents are
// built field by field (fields.go), so the mapping only serves queries:
// fields it does not name are analysed with the standard analyzer, the
// internal keyword fields with the keyword analyzer.
func indexMapping() *mapping.IndexMappingImpl {
	m := bleve.NewIndexMapping()
	m.DefaultAnalyzer = standard.Name
	m.StoreDynamic = false
	for _, f := range []string{fieldTable, fieldVersion, fieldDeleted} {
		fm := bleve.NewKeywordFieldMapping()
		fm.Analyzer = keyword.Name
		m.DefaultMapping.AddFieldMappingsAt(f, fm)
	}
	return m
}

// ensureIndex creates an empty index at path unless one is there. The
// index is built in a sibling directory and renamed into place, so a crash
// never leaves a half-created index at path.
func ensureIndex(path string) error {
	if _, err := os.Stat(filepath.Join(path, "index_meta.json")); err == nil {
		return nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	entries, err := os.ReadDir(path)
	switch {
	case err == nil && len(entries) > 0:
		return pipeline.Fatal(fmt.Errorf("%s exists and is not a bleve index (no index_meta.json); "+
			"point path at a new or empty directory", path))
	case err == nil:
		if err := os.Remove(path); err != nil {
			return err
		}
	case !errors.Is(err, fs.ErrNotExist):
		return err
	}
	parent := filepath.Dir(path)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return err
	}
	tmp := filepath.Join(parent, "."+filepath.Base(path)+".creating")
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	idx, err := bleve.NewUsing(tmp, indexMapping(), scorch.Name, scorch.Name, nil)
	if err != nil {
		return fmt.Errorf("create index: %w", err)
	}
	if err := idx.Close(); err != nil {
		return fmt.Errorf("create index: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	return syncDir(parent)
}

// syncDir makes a directory's entries durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	return errors.Join(d.Sync(), d.Close())
}

func loadState(idx bleve.Index) (*sinkState, error) {
	st := &sinkState{Tables: map[string]*tableState{}}
	raw, err := idx.GetInternal(stateKey)
	if err != nil {
		return nil, fmt.Errorf("read sink state: %w", err)
	}
	if len(raw) == 0 {
		return st, nil
	}
	if err := json.Unmarshal(raw, st); err != nil {
		return nil, fmt.Errorf("sink state is corrupt: %w", err)
	}
	if st.Tables == nil {
		st.Tables = map[string]*tableState{}
	}
	for _, t := range st.Tables {
		if err := t.index(); err != nil {
			return nil, err
		}
	}
	return st, nil
}

// Generation implements pipeline.GenerationKeeper.
func (s *Sink) Generation(context.Context) (uint64, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.idx == nil && !s.broken {
		return 0, false, ErrClosed
	}
	g := s.state.generation()
	return g.Gen, g.Held, nil
}
