package state

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"go.etcd.io/bbolt"
)

// Space is a top-level key space of an operator's state.
type Space struct {
	Name string
	// TTL, when positive, is how long a key lives after its last Put, in
	// the clock the operator gives its writes (Update's now: the source's
	// event time, so a replay expires what the first run expired). Past
	// it Get does not see the key, and writes sweep it away (Invariant
	// S1).
	TTL time.Duration
}

// Invariant S1: a key space with a TTL holds, besides its keys, an index
// <name>\x00ttl of (expiry, key). Every Put and Delete keeps the two in
// step in the same transaction; a key's value starts with its expiry, so
// a Put of a key already there finds its old index entry.

// sweepPerWrite bounds the expired keys one write deletes per space, so a
// write after a long pause does not stall: the rest go with the next
// writes (Get already hides them).
var sweepPerWrite = 10000

// Tx is one transaction on an operator's state: reads, and writes when
// it comes from Update.
type Tx struct {
	tx *bbolt.Tx
	pr pebbleReader  // the Pebble engine's reads
	pb *pebble.Batch // and writes (nil in View)
	// it is the iterator the Pebble engine's scans share; scanning: one
	// is running.
	it       *pebble.Iterator
	scanning bool
	// readErr is the first read of the Pebble engine that failed other
	// than for a missing key: the transaction fails with it.
	readErr error
	st      *Store
	now     int64 // Unix microseconds: the clock of the TTLs (noClock: unset)
	// until bounds what the write sweeps (SweepUntil); limited: set.
	until   int64
	limited bool
}

// SweepUntil bounds the keys this write sweeps to those expired at
// horizon (the zero time: none), however far the clock goes: an operator
// whose inputs may be handed again (a replay after a restart) keeps the
// keys a replayed change could still see, which Get hides by the clock
// all the same.
func (t *Tx) SweepUntil(horizon time.Time) {
	t.until, t.limited = clock(horizon), true
}

// noClock is the clock of a transaction given the zero time: no key is
// expired, and a Put into a space with a TTL is an error.
const noClock = math.MinInt64

func clock(now time.Time) int64 {
	if now.IsZero() {
		return noClock
	}
	return now.UnixMicro()
}

// At moves the transaction's clock to now (the event time of the change
// being applied); the zero time leaves it.
func (t *Tx) At(now time.Time) {
	if !now.IsZero() {
		t.now = now.UnixMicro()
	}
}

// Bolt is the transaction itself, for an operator whose state has a
// layout of its own (the window's row logs); nil with the Pebble
// engine. Keys it writes into a space with a TTL bypass the TTL.
func (t *Tx) Bolt() *bbolt.Tx { return t.tx }

// Keys is a key space, or a space nested in one, in a transaction.
type Keys struct {
	prefix []byte // the Pebble engine: the space's path (pebble.go)
	b      *bbolt.Bucket
	idx    *bbolt.Bucket // the TTL index; nil: no TTL
	ttl    int64
	tx     *Tx
}

// Space returns the declared key space name; an undeclared name is an
// error (a typo would otherwise keep state nobody reads).
func (t *Tx) Space(name string) (*Keys, error) {
	sp, ok := t.st.spaces[name]
	if !ok {
		return nil, fmt.Errorf("%s: no key space %q in its state", t.st.spec.What, name)
	}
	if t.pr != nil {
		return &Keys{prefix: spacePath(nil, []byte(name)), tx: t}, nil
	}
	b := t.tx.Bucket([]byte(name))
	if b == nil {
		return nil, fmt.Errorf("%s: key space %q is missing from %s (started over?)", t.st.spec.What, name, t.st.spec.Dir)
	}
	k := &Keys{b: b, tx: t}
	if sp.TTL > 0 {
		k.idx, k.ttl = t.tx.Bucket(ttlIndex(name)), sp.TTL.Microseconds()
	}
	return k, nil
}

func ttlIndex(space string) []byte { return []byte(space + "\x00ttl") }

// Nested returns the space nested in k under name, made when absent (in
// a write transaction). A nested space has no TTL of its own.
func (k *Keys) Nested(name []byte) (*Keys, error) {
	if k.b == nil {
		return &Keys{prefix: spacePath(k.prefix, name), tx: k.tx}, nil
	}
	if k.idx != nil {
		return nil, errors.New("a key space with a TTL has no nested spaces")
	}
	if b := k.b.Bucket(name); b != nil {
		return &Keys{b: b, tx: k.tx}, nil
	}
	b, err := k.b.CreateBucket(name)
	if err != nil {
		return nil, err
	}
	return &Keys{b: b, tx: k.tx}, nil
}

// Lookup returns the space nested in k under name; nil when absent (the
// Pebble engine has no empty spaces to tell apart: it returns the space).
func (k *Keys) Lookup(name []byte) *Keys {
	if k.b == nil {
		return &Keys{prefix: spacePath(k.prefix, name), tx: k.tx}
	}
	if k.idx != nil {
		return nil
	}
	b := k.b.Bucket(name)
	if b == nil {
		return nil
	}
	return &Keys{b: b, tx: k.tx}
}

