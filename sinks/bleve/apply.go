package bleve

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"sort"
	"time"

	"github.com/blevesearch/bleve/v2"
	"github.com/blevesearch/bleve/v2/document"
	"github.com/blevesearch/bleve/v2/search/query"
	index "github.com/blevesearch/bleve_index_api"
	"go.uber.org/zap"

	"github.com/sluice-cdc/sluice/internal/jsontext"
	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/sinks/upsert"
)

// stager is the sink's upsert.Converter: values stay record-model values,
// checked by encoding them once (so that building the documents cannot
// fail), and keys of the record model's own types fold by their key text.
type stager struct{ buf *[]byte }

func (s stager) Stage(c *pipeline.Column, v any) (any, error) {
	if v == nil {
		return nil, nil
	}
	b, err := appendValue((*s.buf)[:0], c.Type, c.Elem, v)
	*s.buf = b
	if err != nil {
		return nil, fmt.Errorf("column %s: %w", c.Name, err)
	}
	return v, nil
}

func (stager) Invalid(msg string) error { return valueErr("%s", msg) }

// AppendKey encodes keys of the record model's struct types by their key
// text (tag 7, unused by package upsert), so that two keys fold together
// exactly when their document ids are equal.
func (stager) AppendKey(b []byte, x any) ([]byte, bool) {
	t, ok := valueKeyType(x)
	if !ok {
		return b, false
	}
	k, err := keyText(t, 0, x)
	if err != nil {
		return b, false
	}
	b = binary.AppendUvarint(append(b, 7), uint64(len(k)))
	return append(b, k...), true
}

// Write applies records and returns once everything it applied is durable
// on disk: each bleve batch it runs returns only after scorch has written
// and synced the new segment and committed its root (see doc.go), and the
// index directory is synced after the last one. It blocks while another
// Write runs. Records the index cannot store fail permanently and are
// reported in a *pipeline.BatchError; the others are applied. A table
// shape the index cannot take (a column whose type changed) fails the
// whole Write, before anything is applied, with a *pipeline.TableError of
// that table, so the runtime quarantines it and writes the rest again. On
// any other error (or when ctx is cancelled, then ctx.Err()) nothing of
// the batch may be taken as durable, and a retry of the whole batch is
// harmless (Invariant 4).
func (s *Sink) Write(ctx context.Context, records []pipeline.Record) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.idx == nil && !s.broken {
		return ErrClosed
	}
	if s.broken {
		if err := s.reopenLocked(); err != nil {
			return fmt.Errorf("bleve sink: reopen after a failed write: %w", err)
		}
	}
	if err := s.checkShapes(records); err != nil {
		return err
	}
	now := s.now()
	// Invariant 6: a plan holds every document of its records, analysed,
	// several times their size; parts of at most writePart records keep
	// that bounded. Parts applied in order give what the records in order
	// give, each durable before the next starts.
	var failed []pipeline.RecordError
	for lo := 0; lo < len(records); lo += writePart {
		part := records[lo:min(lo+writePart, len(records))]
		bad, err := s.writePart(ctx, part, now)
		if err != nil {
			if cerr := ctx.Err(); cerr != nil {
				return cerr
			}
			return fmt.Errorf("bleve sink: %w", err)
		}
		for _, f := range bad {
			f.Index += lo
			failed = append(failed, f)
		}
	}
	s.purge(ctx, now)
	if len(failed) > 0 {
		// Invariant 7: the runtime dead-letters these; the rest is durable.
		return &pipeline.BatchError{Failed: failed}
	}
	return nil
}

// writePart is the most records one plan holds.
const writePart = 1000

