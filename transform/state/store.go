// Package state is the durable state of the stateful transforms (the
// join and nest, the windows, the dedup): per operator, a bbolt file or a
// pebble directory (Spec.Engine; pebble.go says which suits what) holding
// its declared key spaces (Spec.Spaces), read and written in transactions
// (View, Update) through Keys, with a TTL per key space in the operator's
// clock (keys.go; bbolt only). Writes are guarded by row versions so the state may run
// ahead of the checkpoint (Invariant 5); the state starts over when the
// pipeline has no checkpoint and is refused when the pipeline resumes
// with no state, or with state built for another definition
// (pipeline.StateOwner). Its size is reported after every write, and a
// state past its cap stops the pipeline (Written) rather than fill the
// disk.
package state

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"go.etcd.io/bbolt"

	"github.com/sluice-cdc/sluice/pipeline"
)

// Store is an operator's state file: its key spaces (Spec.Spaces), read
// and written in transactions (View, Update; keys.go).
type Store struct {
	DB  *bbolt.DB  // the Bolt engine's file
	pdb *pebble.DB // the Pebble engine's directory
	// Stored is the definition the state was built for; nil: none.
	Stored []byte
	spec   Spec
	spaces map[string]Space
}

// Spec describes an operator's state.
type Spec struct {
	// What names the operator in messages ("join public.order_docs").
	What string
	// Dir and File locate the state.
	Dir, File string
	// Spaces are the top-level key spaces; Meta, one of them, holds the
	// definition under the key "definition".
	Spaces []Space
	Meta   string
	// Needs says what rebuilding the state reads ("every row of
	// public.orders").
	Needs string
	// MaxBytes caps the state file's size (0: no cap); Setting names
	// where it is set ("transforms[2].window.max_state_bytes").
	MaxBytes int64
	Setting  string
	// Sized, when set, is told the state file's size after every write
	// (a metric).
	Sized func(bytes int64)
	// Engine holds the state: Bolt (a file) or Pebble (a directory, named
	// File). Replaces names the file an earlier engine kept the same state
	// in: found, Open refuses and names the rebuild.
	Engine   Engine
	Replaces string
}

var keyDefinition = []byte("definition")

// Open opens (or creates) the state file; a file another process holds
// is refused after 2 s with what to check.
func Open(s Spec) (*Store, error) {
	if err := os.MkdirAll(s.Dir, 0o750); err != nil {
		return nil, fmt.Errorf("%s: state directory: %w", s.What, err)
	}
	if s.Engine == Pebble {
		return openPebble(s)
	}
	path := filepath.Join(s.Dir, s.File)
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{Timeout: 2 * time.Second,
		// Address space, not memory: a file growing within it is not
		// remapped, which would copy every page a transaction holds.
		InitialMmapSize: 1 << 30})
	if err != nil {
		if errors.Is(err, bbolt.ErrTimeout) {
			return nil, fmt.Errorf("%s: state %s is locked by another process (is a second sluice running this pipeline?)", s.What, path)
		}
		return nil, fmt.Errorf("%s: open state %s: %w", s.What, path, err)
	}
	st := &Store{DB: db, spec: s, spaces: map[string]Space{}}
	for _, sp := range s.Spaces {
		st.spaces[sp.Name] = sp
	}
	err = db.Update(func(tx *bbolt.Tx) error {
		// The declared spaces, made when absent (a new file, or a space
		// added since the file was written).
		for _, sp := range s.Spaces {
			names := [][]byte{[]byte(sp.Name)}
			if sp.TTL > 0 {
				names = append(names, ttlIndex(sp.Name))
			}
			for _, name := range names {
				if _, err := tx.CreateBucketIfNotExists(name); err != nil {
					return err
				}
			}
		}
		if m := tx.Bucket([]byte(s.Meta)); m != nil {
			st.Stored = bytes.Clone(m.Get(keyDefinition))
		}
		return nil
	})
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	return st, nil
}

// Begin is the start of pipeline.StateOwner.Begin: resumed from a
// checkpoint, the state must exist and be built for def; without one the
// state starts over (every input is read again) and records def.
// startedOver reports that state built before was removed.
func (s *Store) Begin(resumed bool, def []byte) (startedOver bool, err error) {
	if resumed {
		switch {
		case s.Stored == nil:
			return false, fmt.Errorf("%s: no state in %s, but the pipeline resumes from a checkpoint (it was added to a running pipeline, or its state_dir moved or was removed): its output needs %s; rebuild it with `sluice run --reset-offsets`, which loads every table again",
				s.spec.What, s.spec.Dir, s.spec.Needs)
		case !bytes.Equal(s.Stored, def):
			return false, fmt.Errorf("%s: the definition changed since its state and output were built (was %s, now %s); rows already written keep the old form: rebuild them with `sluice run --reset-offsets`, which loads every table again",
				s.spec.What, s.Stored, def)
		}
		return false, nil
	}
	if s.pdb != nil {
		err = s.beginPebble(def)
	} else {
		err = s.DB.Update(func(tx *bbolt.Tx) error {
			for _, sp := range s.spec.Spaces {
				names := [][]byte{[]byte(sp.Name)}
				if sp.TTL > 0 {
					names = append(names, ttlIndex(sp.Name))
				}
				for _, name := range names {
					if err := tx.DeleteBucket(name); err != nil && !errors.Is(err, bbolt.ErrBucketNotFound) {
						return err
					}
					if _, err := tx.CreateBucket(name); err != nil {
						return err
					}
				}
			}
			return tx.Bucket([]byte(s.spec.Meta)).Put(keyDefinition, def)
		})
	}
	if err != nil {
		return false, fmt.Errorf("%s: start the state over: %w", s.spec.What, err)
	}
	startedOver = s.Stored != nil
	s.Stored = bytes.Clone(def)
	return startedOver, nil
}

// Written checks the state file's size after a write committed (the
// pages in use up to the last one), and returns it: it is told to
// Spec.Sized, and a size
// past
// Spec.MaxBytes is a fatal error that names the operator, the size and
// the setting. The write is in the file, but the caller returns the
// error before anything that depends on it leaves (results, the
// checkpoint that covers it): nothing is lost, and a restart with a
// higher cap goes on from there.
func (s *Store) Written() (int64, error) {
	size := s.Size()
	if s.spec.Sized != nil {
		s.spec.Sized(size)
	}
	if s.spec.MaxBytes > 0 && size > s.spec.MaxBytes {
		return size, pipeline.Fatal(fmt.Errorf("%s: its state in %s is %s, past %s = %s; raise %s (or bound the state: a shorter lateness, fewer groups), then start sluice again: nothing was lost",
			s.spec.What, s.spec.Dir, mib(size), s.spec.Setting, mib(s.spec.MaxBytes), s.spec.Setting))
	}
	return size, nil
}

// Size is the state file's size: the pages in use up to the last one.
func (s *Store) Size() int64 {
	if s.pdb != nil {
		return s.pebbleSize()
	}
	var size int64
	_ = s.DB.View(func(tx *bbolt.Tx) error { size = tx.Size(); return nil })
	return size
}

// mib renders a size for people.
func mib(n int64) string {
	if n >= 1<<30 {
		return fmt.Sprintf("%.1f GiB (%d bytes)", float64(n)/(1<<30), n)
	}
	return fmt.Sprintf("%.1f MiB (%d bytes)", float64(n)/(1<<20), n)
}

// Close releases the state file.
func (s *Store) Close() error {
	if s.pdb != nil {
		return s.pdb.Close()
	}
	return s.DB.Close()
}