// Get returns key's value (nil: none, or expired). The value is valid
// for the transaction only.
func (k *Keys) Get(key []byte) []byte {
	if k.b == nil {
		return k.pebbleGet(key)
	}
	v := k.b.Get(key)
	if v == nil || k.idx == nil {
		return v
	}
	if len(v) < 8 || int64(binary.BigEndian.Uint64(v)) <= k.tx.now {
		return nil
	}
	return v[8:]
}

// Put sets key's value; with a TTL the key lives until now + TTL.
func (k *Keys) Put(key, value []byte) error {
	if k.b == nil {
		return k.pebblePut(key, value)
	}
	if k.idx == nil {
		return k.b.Put(key, value)
	}
	if k.tx.now == noClock {
		return errors.New("a key with a TTL put with no clock (the change has no event time)")
	}
	if err := k.unindex(key); err != nil {
		return err
	}
	exp := k.tx.now + k.ttl
	v := binary.BigEndian.AppendUint64(make([]byte, 0, 8+len(value)), uint64(exp))
	if err := k.b.Put(key, append(v, value...)); err != nil {
		return err
	}
	return k.idx.Put(indexKey(exp, key), nil)
}

// Delete removes key (no error when absent).
func (k *Keys) Delete(key []byte) error {
	if k.b == nil {
		return k.pebbleDelete(key)
	}
	if k.idx != nil {
		if err := k.unindex(key); err != nil {
			return err
		}
	}
	return k.b.Delete(key)
}

// unindex removes key's TTL index entry, when the key is there.
func (k *Keys) unindex(key []byte) error {
	if old := k.b.Get(key); len(old) >= 8 {
		return k.idx.Delete(indexKey(int64(binary.BigEndian.Uint64(old)), key))
	}
	return nil
}

func indexKey(exp int64, key []byte) []byte {
	return append(binary.BigEndian.AppendUint64(make([]byte, 0, 8+len(key)), uint64(exp)^(1<<63)), key...)
}

// Scan calls fn with every live key starting with prefix, in key order,
// and its value (valid during the call). A nested space is not a key. fn
// must not write to k.
func (k *Keys) Scan(prefix []byte, fn func(key, value []byte) error) error {
	if k.b == nil {
		return k.pebbleScan(prefix, fn)
	}
	c := k.b.Cursor()
	for key, v := c.Seek(prefix); key != nil && bytes.HasPrefix(key, prefix); key, v = c.Next() {
		if v == nil && k.b.Bucket(key) != nil {
			continue // a nested space (an empty value may read as nil too)
		}
		if k.idx != nil {
			if len(v) < 8 || int64(binary.BigEndian.Uint64(v)) <= k.tx.now {
				continue
			}
			v = v[8:]
		}
		if err := fn(key, v); err != nil {
			return err
		}
	}
	return nil
}

// Len is the number of keys in k, expired ones not yet swept included
// (with the Pebble engine: counted).
func (k *Keys) Len() int {
	if k.b == nil {
		n := 0
		_ = k.pebbleScan(nil, func(_, _ []byte) error { n++; return nil })
		return n
	}
	return k.b.Stats().KeyN
}

// sweep deletes up to sweepPerWrite keys of k expired at the
// transaction's clock.
func (k *Keys) sweep() error {
	c := k.idx.Cursor()
	for n := 0; n < sweepPerWrite; n++ {
		ik, _ := c.First()
		if ik == nil || len(ik) < 8 {
			return nil
		}
		exp := int64(binary.BigEndian.Uint64(ik) ^ (1 << 63))
		if exp > k.tx.now || k.tx.limited && (k.tx.until == noClock || exp > k.tx.until) {
			return nil
		}
		key := bytes.Clone(ik[8:])
		if err := k.idx.Delete(ik); err != nil {
			return err
		}
		if err := k.b.Delete(key); err != nil {
			return err
		}
	}
	return nil
}

// Update runs fn in a write transaction at now (the operator's clock for
// the TTLs: the event time of what it applies; Tx.At moves it; the zero
// time: no clock, no key expired), sweeps the keys expired at the clock
// fn left, commits, and checks the state's size (Written): past the cap
// it is a fatal error, returned after the commit.
func (s *Store) Update(now time.Time, fn func(*Tx) error) error {
	if s.pdb != nil {
		if err := s.updatePebble(fn); err != nil {
			return err
		}
		_, err := s.Written()
		return err
	}
	err := s.DB.Update(func(btx *bbolt.Tx) error {
		tx := &Tx{tx: btx, st: s, now: clock(now)}
		if err := fn(tx); err != nil {
			return err
		}
		for _, sp := range s.spec.Spaces {
			if sp.TTL <= 0 {
				continue
			}
			k, err := tx.Space(sp.Name)
			if err != nil {
				return err
			}
			if err := k.sweep(); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	_, err = s.Written()
	return err
}

// View runs fn in a read transaction at now (what a TTL hides).
func (s *Store) View(now time.Time, fn func(*Tx) error) error {
	if s.pdb != nil {
		return s.viewPebble(fn)
	}
	return s.DB.View(func(btx *bbolt.Tx) error { return fn(&Tx{tx: btx, st: s, now: clock(now)}) })
}