// writePart applies one part of a Write and returns its records that
// failed permanently, indexed into part.
func (s *Sink) writePart(ctx context.Context, part []pipeline.Record, now time.Time) ([]pipeline.RecordError, error) {
	tbs, failed := upsert.Prepare(part, stager{new([]byte)}, tablePrefix)
	sort.Slice(failed, func(a, b int) bool { return failed[a].Index < failed[b].Index })
	// The runtime logs and counts each failed record as it dead-letters
	// it (Invariant 9).
	if len(tbs) > 0 {
		if err := s.fillMissing(ctx, tbs); err != nil {
			return nil, err
		}
		p, err := s.plan(ctx, tbs, snapshotTables(part), now, part)
		if err == nil {
			err = s.apply(ctx, p)
		}
		if err != nil {
			return nil, err
		}
	}
	return failed, nil
}

// checkShapes returns the *pipeline.TableError of the first table of
// records with a column whose type differs from the one the index holds
// for it, or from the one an earlier shape of the table in records gives
// it: stored values are not migrated, so no record of the table can be
// written until the index is rebuilt. Nil when every shape fits.
func (s *Sink) checkShapes(records []pipeline.Record) error {
	type colType struct{ typ, elem pipeline.Type }
	seen := map[*pipeline.Table]bool{}
	known := map[string]map[string]colType{} // by table prefix, column name
	for i := range records {
		t := records[i].Table
		if t == nil || !records[i].Op.Shaped() || seen[t] {
			continue
		}
		seen[t] = true
		prefix := tablePrefix(t.ID)
		cols := known[prefix]
		if cols == nil {
			cols = map[string]colType{}
			if ts := s.state.Tables[prefix]; ts != nil {
				for _, c := range ts.Columns {
					cols[c.Name] = colType{c.Type, c.Elem}
				}
			}
			known[prefix] = cols
		}
		for _, c := range t.Columns {
			was, ok := cols[c.Name]
			if !ok {
				cols[c.Name] = colType{c.Type, c.Elem}
				continue
			}
			if was.typ != c.Type || was.elem != c.Elem {
				return &pipeline.TableError{Table: t.ID, Err: fmt.Errorf("bleve: column %s changed type from %s to %s; "+
					"the index does not migrate stored values: rebuild it (a new path, then a re-snapshot)",
					c.Name, typeText(was.typ, was.elem), typeText(c.Type, c.Elem))}
			}
		}
	}
	return nil
}

func typeText(t, elem pipeline.Type) string {
	if t == pipeline.TypeArray {
		return elem.String() + "[]"
	}
	return t.String()
}

// snapshotTables returns the tables (by prefix) with snapshot records.
func snapshotTables(records []pipeline.Record) map[string]bool {
	var out map[string]bool
	for _, t := range upsert.SnapshotTables(records) {
		if out == nil {
			out = map[string]bool{}
		}
		out[tablePrefix(t.ID)] = true
	}
	return out
}

// plan is what one Write applies: the new sink state (nil when unchanged),
// the documents a truncate removes, and the documents to index.
type plan struct {
	state    *sinkState
	stateRaw []byte
	deletes  []string
	docs     []*document.Document
	sizes    []int
}

