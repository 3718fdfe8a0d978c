package snapshot

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sort"
	"strconv"
	"sync"
	"testing"

	"github.com/sluice-cdc/sluice/pipeline"
)

// fakeDB is one table (int64 key, string value) with a commit log, for
// the engine's unit tests: it is the Reader, and its log is the source.
type fakeDB struct {
	t *testing.T

	mu      sync.Mutex
	rows    map[int64]string
	hidden  map[uint64]func() // committed in the log, not yet visible to reads
	lsn     uint64
	xid     uint64
	table   *pipeline.Table
	log     chan pipeline.Batch
	chunks  int
	cuts    int                // chunks cut at their byte bound
	widest  int                // the most bytes a chunk kept before its last row
	onChunk func()             // called inside Chunk, after the read
	onPlan  func()             // called inside Plan, after the read
	onKeys  func(keys [][]any) // called inside Keys, after the read
	planErr error
}

func newFakeDB(t *testing.T) *fakeDB {
	tb := &pipeline.Table{ID: pipeline.TableID{Database: "db", Schema: "s", Table: "t"}, Generation: 1,
		Columns: []pipeline.Column{{Name: "id", Type: pipeline.TypeInt64, Key: true}, {Name: "v", Type: pipeline.TypeString, Nullable: true}},
		KeyIdx:  []int{0}}
	return &fakeDB{t: t, rows: map[int64]string{}, hidden: map[uint64]func(){}, table: tb, log: make(chan pipeline.Batch, 1<<20)}
}

type op struct {
	kind      pipeline.Op
	key       int64
	old       int64 // for a key update: the old key
	value     string
	unchanged bool // an update that leaves v as is and sends it unchanged (Postgres TOAST)
	// partial: an insert that sets v but logs it left out (Unchanged,
	// Refetch: a MySQL row image of binlog_row_image=MINIMAL)
	partial bool
}

// commit applies ops in one transaction and logs them; visible false
// logs them while reads do not see them until reveal.
func (db *fakeDB) commit(visible bool, ops ...op) uint64 {
	db.mu.Lock()
	defer db.mu.Unlock()
	db.lsn++
	db.xid++
	xid := db.xid
	var recs []pipeline.Record
	apply := func() {}
	for i, o := range ops {
		r := pipeline.Record{Op: o.kind, Table: db.table, Version: pipeline.Version{0, db.lsn, 0, uint64(2 + i)}, TxID: xid}
		switch o.kind {
		case pipeline.OpInsert, pipeline.OpUpdate:
			r.After = []any{o.key, o.value}
			if o.unchanged || o.partial {
				r.After[1] = pipeline.UnchangedValue
			}
			r.Refetch = o.partial
			if o.old != o.key && o.kind == pipeline.OpUpdate {
				r.Before = []any{o.old, nil}
			}
		case pipeline.OpDelete:
			r.Before = []any{o.key, nil}
		}
		recs = append(recs, r)
		prev := apply
		o := o
		apply = func() {
			prev()
			switch o.kind {
			case pipeline.OpInsert, pipeline.OpUpdate:
				if o.unchanged {
					return
				}
				if o.kind == pipeline.OpUpdate && o.old != o.key {
					delete(db.rows, o.old)
				}
				db.rows[o.key] = o.value
			case pipeline.OpDelete:
				delete(db.rows, o.key)
			case pipeline.OpTruncate:
				clear(db.rows)
			}
		}
	}
	if visible {
		apply()
	} else {
		db.hidden[xid] = apply
	}
	pos, _ := json.Marshal(db.lsn)
	for i := range recs {
		recs[i].Pos = pos
	}
	db.log <- pipeline.Batch{Records: recs, Pos: pos}
	return xid
}

func (db *fakeDB) reveal(xid uint64) {
	db.mu.Lock()
	defer db.mu.Unlock()
	db.hidden[xid]()
	delete(db.hidden, xid)
}

