package window

import (
	"bytes"
	"errors"
	"slices"

	"go.etcd.io/bbolt"
	bbolterrors "go.etcd.io/bbolt/errors"
)

// changeSet is a state write: prepared (encoded) while the window is
// locked, written into bbolt after, so Process goes on while the
// transaction commits and syncs. Per bucket, the keys to put (or delete:
// a nil value); a key set twice keeps the later value.
type changeSet struct {
	// cleared are buckets emptied before the puts.
	cleared []string
	buckets map[string]*kvs
	seq     int    // puts so far: the order of a key's values
	slab    []byte // room for the copies putCopy makes
}

// slabSize is the size of the blocks putCopy carves keys and values from
// (one allocation, which the collector need not scan, for thousands).
const slabSize = 256 << 10

type kvs []kv

type kv struct {
	k, v []byte
	seq  int
}

// bucket returns name's list, made with room for n more keys.
func (c *changeSet) bucket(name []byte, n int) *kvs {
	l := c.buckets[string(name)]
	if l == nil {
		if c.buckets == nil {
			c.buckets = map[string]*kvs{}
		}
		l = new(kvs)
		c.buckets[string(name)] = l
	}
	*l = slices.Grow(*l, n)
	return l
}

// grow makes room for n more keys in bucket name.
func (c *changeSet) grow(name []byte, n int) { c.bucket(name, n) }

func (c *changeSet) put(bucket, k, v []byte) {
	l := c.bucket(bucket, 1)
	c.seq++
	*l = append(*l, kv{k, v, c.seq})
}

func (c *changeSet) del(bucket, k []byte) { c.put(bucket, k, nil) }

// clear empties bucket before the puts: the keys put before are gone
// too.
func (c *changeSet) clear(bucket []byte) {
	c.cleared = append(c.cleared, string(bucket))
	if l := c.buckets[string(bucket)]; l != nil {
		*l = (*l)[:0]
	}
}

// putCopy is put of copies of k and v (v not nil), which the caller may
// then reuse.
func (c *changeSet) putCopy(bucket, k, v []byte) {
	c.put(bucket, c.copy(k), c.copy(v))
}

// delCopy is del of a copy of k.
func (c *changeSet) delCopy(bucket, k []byte) { c.put(bucket, c.copy(k), nil) }

func (c *changeSet) copy(b []byte) []byte {
	if len(b) == 0 {
		return []byte{}
	}
	if len(b) > slabSize/8 {
		return append(make([]byte, 0, len(b)), b...)
	}
	if cap(c.slab)-len(c.slab) < len(b) {
		c.slab = make([]byte, 0, slabSize)
	}
	n := len(c.slab)
	c.slab = append(c.slab, b...)
	return c.slab[n:len(c.slab):len(c.slab)]
}

// apply writes c into tx: each bucket's keys in order, since bbolt splits
// a page only at the commit and keys put out of order into one page move
// its tail each time.
func (c *changeSet) apply(tx *bbolt.Tx) error {
	for _, name := range c.cleared {
		if err := tx.DeleteBucket([]byte(name)); err != nil && !errors.Is(err, bbolterrors.ErrBucketNotFound) {
			return err
		}
		if _, err := tx.CreateBucket([]byte(name)); err != nil {
			return err
		}
	}
	for name, l := range c.buckets {
		b, err := tx.CreateBucketIfNotExists([]byte(name))
		if err != nil {
			return err
		}
		kvs := *l
		slices.SortFunc(kvs, func(a, b kv) int {
			if c := bytes.Compare(a.k, b.k); c != 0 {
				return c
			}
			return a.seq - b.seq
		})
		for i, e := range kvs {
			if i+1 < len(kvs) && bytes.Equal(kvs[i+1].k, e.k) {
				continue // set again later
			}
			if e.v == nil {
				err = b.Delete(e.k)
			} else {
				err = b.Put(e.k, e.v)
			}
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// then appends d's changes after c's.
func (c *changeSet) then(d *changeSet) {
	for _, name := range d.cleared {
		c.clear([]byte(name))
	}
	for name, l := range d.buckets {
		c.grow([]byte(name), len(*l))
		slices.SortFunc(*l, func(a, b kv) int { return a.seq - b.seq })
		for _, e := range *l {
			c.put([]byte(name), e.k, e.v)
		}
	}
}