// plan looks up the stored versions of the folded rows and builds their
// documents; rows not newer than what the index holds are dropped.
func (s *Sink) plan(ctx context.Context, tbs []*upsert.TableBatch, snaps map[string]bool, now time.Time, recs []pipeline.Record) (*plan, error) {
	adv, err := s.idx.Advanced()
	if err != nil {
		return nil, err
	}
	r, err := adv.Reader()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	p := &plan{}
	next := &sinkState{Tables: maps.Clone(s.state.Tables), Generation: s.state.Generation}
	// Invariant 10: the generation is stored in the first bleve batch,
	// with (so no later than) the first rows of it.
	if g, ok := s.state.generation().Raise(recs); ok {
		next.Generation, p.state = &g, next
	}
	edit := func(prefix string, id pipeline.TableID) *tableState {
		t := next.Tables[prefix]
		if t != nil && t != s.state.Tables[prefix] {
			return t // already copied
		}
		if t == nil {
			t = &tableState{ID: id.String(), byName: map[string]int{}}
		} else {
			t = t.clone()
		}
		next.Tables[prefix] = t
		p.state = next
		return t
	}
	nowMs := now.UnixMilli()
	for _, tb := range tbs {
		prefix := tb.Target
		ts := next.Tables[prefix]
		for j := range tb.Cols {
			if ts == nil || !hasColumn(ts, tb.Cols[j].Name) {
				ts = edit(prefix, tb.ID)
				c := &tb.Cols[j]
				ts.byName[c.Name] = len(ts.Columns)
				ts.Columns = append(ts.Columns, colState{Name: c.Name, Type: c.Type, Elem: c.Elem,
					TypeName: c.Type.String(), ElemName: elemName(c)})
			}
		}
		if ts == nil {
			ts = edit(prefix, tb.ID)
		}
		raised := false
		// Invariant 4: truncate is a versioned barrier. The documents below
		// it are removed in the same durable step that stores it; records
		// below it change nothing from then on.
		if tb.Truncate != nil && (ts.barrier == nil || ts.barrier.Less(*tb.Truncate)) {
			ts = edit(prefix, tb.ID)
			v := *tb.Truncate
			ts.barrier, ts.Barrier, raised = &v, v.String(), true
			ids, err := s.idsBelow(ctx, ts.ID, v)
			if err != nil {
				return nil, fmt.Errorf("table %s: truncate: %w", tb.ID, err)
			}
			p.deletes = append(p.deletes, ids...)
			s.log.Info("truncate barrier", zap.String("table", ts.ID), zap.String("version", v.String()),
				zap.Int("rows", len(ids)))
		}
		if snaps[prefix] {
			ts = edit(prefix, tb.ID)
			ts.SnapshotAt = nowMs
		}
		if err := s.planRows(ctx, r, p, ts, tb, raised, nowMs); err != nil {
			return nil, fmt.Errorf("table %s: %w", tb.ID, err)
		}
	}
	if p.state != nil {
		if p.stateRaw, err = json.Marshal(p.state); err != nil {
			return nil, err
		}
	}
	return p, nil
}

func hasColumn(ts *tableState, name string) bool {
	_, ok := ts.byName[name]
	return ok
}

func elemName(c *pipeline.Column) string {
	if c.Type == pipeline.TypeArray {
		return c.Elem.String()
	}
	return ""
}

func (s *Sink) planRows(ctx context.Context, r index.IndexReader, p *plan, ts *tableState, tb *upsert.TableBatch,
	raised bool, nowMs int64) error {
	barrier := ts.barrier
	// pos maps the table's columns to the batch's (-1: not in the batch).
	pos := make([]int, len(ts.Columns))
	for k := range pos {
		pos[k] = -1
	}
	for j := range tb.Cols {
		pos[ts.byName[tb.Cols[j].Name]] = j
	}
	var keyBuf, rowBuf, idBuf []byte
	for i := range tb.Rows {
		row := &tb.Rows[i]
		if barrier != nil && row.Version.Less(*barrier) {
			continue // below the truncate barrier (Invariant 4)
		}
		if i%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		idBuf = append(idBuf[:0], tb.Target...)
		keyBuf = append(keyBuf[:0], '[')
		for n, j := range tb.Keys {
			c := &tb.Cols[j]
			var err error
			if idBuf, err = appendIDPart(idBuf, c, row.Vals[j]); err != nil {
				return fmt.Errorf("key column %s: %w", c.Name, err)
			}
			if n > 0 {
				keyBuf = append(keyBuf, ',')
			}
			if keyBuf, err = appendValue(keyBuf, c.Type, c.Elem, row.Vals[j]); err != nil {
				return fmt.Errorf("key column %s: %w", c.Name, err)
			}
		}
		keyBuf = append(keyBuf, ']')
		id := string(idBuf)
		var st *stored
		doc, err := r.Document(id)
		if err != nil {
			return fmt.Errorf("look up %s: %w", id, err)
		}
		if doc != nil {
			if st, err = readStored(doc); err != nil {
				return fmt.Errorf("document %s: %w", id, err)
			}
			if raised && st.version.Less(*barrier) {
				st = nil // removed by this Write's truncate
			}
		}
		// Invariant 4: a change not newer than the stored row (live or
		// tombstone) changes nothing: replays are idempotent and a late
		// snapshot row cannot resurrect a deleted one.
		if st != nil && !st.version.Less(row.Version) {
			continue
		}
		d := document.NewDocument(id)
		var text []string
		if rowBuf, text, err = s.buildRow(d, rowBuf[:0], ts, tb, pos, row, st, barrier); err != nil {
			return fmt.Errorf("document %s: %w", id, err)
		}
		addInternal(d, ts.ID, row.Version, row.Deleted, nowMs, append([]byte(nil), keyBuf...), append([]byte(nil), rowBuf...), text)
		p.docs = append(p.docs, d)
		p.sizes = append(p.sizes, 3*len(rowBuf)+len(id)+256)
	}
	return nil
}

