package search

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluice-cdc/sluice/internal/jsontext"
	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/sinks/upsert"
)

// op is one document write of a Write: the newest change of one key.
type op struct {
	st  *indexState
	tb  *upsert.TableBatch
	row *upsert.Row
	id  string
	ext int64
	// read: the stored document is read and its version compared exactly
	// first (exact path or kept columns); the write then uses
	// version_type external_gte, else external.
	read bool
	skip bool // the stored document is not older: nothing to write
	// stored is the stored document's source when read and live.
	stored map[string]json.RawMessage
	// storedVer is the stored version when read and present (above the
	// barrier); hasStored says whether there was one.
	storedVer pipeline.Version
	hasStored bool
	// absent are columns of a newer shape than the batch's (live rows).
	absent []absentCol
}

// absentCol is a column that a newer shape of the table has and the
// batch's shapes lack: its records predate the column, so a document
// takes the column's missing value when it has one, else keeps the
// stored value.
type absentCol struct {
	name    string
	missing any // staged pipeline.Column.Missing
	has     bool
}

// bulkWorkers is the number of bulk requests in flight per Write.
const bulkWorkers = 2

// Write applies the records and returns once every document write was
// answered by the engine, which acknowledges a write only after its
// translog is fsynced (index.translog.durability=request, which the sink
// sets on the indices it creates): nil means durable. Truncates run
// first; then the newest change per key is written with the external
// version (see the package documentation). A document the engine refuses
// fails the batch's records of that key permanently (a *BatchError, so
// the runtime dead-letters them with the engine's reason); a table whose
// index refuses it for good (refusal.go) fails the Write with a
// *pipeline.TableError of that table; a transient refusal (429, 5xx, a
// missing index) or a lost connection fails the whole batch, which the
// runtime retries.
func (s *Sink) Write(ctx context.Context, records []pipeline.Record) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.eng == nil {
		return errNotOpen
	}
	if err := s.recordGeneration(ctx, records); err != nil {
		return s.writeErr(ctx, err)
	}
	batches, failed := upsert.Prepare(records, conv{}, s.target)
	w := &writeState{s: s, records: records, failed: map[int]bool{}}
	for _, f := range failed {
		w.fail(f.Index, f.Err)
	}
	// Every version must be packable before anything is written.
	for _, tb := range batches {
		if tb.Truncate != nil {
			if _, _, err := external(*tb.Truncate); err != nil {
				return pipeline.Fatal(fmt.Errorf("search sink %s: %w", s.opts.Name, err))
			}
		}
		for i := range tb.Rows {
			if _, _, err := external(tb.Rows[i].Version); err != nil {
				return pipeline.Fatal(fmt.Errorf("search sink %s: %w", s.opts.Name, err))
			}
		}
	}
	var ops []*op
	for _, tb := range batches {
		st, err := s.indexFor(ctx, tb)
		if err == nil && tb.Truncate != nil && (!st.hasBarrier || !tb.Truncate.Less(st.barrier)) {
			err = s.truncate(ctx, st, *tb.Truncate)
		}
		if err != nil {
			return s.writeErr(ctx, s.tableFailure(ctx, tb.ID, tb.Target, err))
		}
		ops = append(ops, s.plan(tb, st)...)
	}
	if err := s.readStored(ctx, ops); err != nil {
		return s.writeErr(ctx, err)
	}
	if err := s.send(ctx, ops, w); err != nil {
		return s.writeErr(ctx, err)
	}
	if err := s.markSnapshots(ctx, records, batches); err != nil {
		return s.writeErr(ctx, err)
	}
	s.purge(ctx)
	return w.result()
}

func (s *Sink) writeErr(ctx context.Context, err error) error {
	if pipeline.IsFatal(err) {
		return err
	}
	return s.ctxErr(ctx, fmt.Errorf("search sink %s: %w", s.opts.Name, err))
}

