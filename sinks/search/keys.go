package search

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"

	"github.com/sluice-cdc/sluice/internal/jsontext"
	"github.com/sluice-cdc/sluice/pipeline"
)

// mgetGroup is the most document ids one RowsByKey request asks for.
const mgetGroup = 1000

// RowsByKey implements verify.KeyReader: it returns the live rows among
// keys (each key's values in table.KeyIdx order) that Rows returns (no
// tombstones, nothing below the truncate barrier), aligned with
// table.Columns as Rows aligns them, each at most once. It reads the
// documents by the id Write derives from the key (keyID), with realtime
// multi-gets of at most mgetGroup ids: no refresh, and one request per
// group whatever the index's size. A key with a value the sink could not
// have written (another type, text that is not UTF-8) has no document. Each
// group is read under the sink's lock with the barrier stored at the time:
// it waits for a running Write, and Writes run between groups. It honours
// ctx; an absent index has no rows.
func (s *Sink) RowsByKey(ctx context.Context, table *pipeline.Table, keys [][]any) ([][]any, error) {
	if len(table.KeyIdx) == 0 {
		return nil, fmt.Errorf("search sink: table %s has no key", table.ID)
	}
	ids := make([]string, 0, len(keys))
	seen := make(map[string]bool, len(keys))
	for _, key := range keys {
		if len(key) != len(table.KeyIdx) {
			return nil, fmt.Errorf("search sink: a key of %d values for table %s, which has %d key columns",
				len(key), table.ID, len(table.KeyIdx))
		}
		if id, ok := keyID(table, key); ok && !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	var out [][]any
	for start := 0; start < len(ids); start += mgetGroup {
		rows, err := s.rowsByID(ctx, table, ids[start:min(start+mgetGroup, len(ids))])
		if err != nil {
			return nil, err
		}
		out = append(out, rows...)
	}
	return out, nil
}

// rowsByID returns the live rows of the table's documents with the given
// ids (one realtime multi-get).
func (s *Sink) rowsByID(ctx context.Context, table *pipeline.Table, ids []string) ([][]any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	name, barrier, err := s.readTarget(ctx, table.ID)
	if err != nil {
		return nil, err
	}
	body := []byte(`{"ids":[`)
	for i, id := range ids {
		if i > 0 {
			body = append(body, ',')
		}
		body = jsontext.AppendString(body, id)
	}
	body = append(body, "]}"...)
	status, resp, err := s.call(ctx, "read documents of "+name, http.MethodPost, "/"+url.PathEscape(name)+"/_mget",
		nil, body, http.StatusNotFound)
	if err != nil || status == http.StatusNotFound {
		return nil, err // not found: the index does not exist
	}
	var r struct {
		Docs []struct {
			ID     string                     `json:"_id"`
			Found  bool                       `json:"found"`
			Source map[string]json.RawMessage `json:"_source"`
			Error  *engineError               `json:"error"`
		} `json:"docs"`
	}
	if err := json.Unmarshal(resp, &r); err != nil {
		return nil, fmt.Errorf("read documents of %s: %w", name, err)
	}
	var out [][]any
	for _, d := range r.Docs {
		switch {
		case d.Error != nil && d.Error.Type == "index_not_found_exception":
			continue
		case d.Error != nil:
			return nil, fmt.Errorf("read document %s/%s: %s", name, d.ID, d.Error)
		case !d.Found || !live(d.Source, barrier):
			continue
		}
		row, err := decodeRow(table, d.ID, d.Source)
		if err != nil {
			return nil, err
		}
		out = append(out, row)
	}
	return out, nil
}

// live reports whether liveFilter(barrier) matches a document: it is not
// a tombstone (the boolean field takes true and "true") and, when there is
// a barrier, its version is not below it (keyword order, as the filter's
// range compares).
func live(src map[string]json.RawMessage, barrier string) bool {
	if d := string(src[fieldDeleted]); d == "true" || d == `"true"` {
		return false
	}
	if barrier == "" {
		return true
	}
	var v string
	return json.Unmarshal(src[fieldVersion], &v) == nil && v >= barrier
}
