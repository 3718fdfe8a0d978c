package bleve

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/blevesearch/bleve/v2"
	"github.com/blevesearch/bleve/v2/search/query"
	index "github.com/blevesearch/bleve_index_api"

	"github.com/sluice-cdc/sluice/pipeline"
)

// SearchRequest is one search over the index.
type SearchRequest struct {
	// Query is in bleve's query-string syntax: words search every indexed
	// column (the _all field), "name:alice" one column, "+a -b" require and
	// exclude, "qty:>5" and `seen:>="2024-01-01"` ranges, "\"two words\""
	// phrases. "" and "*" match every row.
	Query string `json:"query"`
	// Table, when set, restricts the search to one table ("schema.table").
	Table string `json:"table,omitempty"`
	// Size is the number of hits to return: 10 when zero or less, at most
	// MaxSize.
	Size int `json:"size,omitempty"`
	// From skips that many hits (paging); From+Size may not exceed
	// MaxWindow.
	From int `json:"from,omitempty"`
}

// Search limits.
const (
	DefaultSize = 10
	MaxSize     = 1000
	MaxWindow   = 10_000
	// DefaultLockWait bounds how long the package-level Search waits for
	// an index held by another process.
	DefaultLockWait = 2 * time.Second
)

// SearchResult is the answer to a SearchRequest.
type SearchResult struct {
	// Total is the number of live rows matching, of which Hits is the
	// requested window, best first.
	Total uint64      `json:"total"`
	Hits  []SearchHit `json:"hits"`
	// Took is the time the index took to answer.
	Took time.Duration `json:"took"`
}

// SearchHit is one matching live row.
type SearchHit struct {
	Table string  `json:"table"` // "schema.table"
	Key   []any   `json:"key"`   // the key values in key order, in the stored JSON forms
	Score float64 `json:"score"`
	// Row is the row's columns in their stored JSON forms (doc.go); numbers
	// are json.Number, so they keep every digit.
	Row map[string]any `json:"row"`
}

// ErrQuery wraps a query the query-string parser rejects (an HTTP handler
// answers it with 400).
var ErrQuery = errors.New("invalid search query")

// Search runs req against the open sink's index, concurrently with writes
// (it sees every Write that returned before it started). It blocks only
// for the search itself, honours ctx cancellation, and returns ErrClosed
// when the sink is not open. Tombstones are never returned.
func (s *Sink) Search(ctx context.Context, req SearchRequest) (SearchResult, error) {
	s.idxMu.RLock()
	defer s.idxMu.RUnlock()
	if s.idx == nil {
		return SearchResult{}, ErrClosed
	}
	return search(ctx, s.idx, req)
}

// Search opens the index in dir read-only, runs req and closes it: for
// `sluice search` when no sluice process holds the index. When another
// process holds it (a running sluice writing it), it returns an error
// wrapping ErrLocked after waiting at most DefaultLockWait (less when ctx
// has an earlier deadline); it never blocks longer than that plus the
// search. A directory without an index yields an error wrapping ErrNoIndex.
func Search(ctx context.Context, dir string, req SearchRequest) (SearchResult, error) {
	idx, err := openReadOnly(ctx, dir)
	if err != nil {
		return SearchResult{}, err
	}
	defer idx.Close()
	return search(ctx, idx, req)
}

func openReadOnly(ctx context.Context, dir string) (bleve.Index, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	wait := DefaultLockWait
	if dl, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(dl))
		if wait <= 0 {
			return nil, context.DeadlineExceeded
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "index_meta.json")); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%w at %s", ErrNoIndex, dir)
		}
		return nil, err
	}
	idx, err := bleve.OpenUsing(dir, map[string]any{"read_only": true, "bolt_timeout": wait.String()})
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", dir, lockedErr(err))
	}
	return idx, nil
}