func (db *fakeDB) sortedKeys() []int64 {
	keys := make([]int64, 0, len(db.rows))
	for k := range db.rows {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func cursorOf(k int64) Cursor { b, _ := json.Marshal(k); return b }

func keyOf(c Cursor) (int64, bool) {
	if c == nil {
		return 0, false
	}
	var k int64
	_ = json.Unmarshal(c, &k)
	return k, true
}

func (db *fakeDB) Plan(_ context.Context, t Target, after Cursor, parts int) (Plan, error) {
	db.mu.Lock()
	defer db.mu.Unlock()
	if db.planErr != nil {
		return Plan{}, db.planErr
	}
	keys := db.sortedKeys()
	p := Plan{Table: db.table, Rows: int64(len(keys))}
	if len(keys) == 0 {
		return p, nil
	}
	p.Max = cursorOf(keys[len(keys)-1])
	for i := 1; i < parts; i++ {
		if k := keys[len(keys)*i/parts]; k != keys[len(keys)-1] {
			p.Splits = append(p.Splits, cursorOf(k))
		}
	}
	if f := db.onPlan; f != nil {
		db.mu.Unlock()
		f()
		db.mu.Lock()
	}
	return p, nil
}

func (db *fakeDB) Chunk(_ context.Context, t Target, after, upTo Cursor, limit, maxBytes int) (Chunk, error) {
	db.mu.Lock()
	c := Chunk{Table: db.table}
	bytes := 0
	lo, hasLo := keyOf(after)
	hi, hasHi := keyOf(upTo)
	for _, k := range db.sortedKeys() {
		if hasLo && k <= lo || hasHi && k > hi {
			continue
		}
		if len(c.Rows) == limit {
			break
		}
		if maxBytes > 0 && bytes >= maxBytes {
			c.Cut = true
			break
		}
		row := []any{k, db.rows[k]}
		c.Rows = append(c.Rows, row)
		c.Sizes = append(c.Sizes, pipeline.ImageSize(row))
		c.Last = cursorOf(k)
		db.widest = max(db.widest, bytes)
		bytes += c.Sizes[len(c.Sizes)-1]
	}
	if c.Cut {
		db.cuts++
	}
	for xid := range db.hidden {
		c.InProgress = append(c.InProgress, xid)
	}
	db.chunks++
	f := db.onChunk
	db.mu.Unlock()
	if f != nil {
		f()
	}
	return c, nil
}

func (db *fakeDB) Keys(_ context.Context, t Target, keys [][]any) (Chunk, error) {
	db.mu.Lock()
	defer db.mu.Unlock()
	c := Chunk{Table: db.table}
	for _, k := range keys {
		if v, ok := db.rows[k[0].(int64)]; ok {
			row := []any{k[0], v}
			c.Rows = append(c.Rows, row)
			c.Sizes = append(c.Sizes, pipeline.ImageSize(row))
		}
	}
	for xid := range db.hidden {
		c.InProgress = append(c.InProgress, xid)
	}
	if f := db.onKeys; f != nil {
		db.mu.Unlock()
		f(keys)
		db.mu.Lock()
	}
	return c, nil
}

func (db *fakeDB) Mark(_ context.Context, token string, _ pipeline.TableID, high func(*pipeline.Table) error) error {
	if high != nil {
		db.mu.Lock()
		tb := db.table
		db.mu.Unlock()
		if err := high(tb); err != nil {
			return err
		}
	}
	db.mu.Lock()
	defer db.mu.Unlock()
	db.lsn++
	db.xid++
	pos, _ := json.Marshal(db.lsn)
	db.log <- pipeline.Batch{Records: []pipeline.Record{{Op: pipeline.OpWatermark, After: []any{token},
		Version: pipeline.Version{0, db.lsn, 0, 2}, TxID: db.xid, Pos: pos}}, Pos: pos}
	return nil
}

// fakeSource reads the fake log from a position (the LSN after which to
// resume is ignored: the tests build the log they need).
type fakeSource struct {
	db     *fakeDB
	opened pipeline.Position
	acked  pipeline.Position
}

func (s *fakeSource) Open(_ context.Context, from pipeline.Position) error {
	s.opened = from
	return nil
}
func (s *fakeSource) Read(ctx context.Context) (pipeline.Batch, error) {
	select {
	case b := <-s.db.log:
		return b, nil
	case <-ctx.Done():
		return pipeline.Batch{}, ctx.Err()
	}
}
func (s *fakeSource) Ack(_ context.Context, p pipeline.Position) error { s.acked = p; return nil }
func (s *fakeSource) Close(context.Context) error                      { return nil }

// fakeSink applies records with Invariant 4's version guard.
type fakeSink struct {
	rows    map[int64]string
	vers    map[int64]pipeline.Version
	barrier pipeline.Version
	writes  int
	// reads counts the snapshot reads by Record.Replaces.
	reads map[bool]int
}

func newFakeSink() *fakeSink {
	return &fakeSink{rows: map[int64]string{}, vers: map[int64]pipeline.Version{}, reads: map[bool]int{}}
}

func (s *fakeSink) apply(t *testing.T, recs []pipeline.Record) {
	for _, r := range recs {
		if r.Op == pipeline.OpWatermark {
			t.Fatalf("a watermark reached the sink: %+v", r)
		}
		if r.Op == pipeline.OpRead {
			s.reads[r.Replaces]++
		}
		if r.Op == pipeline.OpRead && r.Size != pipeline.EstimateSize(&r) {
			// Invariant 6: the in-flight cap counts what the record holds.
			t.Fatalf("a chunk record sized %d, EstimateSize gives %d", r.Size, pipeline.EstimateSize(&r))
		}
		if !r.Op.IsData() || r.Version.Less(s.barrier) {
			continue
		}
		if r.Op == pipeline.OpTruncate {
			s.barrier = r.Version
			for k, v := range s.vers {
				if v.Less(r.Version) {
					delete(s.rows, k)
					s.vers[k] = r.Version
				}
			}
			continue
		}
		s.writes++
		if r.Before != nil && r.After != nil && r.Before[0] != r.After[0] {
			s.set(r.Before[0].(int64), r.Version, nil)
		}
		if r.After != nil {
			k := r.After[0].(int64)
			v, ok := r.After[1].(string)
			if !ok { // unchanged: keep what the sink holds
				if v, ok = s.rows[k]; !ok {
					v = "<no value to keep>"
				}
			}
			s.set(k, r.Version, &v)
		} else {
			s.set(r.Before[0].(int64), r.Version, nil)
		}
	}
}

func (s *fakeSink) set(k int64, v pipeline.Version, val *string) {
	if old, ok := s.vers[k]; ok && !old.Less(v) {
		return
	}
	s.vers[k] = v
	if val == nil {
		delete(s.rows, k)
	} else {
		s.rows[k] = *val
	}
}

func (s *fakeSink) diff(db *fakeDB) []string {
	db.mu.Lock()
	defer db.mu.Unlock()
	var out []string
	for k, v := range db.rows {
		if got, ok := s.rows[k]; !ok || got != v {
			out = append(out, "key "+strconv.FormatInt(k, 10)+": source "+strconv.Quote(v)+", sink "+strconv.Quote(got))
		}
	}
	for k, v := range s.rows {
		if _, ok := db.rows[k]; !ok {
			out = append(out, "key "+strconv.FormatInt(k, 10)+": not in the source, sink "+strconv.Quote(v))
		}
	}
	sort.Strings(out)
	return out
}

var errStop = errors.New("stop")

// rewrite changes every row's value behind the stream's back, as a
// table rewrite does, and logs only an OpRewrite of the table in its
// transaction; it returns that batch's position.
func (db *fakeDB) rewrite(value string) pipeline.Position {
	db.mu.Lock()
	defer db.mu.Unlock()
	db.lsn++
	db.xid++
	for k := range db.rows {
		db.rows[k] = value
	}
	pos, _ := json.Marshal(db.lsn)
	rec := pipeline.Record{Op: pipeline.OpRewrite, Table: &pipeline.Table{ID: db.table.ID},
		Version: pipeline.Version{0, db.lsn, 0, 2}, TxID: db.xid, Pos: pos}
	db.log <- pipeline.Batch{Records: []pipeline.Record{rec}, Pos: pos}
	return pos
}