// writeState collects a Write's permanent per-record failures.
type writeState struct {
	s       *Sink
	records []pipeline.Record
	failed  map[int]bool
	errs    []pipeline.RecordError
	// byDoc lists the data records of each document, built by the first
	// failKey so that failing many keys stays linear in the batch.
	byDoc map[docRef][]int
}

// docRef names a document: its table and id.
type docRef struct {
	table pipeline.TableID
	id    string
}

// fail fails record i permanently; the runtime logs and counts it as it
// dead-letters it (Invariant 9).
func (w *writeState) fail(i int, err error) {
	if w.failed[i] {
		return
	}
	w.failed[i] = true
	w.errs = append(w.errs, pipeline.RecordError{Index: i, Err: err, Permanent: true})
}

// failKey fails the batch's records of one document: the newest change
// and the older ones folded into it (none of them is applied).
func (w *writeState) failKey(o *op, err error) {
	if w.byDoc == nil {
		w.byDoc = map[docRef][]int{}
		for i := range w.records {
			r := &w.records[i]
			if r.Table == nil || r.Op == pipeline.OpTruncate || !r.Op.IsData() {
				continue
			}
			if id, ok := recordID(r); ok {
				ref := docRef{r.Table.ID, id}
				w.byDoc[ref] = append(w.byDoc[ref], i)
			}
		}
	}
	for _, i := range w.byDoc[docRef{o.tb.ID, o.id}] {
		w.fail(i, err)
	}
}

func (w *writeState) result() error {
	if len(w.errs) == 0 {
		return nil
	}
	sort.Slice(w.errs, func(a, b int) bool { return w.errs[a].Index < w.errs[b].Index })
	return &pipeline.BatchError{Failed: w.errs}
}

// recordID is the document id of a record's key.
func recordID(r *pipeline.Record) (string, bool) {
	img := r.After
	if r.Op == pipeline.OpDelete || img == nil {
		img = r.Before
	}
	key := make([]any, len(r.Table.KeyIdx))
	for k, idx := range r.Table.KeyIdx {
		if idx >= len(img) {
			return "", false
		}
		key[k] = img[idx]
	}
	return keyID(r.Table, key)
}

// keyID is the document id of a row of t with the key values key (in
// t.KeyIdx order), staged as Write stages them; false when a value cannot
// be staged (no document has that key).
func keyID(t *pipeline.Table, key []any) (string, bool) {
	keys := make([]int, len(key))
	vals := make([]any, len(key))
	for k, idx := range t.KeyIdx {
		v, err := conv{}.Stage(&t.Columns[idx], key[k])
		if err != nil {
			return "", false
		}
		keys[k], vals[k] = k, v
	}
	return docID(keys, vals), true
}

// plan turns a table batch's rows into document writes, dropping those
// below the barrier (Invariant 4) and the fallbacks below it.
func (s *Sink) plan(tb *upsert.TableBatch, st *indexState) []*op {
	ops := make([]*op, 0, len(tb.Rows))
	absent := st.absentFrom(tb)
	carry := false
	for _, a := range absent {
		carry = carry || !a.has
	}
	for i := range tb.Rows {
		row := &tb.Rows[i]
		if st.hasBarrier && row.Version.Less(st.barrier) {
			continue // Invariant 4: below the truncate barrier
		}
		if k := row.Kept; k != nil && st.hasBarrier {
			for j := range k.HasFb {
				if k.HasFb[j] && k.Fbv[j].Less(st.barrier) {
					k.HasFb[j], k.Fb[j] = false, nil
				}
			}
		}
		ext, saturated, _ := external(row.Version) // checked by Write
		o := &op{st: st, tb: tb, row: row, id: docID(tb.Keys, row.Vals), ext: ext}
		o.read = saturated || (row.Kept != nil && !row.Deleted)
		if !row.Deleted && len(absent) > 0 {
			o.absent = absent
			o.read = o.read || carry
		}
		ops = append(ops, o)
	}
	return ops
}