func search(ctx context.Context, idx bleve.Index, req SearchRequest) (SearchResult, error) {
	size := req.Size
	if size <= 0 {
		size = DefaultSize
	}
	size = min(size, MaxSize)
	if req.From < 0 || req.From > MaxWindow-size { // not From+size: it can overflow
		return SearchResult{}, fmt.Errorf("%w: from %d + size %d exceeds %d", ErrQuery, req.From, size, MaxWindow)
	}
	user, err := userQuery(req.Query)
	if err != nil {
		return SearchResult{}, err
	}
	must := []query.Query{user}
	if req.Table != "" {
		t := query.NewTermQuery(req.Table)
		t.SetField(fieldTable)
		t.SetBoost(0)
		must = append(must, t)
	}
	// Tombstones carry _deleted:true (live rows carry no _deleted term).
	q := query.NewBooleanQuery(must, nil, []query.Query{deadQuery()})
	sr := bleve.NewSearchRequestOptions(q, size, req.From, false)
	sr.Fields = []string{fieldTable, fieldKey, fieldRow}
	res, err := idx.SearchInContext(ctx, sr)
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return SearchResult{}, cerr
		}
		return SearchResult{}, err
	}
	out := SearchResult{Total: res.Total, Took: res.Took, Hits: make([]SearchHit, 0, len(res.Hits))}
	for _, h := range res.Hits {
		hit := SearchHit{Score: h.Score}
		hit.Table, _ = h.Fields[fieldTable].(string)
		keyText, _ := h.Fields[fieldKey].(string)
		rowText, _ := h.Fields[fieldRow].(string)
		if err := decodeJSON(keyText, &hit.Key); err != nil {
			return SearchResult{}, fmt.Errorf("document %s: key: %w", h.ID, err)
		}
		if err := decodeJSON(rowText, &hit.Row); err != nil {
			return SearchResult{}, fmt.Errorf("document %s: row: %w", h.ID, err)
		}
		out.Hits = append(out.Hits, hit)
	}
	return out, nil
}

func userQuery(q string) (query.Query, error) {
	if s := strings.TrimSpace(q); s == "" || s == "*" {
		return query.NewMatchAllQuery(), nil
	}
	parsed, err := query.NewQueryStringQuery(q).Parse()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrQuery, err)
	}
	return parsed, nil
}

func decodeJSON(s string, v any) error {
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	return dec.Decode(v)
}

// Rows returns the live rows of a source table, ordered by document id,
// with values aligned with table.Columns in the record model's value types
// (columns the index never held read as nil): what Scan yields, collected.
// It is a verification helper: it holds the whole table.
func (s *Sink) Rows(ctx context.Context, table *pipeline.Table) ([][]any, error) {
	var out [][]any
	if err := s.Scan(ctx, table, func(row []any) error {
		out = append(out, row)
		return nil
	}); err != nil {
		return nil, err
	}
	return out, nil
}

// Scan implements verify.Scanner: it calls row for every live row of a
// source table (no tombstones; a truncate removes the rows below it),
// aligned with table.Columns as Rows aligns them, in document id order;
// row owns the slice it gets. It reads one snapshot of the index (every
// Write that returned before it started, nothing of a Write that started
// after): it walks the table's document ids in the snapshot's term
// dictionary and loads one document at a time, so memory does not grow
// with the table. It holds the index shared, as Search does: Writes and
// other reads run alongside it, Close (and the reopen after a failed
// Write) waits for it. It returns the first error of row and checks ctx
// before each document.
func (s *Sink) Scan(ctx context.Context, table *pipeline.Table, row func([]any) error) error {
	s.idxMu.RLock()
	defer s.idxMu.RUnlock()
	r, err := s.snapshot()
	if err != nil {
		return err
	}
	defer r.Close()
	ids, err := r.FieldDictPrefix(fieldID, []byte(tablePrefix(table.ID)+"/"))
	if err != nil {
		return err
	}
	defer ids.Close()
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		e, err := ids.Next()
		if err != nil || e == nil {
			return err
		}
		// The dictionary lists each id once, including ids whose
		// documents were deleted in segments not merged away yet:
		// liveRow reads the snapshot's document of the id, if any.
		values, ok, err := liveRow(r, table, e.Term)
		if err != nil {
			return err
		}
		if ok {
			if err := row(values); err != nil {
				return err
			}
		}
	}
}

