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

// scrollPage is the number of hits per scroll page (Sink.page).
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
	sc, err := s.openScroll(ctx, index, query, source)
	if err != nil {
		return err
	}
	return sc.each(ctx, fn)
}

// scroller reads a scroll search page by page (each). Its requests go
// through the engine it was opened with, so it may page without s.mu.
type scroller struct {
	s     *Sink
	eng   engine
	index string
	id    string // the scroll's id, cleared by close
	hits  []hit  // the current page; empty at the end
}

// openScroll refreshes index (so that every acknowledged write is
// searchable) and opens a scroll over the hits of query, with its first
// page: the scroll keeps the view of the index of that moment. The
// caller holds s.mu and closes the scroller.
func (s *Sink) openScroll(ctx context.Context, index string, query, source string) (*scroller, error) {
	if s.eng == nil {
		return nil, errNotOpen
	}
	sc := &scroller{s: s, eng: s.eng, index: index}
	path := "/" + url.PathEscape(index)
	if _, _, err := sc.call(ctx, "refresh "+index, http.MethodPost, path+"/_refresh", nil, nil); err != nil {
		return nil, err
	}
	body := `{"size":` + strconv.Itoa(s.page) + `,"sort":["_doc"],"_source":` + source + `,"query":` + query + `}`
	_, resp, err := sc.call(ctx, "search "+index, http.MethodPost, path+"/_search",
		url.Values{"scroll": {"2m"}, "version": {"true"}}, []byte(body))
	if err == nil {
		err = sc.read(resp)
	}
	if err != nil {
		sc.close()
		return nil, err
	}
	return sc, nil
}

// each calls fn with the current page and every next one, until fn
// fails or a page is empty, then clears the scroll. It returns fn's error
// as is, and ctx's error when ctx ends a request.
func (sc *scroller) each(ctx context.Context, fn func([]hit) error) error {
	defer sc.close()
	for len(sc.hits) > 0 {
		if err := fn(sc.hits); err != nil {
			return err
		}
		b, _ := json.Marshal(map[string]string{"scroll": "2m", "scroll_id": sc.id})
		_, resp, err := sc.call(ctx, "scroll "+sc.index, http.MethodPost, "/_search/scroll", nil, b)
		if err != nil {
			return sc.s.ctxErr(ctx, err)
		}
		if err := sc.read(resp); err != nil {
			return err
		}
	}
	return nil
}

// read takes a page and the scroll's id from a search response.
func (sc *scroller) read(resp []byte) error {
	var r struct {
		ScrollID string `json:"_scroll_id"`
		Hits     struct {
			Hits []hit `json:"hits"`
		} `json:"hits"`
	}
	if err := json.Unmarshal(resp, &r); err != nil {
		return fmt.Errorf("search %s: %w", sc.index, err)
	}
	if r.ScrollID != "" {
		sc.id = r.ScrollID
	}
	sc.hits = r.Hits.Hits
	return nil
}

// close clears the scroll (its view of the index holds segments).
func (sc *scroller) close() {
	if sc.id != "" {
		b, _ := json.Marshal(map[string][]string{"scroll_id": {sc.id}})
		_, _, _ = sc.call(context.Background(), "clear scroll", http.MethodDelete, "/_search/scroll", nil, b, 404)
		sc.id = ""
	}
}

// call is Sink.call through sc.eng.
func (sc *scroller) call(ctx context.Context, what, method, path string, query url.Values, body []byte, okStatus ...int) (int, []byte, error) {
	return sc.s.callOn(ctx, sc.eng, what, method, path, query, body, okStatus...)
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
		return eachItem("bulk delete", resp, func(status int, e *engineError) error {
			switch {
			case status == http.StatusOK:
				deleted++
			case status == http.StatusNotFound || status == http.StatusConflict:
				// gone already, or written again since the search
			default:
				return fmt.Errorf("bulk delete: status %d: %s", status, e)
			}
			return nil
		})
	})
	return deleted, err
}

// eachItem calls fn with the status and error of every item of a bulk
// response (what names the request in errors), stopping at fn's error.
func eachItem(what string, resp []byte, fn func(status int, e *engineError) error) error {
	var r struct {
		Items []map[string]struct {
			Status int          `json:"status"`
			Error  *engineError `json:"error"`
		} `json:"items"`
	}
	if err := json.Unmarshal(resp, &r); err != nil {
		return fmt.Errorf("%s response: %w", what, err)
	}
	for _, item := range r.Items {
		for _, it := range item {
			if err := fn(it.Status, it.Error); err != nil {
				return err
			}
		}
	}
	return nil
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
// table.Columns in the record model's value types, in no particular
// order: what Scan yields, collected. It is a verification helper: it
// holds the whole index.
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
// source table, what a consumer that follows the package's contract sees
// (no tombstones, nothing below the truncate barrier), aligned with
// table.Columns in the record model's value types, in no particular
// order; row owns the slice it gets. Under the sink's lock (after a
// running Write) it reads the barrier, refreshes the index and opens a
// scroll over the live documents, so the barrier and the scroll's view of
// the index are of one moment; then it releases the lock and reads the
// scroll a page of hits at a time, so its memory holds one page, not the
// index: Writes run meanwhile and the scan does not see them. It returns
// the first error of row, checks ctx before each hit and clears the
// scroll when it returns; an absent index has no rows.
func (s *Sink) Scan(ctx context.Context, table *pipeline.Table, row func([]any) error) error {
	sc, err := s.openLive(ctx, table.ID)
	var se *statusError
	if errors.As(err, &se) && se.status == http.StatusNotFound {
		return nil // no index (a later page's 404, a lost scroll, is an error)
	}
	if err != nil {
		return s.ctxErr(ctx, err)
	}
	return sc.each(ctx, func(hits []hit) error {
		for _, h := range hits {
			if err := ctx.Err(); err != nil {
				return err
			}
			values, err := decodeRow(table, h.ID, h.Source)
			if err != nil {
				return err
			}
			if err := row(values); err != nil {
				return err
			}
		}
		return nil
	})
}

// openLive opens a scroll over the live documents of a table's index,
// under s.mu.
func (s *Sink) openLive(ctx context.Context, id pipeline.TableID) (*scroller, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	name, barrier, err := s.readTarget(ctx, id)
	if err != nil {
		return nil, err
	}
	return s.openScroll(ctx, name, string(liveFilter(barrier)), "true")
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