// readStored reads the stored documents of the ops that need them (a
// realtime multi-get) and decides: skip when the stored version is not
// older (exact comparison of the full pipeline.Version).
func (s *Sink) readStored(ctx context.Context, ops []*op) error {
	var need []*op
	for _, o := range ops {
		if o.read {
			need = append(need, o)
		}
	}
	const chunk = 1000
	for start := 0; start < len(need); start += chunk {
		part := need[start:min(start+chunk, len(need))]
		body := []byte(`{"docs":[`)
		for i, o := range part {
			if i > 0 {
				body = append(body, ',')
			}
			body = jsontext.AppendString(append(body, `{"_index":`...), o.st.name)
			body = append(jsontext.AppendString(append(body, `,"_id":`...), o.id), '}')
		}
		body = append(body, "]}"...)
		_, resp, err := s.call(ctx, "read stored documents", http.MethodPost, "/_mget", nil, body)
		if err != nil {
			return err
		}
		var r struct {
			Docs []struct {
				Found  bool                       `json:"found"`
				Source map[string]json.RawMessage `json:"_source"`
				Error  *engineError               `json:"error"`
			} `json:"docs"`
		}
		if err := json.Unmarshal(resp, &r); err != nil {
			return fmt.Errorf("read stored documents: %w", err)
		}
		if len(r.Docs) != len(part) {
			return fmt.Errorf("read stored documents: %d answers for %d documents", len(r.Docs), len(part))
		}
		for i, d := range r.Docs {
			if d.Error != nil && d.Error.Type == "index_closed_exception" {
				return &pipeline.TableError{Table: part[i].tb.ID, Err: closedError(part[i].st.name, d.Error.String())}
			}
			if d.Error != nil {
				return fmt.Errorf("read stored document %s/%s: %s", part[i].st.name, part[i].id, d.Error)
			}
			if d.Found {
				part[i].judge(d.Source)
			}
		}
	}
	return nil
}

// judge compares a stored document with the op's row.
func (o *op) judge(src map[string]json.RawMessage) {
	var hex string
	if json.Unmarshal(src[fieldVersion], &hex) != nil {
		return // not a document of this sink: overwritten
	}
	v, err := pipeline.ParseVersion(hex)
	if err != nil || (o.st.hasBarrier && v.Less(o.st.barrier)) {
		return // below the barrier: as absent
	}
	if !v.Less(o.row.Version) {
		o.skip = true // Invariant 4: not newer than what is stored
		return
	}
	o.storedVer, o.hasStored = v, true
	if string(src[fieldDeleted]) != "true" {
		o.stored = src
	}
}

// chunkReq is one bulk request: its body and its ops in order.
type chunkReq struct {
	body []byte
	ops  []*op
}

// send writes the ops as bulk requests of at most BulkMaxBytes,
// bulkWorkers at a time, and sorts the answers.
func (s *Sink) send(ctx context.Context, ops []*op, w *writeState) error {
	at := formatTime(s.now())
	var chunks []*chunkReq
	cur := &chunkReq{}
	for _, o := range ops {
		if o.skip {
			continue
		}
		n := len(cur.body)
		cur.body = s.appendOp(cur.body, o, at)
		if len(cur.body) > s.opts.BulkMaxBytes && len(cur.ops) > 0 {
			next := &chunkReq{body: append([]byte(nil), cur.body[n:]...)}
			cur.body = cur.body[:n]
			chunks = append(chunks, cur)
			cur = next
		}
		cur.ops = append(cur.ops, o)
	}
	if len(cur.ops) > 0 {
		chunks = append(chunks, cur)
	}
	results := make([]chunkResult, len(chunks))
	var wg sync.WaitGroup
	next := make(chan int)
	for range min(bulkWorkers, len(chunks)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				results[i] = s.sendChunk(ctx, chunks[i])
			}
		}()
	}
	for i := range chunks {
		next <- i
	}
	close(next)
	wg.Wait()
	var transient error
	for _, r := range results {
		for _, name := range r.missing {
			delete(s.indices, name) // recreated by the retry
		}
	}
	for _, r := range results {
		if len(r.table) > 0 {
			// The table's refusal first: the retry without its records
			// meets whatever else failed again.
			return tableItemError(r.table[0].o, r.table[0].e)
		}
	}
	for _, r := range results {
		if r.err != nil {
			return r.err
		}
		if transient == nil {
			transient = r.transient
		}
	}
	if transient != nil {
		return transient
	}
	for _, r := range results {
		for _, f := range r.permanent {
			w.failKey(f.o, f.err)
		}
	}
	return nil
}

