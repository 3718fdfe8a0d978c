package join

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"go.etcd.io/bbolt"
	"go.uber.org/zap"

	"github.com/sluice-cdc/sluice/pipeline"
)

// Lookup is one table joined to the from table.
type Lookup struct {
	// Table is the looked-up table, "schema.table".
	Table string
	// On lists the from table's columns that hold the looked-up row's
	// primary key, in the order of that key.
	On []string
	// As is the name of the output column that holds the looked-up row.
	As string
	// Columns selects the looked-up row's columns; empty: all of them.
	Columns []string
}

// Options configures a join.
type Options struct {
	// Output names the joined rows' table, "schema.table".
	Output string
	// From is the table whose rows become output rows, "schema.table".
	From string
	With []Lookup
	// Dir holds the state store; created when absent.
	Dir string
	Log *zap.Logger
}

// Join is the operator. It is used by one goroutine (the runtime's
// transform stage); Close releases the state store.
type Join struct {
	opts    Options
	log     *zap.Logger
	db      *bbolt.DB
	outName [2]string // schema, table

	from    *pipeline.Table            // the from table's latest shape
	lookups map[string]*pipeline.Table // the looked-up tables' latest shapes
	out     *pipeline.Table            // the output shape, rebuilt when an input shape changes
	gen     int
}

// Open opens (or creates) the join's state in opts.Dir.
func Open(opts Options) (*Join, error) {
	if opts.Log == nil {
		opts.Log = zap.NewNop()
	}
	schema, table, ok := strings.Cut(opts.Output, ".")
	if !ok || schema == "" || table == "" {
		return nil, fmt.Errorf("join: output %q is not schema.table", opts.Output)
	}
	if len(opts.With) == 0 {
		return nil, fmt.Errorf("join %s: no lookups", opts.Output)
	}
	if err := os.MkdirAll(opts.Dir, 0o750); err != nil {
		return nil, fmt.Errorf("join %s: state directory: %w", opts.Output, err)
	}
	path := filepath.Join(opts.Dir, "join.db")
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{Timeout: 2 * time.Second})
	if err != nil {
		if errors.Is(err, bbolt.ErrTimeout) {
			return nil, fmt.Errorf("join %s: state %s is locked by another process (is a second sluice running this pipeline?)", opts.Output, path)
		}
		return nil, fmt.Errorf("join %s: open state %s: %w", opts.Output, path, err)
	}
	j := &Join{opts: opts, log: opts.Log, db: db, outName: [2]string{schema, table}, lookups: map[string]*pipeline.Table{}}
	if err := db.Update(j.load); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("join %s: %w", opts.Output, err)
	}
	return j, nil
}

// definition is what the index depends on: when it changes the index is
// rebuilt from the stored rows.
func (j *Join) definition() []byte {
	var b []byte
	b = appendBytes(b, j.opts.From)
	for _, l := range j.opts.With {
		b = appendBytes(b, l.Table)
		b = appendBytes(b, strings.Join(l.On, "\x00"))
	}
	return b
}

// load creates the buckets, reads the stored shapes and rebuilds the
// index when the join's definition changed since it was built.
func (j *Join) load(tx *bbolt.Tx) error {
	for _, name := range [][]byte{bucketRows, bucketIndex, bucketMeta} {
		if _, err := tx.CreateBucketIfNotExists(name); err != nil {
			return err
		}
	}
	st := newState(tx)
	var err error
	if j.from, err = st.shape(j.fromID()); err != nil {
		return err
	}
	for _, l := range j.opts.With {
		t, err := st.shape(tableID(l.Table))
		if err != nil {
			return err
		}
		if t != nil {
			j.lookups[l.Table] = t
		}
	}
	j.rebuildOut()
	def := j.definition()
	if bytes.Equal(tx.Bucket(bucketMeta).Get(keyDef), def) {
		return nil
	}
	if err := tx.DeleteBucket(bucketIndex); err != nil {
		return err
	}
	if _, err := tx.CreateBucket(bucketIndex); err != nil {
		return err
	}
	rows := tx.Bucket(bucketRows).Bucket([]byte(j.opts.From))
	n := 0
	if rows != nil {
		err := rows.ForEach(func(k, v []byte) error {
			e, err := decodeEntry(v)
			if err != nil {
				return err
			}
			n++
			return j.relink(st, k, nil, e)
		})
		if err != nil {
			return err
		}
	}
	if n > 0 {
		j.log.Warn("join definition changed: index rebuilt from the stored rows; rows of a newly added lookup table join once they change or the pipeline is re-snapshotted",
			zap.String("join", j.opts.Output), zap.Int("rows", n))
	}
	return tx.Bucket(bucketMeta).Put(keyDef, def)
}

func tableID(name string) pipeline.TableID {
	s, t, _ := strings.Cut(name, ".")
	return pipeline.TableID{Schema: s, Table: t}
}

func (j *Join) fromID() pipeline.TableID { return tableID(j.opts.From) }

// Close releases the state store.
func (j *Join) Close() error { return j.db.Close() }

// Snapshot returns nil: the join's state is its own durable store, written
// before its outputs leave Process and guarded by row versions (Invariant 5).
func (j *Join) Snapshot() ([]byte, error) { return nil, nil }

// Restore accepts only the nil state Snapshot returns.
func (j *Join) Restore(b []byte) error {
	if len(b) > 0 {
		return fmt.Errorf("join %s: unexpected checkpoint state", j.opts.Output)
	}
	return nil
}