// buildRow appends the row's JSON object to b and adds the column fields
// to d (none for a tombstone); it returns the fields indexed as text.
// Columns the change keeps (Unchanged values,
// columns its shape lacks, a delete's non-key columns) take the newest of
// the batch's fallback and the stored value; columns of the table the
// batch does not know keep the stored value.
func (s *Sink) buildRow(d *document.Document, b []byte, ts *tableState, tb *upsert.TableBatch, pos []int,
	row *upsert.Row, st *stored, barrier *pipeline.Version) ([]byte, []string, error) {
	var old map[string]json.RawMessage
	if st != nil && len(st.row) > 0 && (row.Kept != nil || len(ts.Columns) > len(tb.Cols)) {
		if err := json.Unmarshal(st.row, &old); err != nil {
			return b, nil, fmt.Errorf("stored row: %w", err)
		}
	}
	var text []string
	b = append(b, '{')
	for k := range ts.Columns {
		c := &ts.Columns[k]
		if k > 0 {
			b = append(b, ',')
		}
		b = append(jsontext.AppendString(b, c.Name), ':')
		j := pos[k]
		var v any
		var raw json.RawMessage
		switch {
		case j >= 0 && (row.Kept == nil || !row.Kept.Keep[j]):
			v = row.Vals[j]
		case j >= 0 && row.Kept.HasFb[j] && (barrier == nil || !row.Kept.Fbv[j].Less(*barrier)) &&
			(st == nil || st.version.Less(row.Kept.Fbv[j])):
			v = row.Kept.Fb[j]
		default:
			raw = old[c.Name]
		}
		if raw != nil {
			b = append(b, raw...)
			if row.Deleted {
				continue
			}
			var err error
			if v, err = decodeValue(c.Type, c.Elem, raw); err != nil {
				return b, nil, fmt.Errorf("stored column %s: %w", c.Name, err)
			}
		} else {
			var err error
			if b, err = appendValue(b, c.Type, c.Elem, v); err != nil {
				return b, nil, fmt.Errorf("column %s: %w", c.Name, err)
			}
		}
		if !row.Deleted {
			if f := fieldName(c.Name); indexValue(d, f, c.Type, c.Elem, v, nil, s.text) {
				text = append(text, f)
			}
		}
	}
	return append(b, '}'), text, nil
}

// apply runs the plan as bleve batches of at most BatchMaxBytes (the
// state and the truncates' removals in the first), each durable before
// the next starts, then syncs the index directory.
func (s *Sink) apply(ctx context.Context, p *plan) error {
	b := s.idx.NewBatch()
	size, first := 0, true
	if p.stateRaw != nil {
		b.SetInternal(stateKey, p.stateRaw)
	}
	for _, id := range p.deletes {
		b.Delete(id)
		size += len(id) + 64
	}
	store := filepath.Join(s.opts.Path, "store")
	flush := func() error {
		if err := s.idx.Batch(b); err != nil {
			s.broken = true
			return err
		}
		// The new segment file's directory entry is durable too: each
		// batch of a split Write is on disk before the next starts.
		if err := syncDir(store); err != nil {
			s.broken = true
			return err
		}
		if first && p.state != nil {
			s.state = p.state
		}
		first = false
		b, size = s.idx.NewBatch(), 0
		return ctx.Err()
	}
	for i, d := range p.docs {
		if b.Size() > 0 && size+p.sizes[i] > s.opts.BatchMaxBytes {
			if err := flush(); err != nil {
				return err
			}
		}
		if err := b.IndexAdvanced(d); err != nil {
			return err
		}
		size += p.sizes[i]
	}
	if b.Size() > 0 {
		if err := flush(); err != nil {
			return err
		}
	}
	return nil
}