type opError struct {
	o   *op
	err error
}

// itemError is a bulk item's failure in the engine's words.
type itemError struct {
	o *op
	e *engineError
}

type chunkResult struct {
	err       error // the request failed
	transient error // some items failed transiently
	permanent []opError
	table     []itemError // items whose index refuses every document
	missing   []string    // indices the engine no longer has
}

func (s *Sink) sendChunk(ctx context.Context, c *chunkReq) chunkResult {
	rctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	status, body, err := s.eng.bulk(rctx, c.body, s.opts.Refresh)
	if err != nil {
		return chunkResult{err: fmt.Errorf("bulk: %w", err)}
	}
	switch status {
	case http.StatusOK:
	case http.StatusRequestEntityTooLarge:
		// The runtime writes the records again in smaller pieces.
		return chunkResult{err: pipeline.TooLarge(replyError("bulk", status, body))}
	case http.StatusTooManyRequests:
		return chunkResult{err: pipeline.Overloaded(replyError("bulk", status, body))}
	default:
		return chunkResult{err: replyError("bulk", status, body)}
	}
	if bytes.HasPrefix(body, []byte(`{"errors":false`)) {
		return chunkResult{}
	}
	var r struct {
		Errors bool `json:"errors"`
		Items  []map[string]struct {
			Status int          `json:"status"`
			Error  *engineError `json:"error"`
		} `json:"items"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return chunkResult{err: fmt.Errorf("bulk response: %w", err)}
	}
	if len(r.Items) != len(c.ops) {
		return chunkResult{err: fmt.Errorf("bulk response: %d items for %d documents", len(r.Items), len(c.ops))}
	}
	var res chunkResult
	for i, item := range r.Items {
		for _, it := range item {
			o := c.ops[i]
			if it.Status/100 == 2 || it.Status == http.StatusConflict {
				// A 409 is Invariant 4 at work: the stored document's
				// version is not lower; the stale write changes nothing.
				continue
			}
			switch class := classifyItem(it.Status, it.Error); class {
			case itemTable:
				res.table = append(res.table, itemError{o, it.Error})
			case itemPermanent:
				// Invariant 7: a record the engine refuses for what it
				// holds (a value the mapping rejects).
				msg := "status " + strconv.Itoa(it.Status)
				if it.Error != nil {
					msg = it.Error.String()
				}
				res.permanent = append(res.permanent, opError{o, fmt.Errorf("%s rejected document %s/%s: %s",
					s.opts.Kind, o.st.name, o.id, msg)})
			default:
				if class == itemMissing {
					res.missing = append(res.missing, o.st.name)
				}
				if res.transient == nil {
					res.transient = fmt.Errorf("bulk: document %s/%s: status %d: %s", o.st.name, o.id, it.Status, it.Error)
					if class == itemOverloaded {
						res.transient = pipeline.Overloaded(res.transient)
					}
				}
			}
		}
	}
	return res
}

// appendOp appends an op's action and document lines.
func (s *Sink) appendOp(b []byte, o *op, at string) []byte {
	b = jsontext.AppendString(append(b, `{"index":{"_index":`...), o.st.name)
	b = jsontext.AppendString(append(b, `,"_id":`...), o.id)
	b = strconv.AppendInt(append(b, `,"version":`...), o.ext, 10)
	if o.read {
		b = append(b, `,"version_type":"external_gte"}}`...)
	} else {
		b = append(b, `,"version_type":"external"}}`...)
	}
	b = append(b, "\n{"...)
	row, tb := o.row, o.tb
	for j := range tb.Cols {
		if row.Deleted && !tb.IsKey[j] {
			// Invariant 4: a delete leaves a versioned tombstone (the
			// key and the sink's fields) that outranks older records.
			continue
		}
		b = append(jsontext.AppendString(b, tb.Cols[j].Name), ':')
		if row.Kept == nil || !row.Kept.Keep[j] {
			b = append(appendValue(b, row.Vals[j]), ',')
			continue
		}
		b = append(appendValue(b, o.kept(j)), ',')
	}
	for _, a := range o.absent {
		b = append(jsontext.AppendString(b, a.name), ':')
		switch raw, ok := o.stored[a.name]; {
		case a.has:
			b = appendValue(b, a.missing)
		case ok:
			b = append(b, raw...)
		default:
			b = append(b, "null"...)
		}
		b = append(b, ',')
	}
	b = jsontext.AppendString(append(b, `"`+fieldVersion+`":`...), row.Version.String())
	b = strconv.AppendBool(append(b, `,"`+fieldDeleted+`":`...), row.Deleted)
	b = jsontext.AppendString(append(b, `,"`+fieldAt+`":`...), at)
	return append(b, "}\n"...)
}

// absentFrom returns the columns of the newest shape of the table seen
// by this sink that tb's shapes lack, when tb is older than that shape;
// otherwise tb's columns become the newest.
func (st *indexState) absentFrom(tb *upsert.TableBatch) []absentCol {
	if tb.Newest.Generation >= st.gen {
		st.gen, st.genCols = tb.Newest.Generation, tb.Cols
		return nil
	}
	have := make(map[string]bool, len(tb.Cols))
	for i := range tb.Cols {
		have[strings.ToLower(tb.Cols[i].Name)] = true
	}
	var out []absentCol
	for i := range st.genCols {
		c := &st.genCols[i]
		if have[strings.ToLower(c.Name)] {
			continue
		}
		a := absentCol{name: c.Name}
		if c.Missing != nil {
			if x, err := (conv{}).Stage(c, c.Missing); err == nil {
				a.missing, a.has = x, true
			}
		}
		out = append(out, a)
	}
	return out
}

// kept resolves a column the row keeps: the newest value an older change
// of the batch wrote when it is newer than the stored document, else the
// stored value (NULL when nothing live is stored).
func (o *op) kept(j int) any {
	k := o.row.Kept
	if k.HasFb[j] && (!o.hasStored || o.storedVer.Less(k.Fbv[j])) {
		return k.Fb[j]
	}
	if o.stored != nil {
		if raw, ok := o.stored[o.tb.Cols[j].Name]; ok {
			return raw
		}
	}
	return nil
}

// markSnapshots records, per table with snapshot records in the batch,
// when the sink last wrote one (to the minute): tombstones are kept until
// the table's snapshot has been quiet for TombstoneTTL.
func (s *Sink) markSnapshots(ctx context.Context, records []pipeline.Record, batches []*upsert.TableBatch) error {
	var tables map[pipeline.TableID]bool
	for i := range records {
		if r := &records[i]; r.Snapshot && r.Table != nil {
			if tables == nil {
				tables = map[pipeline.TableID]bool{}
			}
			tables[r.Table.ID] = true
		}
	}
	now := s.now()
	for _, tb := range batches {
		st := s.indices[tb.Target]
		if !tables[tb.ID] || st == nil || now.Sub(st.snapshotAt) < time.Minute {
			continue
		}
		if err := s.updateState(ctx, st, append(jsontext.AppendString([]byte(`{"snapshot_at":`), formatTime(now)), '}')); err != nil {
			return err
		}
		st.snapshotAt = now
	}
	return nil
}