// RowsByKey implements verify.KeyReader: it returns the live rows among
// keys (each key's values in table.KeyIdx order) that Rows returns (no
// tombstones; a truncate removes the rows below it), aligned with
// table.Columns as Rows aligns them, each at most once. It looks each key's
// document up by the id Write gives it, in one snapshot of the index, so
// its cost follows len(keys), not the table's size; a key with a value the
// sink could not have written (another type, text that is not UTF-8) has
// no document. It runs concurrently with writes (seeing every Write that
// returned before it started) and with other reads, holds off Close until
// it returns, and honours ctx cancellation between lookups.
func (s *Sink) RowsByKey(ctx context.Context, table *pipeline.Table, keys [][]any) ([][]any, error) {
	if len(table.KeyIdx) == 0 {
		return nil, fmt.Errorf("bleve sink: table %s has no key", table.ID)
	}
	s.idxMu.RLock()
	defer s.idxMu.RUnlock()
	r, err := s.snapshot()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	prefix := tablePrefix(table.ID)
	seen := make(map[string]bool, len(keys))
	var out [][]any
	var buf []byte
	for i, key := range keys {
		if i%256 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		if len(key) != len(table.KeyIdx) {
			return nil, fmt.Errorf("bleve sink: a key of %d values for table %s, which has %d key columns",
				len(key), table.ID, len(table.KeyIdx))
		}
		var ok bool
		if buf, ok = appendKeyParts(append(buf[:0], prefix...), table, key); !ok || seen[string(buf)] {
			continue
		}
		id := string(buf)
		seen[id] = true
		row, ok, err := liveRow(r, table, id)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, row)
		}
	}
	return out, nil
}

// snapshot opens a reader of the index's current snapshot; the caller
// holds s.idxMu shared and closes the reader.
func (s *Sink) snapshot() (index.IndexReader, error) {
	if s.idx == nil {
		return nil, ErrClosed
	}
	adv, err := s.idx.Advanced()
	if err != nil {
		return nil, err
	}
	return adv.Reader()
}

// liveRow reads the document with id from r: its row, aligned with
// table.Columns, and true; false when r holds no such document or it is a
// tombstone.
func liveRow(r index.IndexReader, table *pipeline.Table, id string) ([]any, bool, error) {
	doc, err := r.Document(id)
	if err != nil {
		return nil, false, fmt.Errorf("look up %s: %w", id, err)
	}
	if doc == nil {
		return nil, false, nil
	}
	st, err := readStored(doc)
	if err != nil {
		return nil, false, fmt.Errorf("document %s: %w", id, err)
	}
	if st.deleted {
		return nil, false, nil
	}
	row, err := decodeRow(table, st.row)
	if err != nil {
		return nil, false, fmt.Errorf("document %s: %w", id, err)
	}
	return row, true, nil
}

// appendKeyParts appends to id the parts of a row's key values (in
// table.KeyIdx order; appendIDPart); false when a value has no key text:
// the sink could not have written it, so no document has that key.
func appendKeyParts(id []byte, table *pipeline.Table, key []any) ([]byte, bool) {
	for n, idx := range table.KeyIdx {
		var err error
		if id, err = appendIDPart(id, &table.Columns[idx], key[n]); err != nil {
			return id, false
		}
	}
	return id, true
}

// deadQuery matches the tombstones.
func deadQuery() query.Query {
	q := query.NewTermQuery("true")
	q.SetField(fieldDeleted)
	return q
}

// decodeRow reads a stored row object into values aligned with
// table.Columns.
func decodeRow(table *pipeline.Table, text []byte) ([]any, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(bytes.TrimSpace(text), &obj); err != nil {
		return nil, fmt.Errorf("row: %w", err)
	}
	row := make([]any, len(table.Columns))
	for i := range table.Columns {
		c := &table.Columns[i]
		raw, ok := obj[c.Name]
		if !ok {
			continue
		}
		v, err := decodeValue(c.Type, c.Elem, raw)
		if err != nil {
			return nil, fmt.Errorf("column %s: %w", c.Name, err)
		}
		row[i] = v
	}
	return row, nil
}