// Process passes every input record through and appends, after each
// record of the from table or a looked-up table, the joined rows it
// changes. The state transaction commits (fsync) before Process returns,
// so the state is durable before any output can be (Invariant 5).
func (j *Join) Process(ctx context.Context, in []pipeline.Record) ([]pipeline.Record, error) {
	out := make([]pipeline.Record, 0, len(in)+len(in)/2)
	err := j.db.Update(func(tx *bbolt.Tx) error {
		st := newState(tx)
		for i := range in {
			if err := ctx.Err(); err != nil {
				return err
			}
			r := &in[i]
			out = append(out, *r)
			if r.Table == nil || !r.Op.IsData() {
				continue
			}
			var err error
			if out, err = j.apply(st, r, out); err != nil {
				return fmt.Errorf("join %s: %s %s at version %s: %w", j.opts.Output, r.Table.ID, r.Op, r.Version, err)
			}
		}
		return st.flush()
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// apply updates the state with r and appends the output records it causes.
func (j *Join) apply(st state, r *pipeline.Record, out []pipeline.Record) ([]pipeline.Record, error) {
	name := r.Table.ID.String()
	isFrom := name == j.opts.From
	var lookupN []int
	for n, l := range j.opts.With {
		if l.Table == name {
			lookupN = append(lookupN, n)
		}
	}
	if !isFrom && len(lookupN) == 0 {
		return out, nil
	}
	if err := j.observeShape(st, r.Table, isFrom, lookupN); err != nil {
		return out, err
	}
	if r.Op == pipeline.OpTruncate {
		return j.truncate(st, r, isFrom, lookupN, out)
	}
	keys, err := j.applyRow(st, r, isFrom)
	if err != nil {
		return out, err
	}
	if isFrom {
		for _, k := range keys {
			if out, err = j.emit(st, r, k, out); err != nil {
				return out, err
			}
		}
	}
	if len(lookupN) > 0 {
		return j.emitReferrers(st, r, lookupN, keys, out)
	}
	return out, nil
}

// observeShape records a new shape of an input table and rebuilds the
// output shape.
func (j *Join) observeShape(st state, t *pipeline.Table, isFrom bool, lookupN []int) error {
	name := t.ID.String()
	if (!isFrom || j.from == t) && (len(lookupN) == 0 || j.lookups[name] == t) {
		return nil
	}
	for _, n := range lookupN {
		l := j.opts.With[n]
		if len(t.KeyIdx) != len(l.On) {
			return fmt.Errorf("lookup %s: on lists %d column(s) but %s has a %d-column primary key (%s); list the columns of %s that hold it, in key order",
				l.As, len(l.On), name, len(t.KeyIdx), keyNames(t), j.opts.From)
		}
		for _, c := range l.Columns {
			if !slices.ContainsFunc(t.Columns, func(x pipeline.Column) bool { return x.Name == c }) {
				return fmt.Errorf("lookup %s: %s has no column %q (listed in columns)", l.As, name, c)
			}
		}
	}
	if isFrom {
		if len(t.KeyIdx) == 0 {
			return fmt.Errorf("%s has no primary key: joined rows need one", name)
		}
		for _, l := range j.opts.With {
			if slices.ContainsFunc(t.Columns, func(x pipeline.Column) bool { return x.Name == l.As }) {
				return fmt.Errorf("lookup %s: %s already has a column %q; choose another name for as", l.As, name, l.As)
			}
			for _, c := range l.On {
				if !slices.ContainsFunc(t.Columns, func(x pipeline.Column) bool { return x.Name == c }) {
					return fmt.Errorf("lookup %s: %s has no column %q (listed in on)", l.As, name, c)
				}
			}
		}
	}
	if err := st.putShape(t); err != nil {
		return err
	}
	if isFrom {
		j.from = t
	}
	if len(lookupN) > 0 {
		j.lookups[name] = t
	}
	j.rebuildOut()
	return nil
}

func keyNames(t *pipeline.Table) string {
	names := make([]string, len(t.KeyIdx))
	for i, k := range t.KeyIdx {
		names[i] = t.Columns[k].Name
	}
	return strings.Join(names, ", ")
}

// rebuildOut derives the output shape: the from table's columns, then one
// JSON column per lookup whose Fields are the looked-up columns.
func (j *Join) rebuildOut() {
	if j.from == nil {
		return
	}
	cols := slices.Clone(j.from.Columns)
	for _, l := range j.opts.With {
		c := pipeline.Column{Name: l.As, Type: pipeline.TypeJSON, Nullable: true, SourceType: "join " + l.Table,
			Fields: []pipeline.Column{}}
		if t := j.lookups[l.Table]; t != nil {
			c.Fields = lookupColumns(t, l)
		}
		cols = append(cols, c)
	}
	j.gen++
	id := pipeline.TableID{Database: j.from.ID.Database, Schema: j.outName[0], Table: j.outName[1]}
	j.out = &pipeline.Table{ID: id, Columns: cols, KeyIdx: slices.Clone(j.from.KeyIdx), Generation: j.gen}
}

// lookupColumns returns l's selected columns of t, as plain (non-key) members.
func lookupColumns(t *pipeline.Table, l Lookup) []pipeline.Column {
	var cols []pipeline.Column
	for _, c := range t.Columns {
		if len(l.Columns) == 0 || slices.Contains(l.Columns, c.Name) {
			c.Key = false
			cols = append(cols, c)
		}
	}
	return cols
}
