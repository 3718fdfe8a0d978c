package search

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/sluice-cdc/sluice/internal/jsontext"
	"github.com/sluice-cdc/sluice/pipeline"
)

// scrollPage is the number of hits per scroll page.
const scrollPage = 1000

// hit is one search hit.
type hit struct {
	ID      string                     `json:"_id"`
	Version int64                      `json:"_version"`
	Source  map[string]json.RawMessage `json:"_source"`
}

// scroll refreshes index (so that every acknowledged write is searchable)
// and calls fn with the hits of query, page by page.
func (s *Sink) scroll(ctx context.Context, index string, query, source string, fn func([]hit) error) error {
	path := "/" + url.PathEscape(index)
	if _, _, err := s.call(ctx, "refresh "+index, http.MethodPost, path+"/_refresh", nil, nil); err != nil {
		return err
	}
	body := `{"size":` + strconv.Itoa(scrollPage) + `,"sort":["_doc"],"_source":` + source + `,"query":` + query + `}`
	_, resp, err := s.call(ctx, "search "+index, http.MethodPost, path+"/_search",
		url.Values{"scroll": {"2m"}, "version": {"true"}}, []byte(body))
	if err != nil {
		return err
	}
	var id string
	defer func() {
		if id != "" {
			b, _ := json.Marshal(map[string][]string{"scroll_id": {id}})
			_, _, _ = s.call(context.Background(), "clear scroll", http.MethodDelete, "/_search/scroll", nil, b, 404)
		}
	}()
	for {
		var r struct {
			ScrollID string `json:"_scroll_id"`
			Hits     struct {
				Hits []hit `json:"hits"`
			} `json:"hits"`
		}
		if err := json.Unmarshal(resp, &r); err != nil {
			return fmt.Errorf("search %s: %w", index, err)
		}
		id = r.ScrollID
		if len(r.Hits.Hits) == 0 {
			return nil
		}
		if err := fn(r.Hits.Hits); err != nil {
			return err
		}
		b, _ := json.Marshal(map[string]string{"scroll": "2m", "scroll_id": id})
		if _, resp, err = s.call(ctx, "scroll "+index, http.MethodPost, "/_search/scroll", nil, b); err != nil {
			return err
		}
	}
}

// deleteMatching deletes the documents of index that match query, each
// guarded by the version it was found with (version_type=external_gte
// with its own version: a document written again since is kept). It
// returns how many it deleted.
func (s *Sink) deleteMatching(ctx context.Context, index, query string) (int, error) {
	deleted := 0
	err := s.scroll(ctx, index, query, "false", func(hits []hit) error {
		var body []byte
		for _, h := range hits {
			body = jsontext.AppendString(append(body, `{"delete":{"_index":`...), index)
			body = jsontext.AppendString(append(body, `,"_id":`...), h.ID)
			body = strconv.AppendInt(append(body, `,"version":`...), h.Version, 10)
			body = append(body, ",\"version_type\":\"external_gte\"}}\n"...)
		}
		rctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
		defer cancel()
		status, resp, err := s.eng.bulk(rctx, body, false)
		if err != nil {
			return fmt.Errorf("bulk delete: %w", err)
		}
		if status != http.StatusOK {
			return replyError("bulk delete", status, resp)
		}
		var r struct {
			Items []map[string]struct {
				Status int          `json:"status"`
				Error  *engineError `json:"error"`
			} `json:"items"`
		}
		if err := json.Unmarshal(resp, &r); err != nil {
			return fmt.Errorf("bulk delete response: %w", err)
		}
		for _, item := range r.Items {
			for _, it := range item {
				switch {
				case it.Status == http.StatusOK:
					deleted++
				case it.Status == http.StatusNotFound || it.Status == http.StatusConflict:
					// gone already, or written again since the search
				default:
					return fmt.Errorf("bulk delete: status %d: %s", it.Status, it.Error)
				}
			}
		}
		return nil
	})
	return deleted, err
}

