package state

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// Engine is what holds an operator's state.
type Engine uint8

const (
	// Bolt is one bbolt file (a copy-on-write B+tree): a write rewrites
	// every page it touches, so it suits state whose writes cluster (a
	// window's logs, a dedup's recent keys) and keeps nothing running in
	// the background.
	Bolt Engine = iota
	// Pebble is a pebble directory (a log-structured merge tree): a write
	// appends to its log, so writes spread over a large state (a join's
	// or nest's rows, a change anywhere in millions of rows) cost what
	// they write, not a page each. It has no TTL spaces and no Tx.Bolt.
	Pebble
)

// A space's keys in pebble: every space (top level or nested) is a path
// of names, each as 0x01 <uvarint length> <name>; its keys follow its
// path after a 0x00. A space's keys and the spaces nested in it never
// share a prefix, so a scan of one never meets the other.

func spacePath(parent []byte, name []byte) []byte {
	p := append(bytes.Clone(parent), 0x01)
	p = binary.AppendUvarint(p, uint64(len(name)))
	return append(p, name...)
}

func (k *Keys) pebbleKey(key []byte) []byte {
	b := make([]byte, 0, len(k.prefix)+1+len(key))
	return append(append(append(b, k.prefix...), 0x00), key...)
}

// successor is the least key above every key starting with prefix; nil:
// none (prefix is all 0xff).
func successor(prefix []byte) []byte {
	s := bytes.Clone(prefix)
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] < 0xff {
			s[i]++
			return s[:i+1]
		}
	}
	return nil
}

func openPebble(s Spec) (*Store, error) {
	path := filepath.Join(s.Dir, s.File)
	for _, sp := range s.Spaces {
		if sp.TTL > 0 {
			return nil, fmt.Errorf("%s: key space %s has a TTL, which the pebble engine does not keep", s.What, sp.Name)
		}
	}
	if s.Replaces != "" {
		if old := filepath.Join(s.Dir, s.Replaces); fileExists(old) {
			return nil, fmt.Errorf("%s: %s is a state file of an earlier sluice (one bbolt file); this one keeps the state in %s: rebuild it with `sluice run --reset-offsets`, which removes the file and loads every table again",
				s.What, old, path)
		}
	}
	opts := &pebble.Options{Logger: quiet{}, CacheSize: pebbleCache, MemTableSize: pebbleMemTable, FS: pebbleFS}
	// Uncompressed blocks: the state is read at random on every change, and
	// on two cores decompressing what the cache misses costs more than the
	// disk it saves.
	opts.ApplyCompressionSettings(func() pebble.DBCompressionSettings { return pebble.DBCompressionNone })
	db, err := pebble.Open(path, opts)
	if err != nil {
		return nil, fmt.Errorf("%s: open state %s: %w (is a second sluice running this pipeline?)", s.What, path, err)
	}
	st := &Store{pdb: db, spec: s, spaces: map[string]Space{}}
	for _, sp := range s.Spaces {
		st.spaces[sp.Name] = sp
	}
	v, closer, err := db.Get(st.definitionKey())
	switch {
	case err == nil:
		st.Stored = bytes.Clone(v)
		_ = closer.Close()
	case !errors.Is(err, pebble.ErrNotFound):
		_ = db.Close()
		return nil, fmt.Errorf("%s: read state %s: %w", s.What, path, err)
	}
	return st, nil
}

// pebbleFS, set by tests, is the file system the Pebble engine keeps its
// state on (nil: the operating system's).
var pebbleFS vfs.FS

// The block cache and memtable of an operator's pebble state: the cache
// holds the blocks a change reads (a nest's parent and its children); the
// memtable is pebble's default, which the nest benchmark found faster
// than 32 MiB (35,422 against 30,294 records/s: a shallower skiplist to
// search on every read) and which bounds the log a state carries.
const (
	pebbleCache    = 64 << 20
	pebbleMemTable = 4 << 20
)

func (s *Store) definitionKey() []byte {
	k := &Keys{prefix: spacePath(nil, []byte(s.spec.Meta))}
	return k.pebbleKey(keyDefinition)
}