// idsBelow returns the ids of the table's documents (rows and tombstones)
// whose version is below v. Versions are stored, not indexed (a unique
// term per row would slow every write down), so it reads them: truncates
// are rare.
func (s *Sink) idsBelow(ctx context.Context, table string, v pipeline.Version) ([]string, error) {
	var ids []string
	err := eachDoc(ctx, s.idx, tableQuery(table), []string{fieldVersion}, func(id string, fields map[string]any) error {
		text, _ := fields[fieldVersion].(string)
		dv, err := pipeline.ParseVersion(text)
		if err != nil {
			return fmt.Errorf("document %s: %w", id, err)
		}
		if dv.Less(v) {
			ids = append(ids, id)
		}
		return nil
	})
	return ids, err
}

// tableQuery matches the documents of one table ("schema.table"): the
// one term of their _table field. (Invariant 6: a prefix query on the ids expands to a
// searcher per document: excluding a 900,000-row table from the purge
// that way held 7.7 GiB.)
func tableQuery(table string) query.Query {
	q := query.NewTermQuery(table)
	q.SetField(fieldTable)
	return q
}

const pageSize = 10_000

// eachDoc calls fn with the id and the requested stored fields of every
// document q matches, paging in id order.
func eachDoc(ctx context.Context, idx bleve.Index, q query.Query, fields []string, fn func(id string, fields map[string]any) error) error {
	var after []string
	for {
		req := bleve.NewSearchRequestOptions(q, pageSize, 0, false)
		req.SortBy([]string{fieldID})
		req.Score = "none"
		req.SearchAfter = after
		req.Fields = fields
		res, err := idx.SearchInContext(ctx, req)
		if err != nil {
			return err
		}
		for _, h := range res.Hits {
			if err := fn(h.ID, h.Fields); err != nil {
				return err
			}
		}
		if len(res.Hits) < pageSize {
			return nil
		}
		after = []string{res.Hits[len(res.Hits)-1].ID}
	}
}

// purge removes expired tombstones, at most once per min(TombstoneTTL,
// 10m): those written before now - TombstoneTTL of tables without a
// snapshot record since then (Invariant 4: a tombstone must outlive the
// snapshot rows it guards against). It runs after the batch is durable,
// in batches of its own; a failure is logged and retried at the next run.
func (s *Sink) purge(ctx context.Context, now time.Time) {
	cutoff, ok := s.purger.Due(now)
	if !ok {
		return
	}
	ms := float64(cutoff.UnixMilli())
	old := query.NewNumericRangeQuery(nil, &ms)
	old.SetField(fieldAt)
	q := query.NewBooleanQuery([]query.Query{deadQuery(), old}, nil, nil)
	for _, t := range s.state.Tables {
		if t.SnapshotAt >= cutoff.UnixMilli() {
			q.AddMustNot(tableQuery(t.ID))
		}
	}
	var ids []string
	err := eachDoc(ctx, s.idx, q, nil, func(id string, _ map[string]any) error {
		ids = append(ids, id)
		return nil
	})
	for len(ids) > 0 && err == nil {
		n := min(len(ids), pageSize)
		b := s.idx.NewBatch()
		for _, id := range ids[:n] {
			b.Delete(id)
		}
		if err = s.idx.Batch(b); err != nil {
			s.broken = true
			break
		}
		s.log.Info("tombstones purged", zap.Int("rows", n))
		ids = ids[n:]
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		s.log.Warn("tombstone purge failed", zap.Error(err))
	}
}