// purge removes expired tombstones, at most once per
// min(TombstoneTTL, 10m), after the batch is durable: the tombstones
// written before now-TombstoneTTL of the indices whose table has had no
// snapshot record since then (a late snapshot row could otherwise bring
// a purged key back while the snapshot runs). A failure is logged and
// retried at the next turn.
func (s *Sink) purge(ctx context.Context) {
	cutoff, ok := s.purger.Due(s.now())
	if !ok {
		return
	}
	state := "/" + url.PathEscape(s.opts.StateIndex)
	_, _, err := s.call(ctx, "refresh state", http.MethodPost, state+"/_refresh", nil, nil)
	var body []byte
	if err == nil {
		_, body, err = s.call(ctx, "list state", http.MethodPost, state+"/_search", nil,
			[]byte(`{"size":10000,"_source":["snapshot_at"],"query":{"match_all":{}}}`))
	}
	if err != nil {
		s.log.Warn("tombstone purge: list indices", zap.Error(err))
		return
	}
	var r struct {
		Hits struct {
			Hits []hit `json:"hits"`
		} `json:"hits"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		s.log.Warn("tombstone purge: list indices", zap.Error(err))
		return
	}
	query := `{"bool":{"filter":[{"term":{"` + fieldDeleted + `":true}},{"range":{"` + fieldAt + `":{"lt":"` +
		formatTime(cutoff) + `"}}}]}}`
	for _, h := range r.Hits.Hits {
		var snap time.Time
		if raw := h.Source["snapshot_at"]; raw != nil {
			_ = json.Unmarshal(raw, &snap)
		}
		if st := s.indices[h.ID]; st != nil && st.snapshotAt.After(snap) {
			snap = st.snapshotAt
		}
		// The mark is stored to the minute (markSnapshots).
		if !snap.IsZero() && !snap.Add(time.Minute).Before(cutoff) {
			continue
		}
		n, err := s.deleteMatching(ctx, h.ID, query)
		var se *statusError
		switch {
		case errors.As(err, &se) && se.status == http.StatusNotFound:
		case err != nil:
			s.log.Warn("tombstone purge failed", zap.String("index", h.ID), zap.Error(err))
		case n > 0:
			s.log.Info("tombstones purged", zap.String("index", h.ID), zap.Int("documents", n))
		}
	}
}

// Rows returns the live rows of a source table, with values aligned with
// table.Columns in the record model's value types: what a consumer that
// follows the package's contract sees (no tombstones, nothing below the
// truncate barrier). It refreshes the index first. It is a verification
// helper (a scroll over the whole index); an absent index has no rows.
func (s *Sink) Rows(ctx context.Context, table *pipeline.Table) ([][]any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	name, barrier, err := s.readTarget(ctx, table.ID)
	if err != nil {
		return nil, err
	}
	var out [][]any
	err = s.scroll(ctx, name, string(liveFilter(barrier)), "true", func(hits []hit) error {
		for _, h := range hits {
			row, err := decodeRow(table, h.ID, h.Source)
			if err != nil {
				return err
			}
			out = append(out, row)
		}
		return nil
	})
	var se *statusError
	if errors.As(err, &se) && se.status == http.StatusNotFound {
		return nil, nil
	}
	return out, err
}

// readTarget returns the index of a table and its truncate barrier ("" for
// none), for a read; the caller holds s.mu.
func (s *Sink) readTarget(ctx context.Context, id pipeline.TableID) (name, barrier string, err error) {
	if s.eng == nil {
		return "", "", errNotOpen
	}
	name = s.target(id)
	if err := s.names[id].err; err != nil {
		return "", "", err
	}
	status, body, err := s.call(ctx, "state of "+name, http.MethodGet, s.statePath(name), nil, nil, 404)
	if err != nil || status != http.StatusOK {
		return name, "", err
	}
	var doc struct {
		Source struct {
			Barrier string `json:"barrier"`
		} `json:"_source"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return "", "", fmt.Errorf("state of %s: %w", name, err)
	}
	return name, doc.Source.Barrier, nil
}

// decodeRow reads a document's source into values aligned with
// table.Columns.
func decodeRow(table *pipeline.Table, id string, src map[string]json.RawMessage) ([]any, error) {
	row := make([]any, len(table.Columns))
	for i := range table.Columns {
		v, err := decodeColumn(&table.Columns[i], src[table.Columns[i].Name])
		if err != nil {
			return nil, fmt.Errorf("document %s: %w", id, err)
		}
		row[i] = v
	}
	return row, nil
}