// beginPebble starts the state over: every key removed, def recorded.
func (s *Store) beginPebble(def []byte) error {
	b := s.pdb.NewBatch()
	defer b.Close()
	if err := b.DeleteRange([]byte{0x00}, []byte{0xff}, nil); err != nil {
		return err
	}
	if err := b.Set(s.definitionKey(), def, nil); err != nil {
		return err
	}
	return b.Commit(pebble.Sync)
}

func (s *Store) updatePebble(fn func(*Tx) error) error {
	b := s.pdb.NewIndexedBatch()
	defer b.Close()
	tx := &Tx{pr: b, pb: b, st: s, now: noClock}
	err := fn(tx)
	if cerr := tx.closeIter(); err == nil {
		err = cerr
	}
	if err == nil && tx.readErr != nil {
		err = fmt.Errorf("%s: read the state: %w", s.spec.What, tx.readErr)
	}
	if err != nil {
		return err
	}
	return b.Commit(pebble.Sync)
}

func (s *Store) viewPebble(fn func(*Tx) error) error {
	snap := s.pdb.NewSnapshot()
	defer snap.Close()
	tx := &Tx{pr: snap, st: s, now: noClock}
	err := fn(tx)
	if cerr := tx.closeIter(); err == nil {
		err = cerr
	}
	if err == nil && tx.readErr != nil {
		err = fmt.Errorf("%s: read the state: %w", s.spec.What, tx.readErr)
	}
	return err
}

// closeIter closes the iterator the transaction's scans share.
func (t *Tx) closeIter() error {
	if t.it == nil {
		return nil
	}
	err := t.it.Close()
	t.it = nil
	return err
}

// pebbleGet returns the key's value, nil when there is none. A read that
// fails otherwise also gives nil, and is kept on the transaction, which
// then fails instead of committing what was built on the missing value.
func (k *Keys) pebbleGet(key []byte) []byte {
	v, closer, err := k.tx.pr.Get(k.pebbleKey(key))
	if err != nil {
		if !errors.Is(err, pebble.ErrNotFound) && k.tx.readErr == nil {
			k.tx.readErr = err
		}
		return nil
	}
	defer closer.Close()
	return bytes.Clone(v)
}

func (k *Keys) pebblePut(key, value []byte) error {
	if k.tx.pb == nil {
		return errors.New("a write in a read transaction")
	}
	return k.tx.pb.Set(k.pebbleKey(key), value, nil)
}

func (k *Keys) pebbleDelete(key []byte) error {
	if k.tx.pb == nil {
		return errors.New("a write in a read transaction")
	}
	return k.tx.pb.Delete(k.pebbleKey(key), nil)
}

func (k *Keys) pebbleScan(prefix []byte, fn func(key, value []byte) error) error {
	lower := k.pebbleKey(prefix)
	opts := &pebble.IterOptions{LowerBound: lower, UpperBound: successor(lower)}
	// The transaction's scans share one iterator (repositioned, and
	// refreshed to the batch's writes so far, by SetOptions): creating
	// one per scan costs more than the scan. A scan within a scan gets
	// its own.
	it, own := k.tx.it, false
	switch {
	case it == nil:
		var err error
		if it, err = k.tx.pr.NewIter(opts); err != nil {
			return err
		}
		k.tx.it = it
	case k.tx.scanning:
		var err error
		if it, err = k.tx.pr.NewIter(opts); err != nil {
			return err
		}
		own = true
		defer it.Close()
	default:
		it.SetOptions(opts)
	}
	if !own {
		k.tx.scanning = true
		defer func() { k.tx.scanning = false }()
	}
	skip := len(k.prefix) + 1
	for ok := it.First(); ok; ok = it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			return err
		}
		if err := fn(it.Key()[skip:], v); err != nil {
			return err
		}
	}
	return it.Error()
}

func (s *Store) pebbleSize() int64 { return int64(s.pdb.Metrics().DiskSpaceUsage()) }

// quiet drops pebble's informational messages; its errors reach the
// operator through the calls that fail.
type quiet struct{}

func (quiet) Infof(string, ...any)         {}
func (quiet) Errorf(string, ...any)        {}
func (quiet) Fatalf(f string, args ...any) { panic(fmt.Sprintf(f, args...)) }

// pebbleReader is what a transaction reads: a batch (Update) or a
// snapshot (View).
type pebbleReader interface {
	Get(key []byte) ([]byte, io.Closer, error)
	NewIter(o *pebble.IterOptions) (*pebble.Iterator, error)
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
