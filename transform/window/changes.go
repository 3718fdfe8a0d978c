package window

import (
	"bytes"
	"slices"

	"go.etcd.io/bbolt"
)

// changeSet is a state write: prepared (encoded) while the window is
// locked, written into bbolt after, so Process goes on while the
// transaction commits and syncs. Per bucket, the keys to put (or delete:
// a nil value); a key set twice keeps the later value.
type changeSet struct {
	buckets map[string][]kv
}

type kv struct{ k, v []byte }

func (c *changeSet) put(bucket, k, v []byte) {
	if c.buckets == nil {
		c.buckets = map[string][]kv{}
	}
	c.buckets[string(bucket)] = append(c.buckets[string(bucket)], kv{k, v})
}

func (c *changeSet) del(bucket, k []byte) { c.put(bucket, k, nil) }

// apply writes c into tx: each bucket's keys in order, since bbolt splits
// a page only at the commit and keys put out of order into one page move
// its tail each time.
func (c *changeSet) apply(tx *bbolt.Tx) error {
	for name, kvs := range c.buckets {
		b, err := tx.CreateBucketIfNotExists([]byte(name))
		if err != nil {
			return err
		}
		slices.SortStableFunc(kvs, func(a, b kv) int { return bytes.Compare(a.k, b.k) })
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
	for name, kvs := range d.buckets {
		for _, e := range kvs {
			c.put([]byte(name), e.k, e.v)
		}
	}
}
