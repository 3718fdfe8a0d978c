package search

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"

	"github.com/sluice-cdc/sluice/internal/jsontext"

	"go.uber.org/zap"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/sinks/upsert"
)

// An added column's missing value (pipeline.Column.Missing: ALTER TABLE
// … ADD COLUMN … DEFAULT, whose existing rows hold the default with no
// change event) goes into every live document of the index written
// before the column:
//
//  1. the column's name joins the state document's pending_fill list;
//  2. the column is mapped (indexFor);
//  3. fillMissing rewrites each live document whose source lacks the
//     column, with the version it was found with (external_gte: the sink
//     is the single writer and Write calls are serialized, so nothing
//     else wrote it since), which indexes the new field too;
//  4. pending_fill is emptied.
//
// All of it runs before the batch's documents are written, so a document
// lacking the column predates it (a NULL is stored as null, never left
// out). After a crash between 1 and 4 the next Write finds the column
// mapped but pending and runs 3 and 4 again, which rewrite only the
// documents still lacking it.

// pendingDoc is the state document's update listing the columns whose
// fill is pending.
func pendingDoc(names []string) []byte {
	b := []byte(`{"pending_fill":[`)
	for i, n := range names {
		if i > 0 {
			b = append(b, ',')
		}
		b = jsontext.AppendString(b, n)
	}
	return append(b, "]}"...)
}

// fillMissing rewrites the live documents of st's index that lack one of
// cols with its missing value and returns how many it rewrote.
func (s *Sink) fillMissing(ctx context.Context, st *indexState, cols []*pipeline.Column) (int, error) {
	vals := make([][]byte, len(cols))
	for i, c := range cols {
		x, err := (conv{}).Stage(c, c.Missing)
		if err != nil {
			return 0, &tableError{fmt.Errorf("column %s: missing value: %w", c.Name, err)}
		}
		vals[i] = appendValue(nil, x)
	}
	filled := 0
	err := s.scroll(ctx, st.name, string(liveFilter("")), "true", func(hits []hit) error {
		var body []byte
		n := 0
		for _, h := range hits {
			lacks := false
			for _, c := range cols {
				if _, ok := h.Source[c.Name]; !ok {
					lacks = true
					break
				}
			}
			if !lacks {
				continue
			}
			for i, c := range cols {
				if _, ok := h.Source[c.Name]; !ok {
					h.Source[c.Name] = vals[i]
				}
			}
			doc, err := json.Marshal(h.Source)
			if err != nil {
				return err
			}
			body = jsontext.AppendString(append(body, `{"index":{"_index":`...), st.name)
			body = jsontext.AppendString(append(body, `,"_id":`...), h.ID)
			body = strconv.AppendInt(append(body, `,"version":`...), h.Version, 10)
			body = append(append(append(body, ",\"version_type\":\"external_gte\"}}\n"...), doc...), '\n')
			n++
		}
		if n == 0 {
			return nil
		}
		rctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
		defer cancel()
		status, resp, err := s.eng.bulk(rctx, body, false)
		if err != nil {
			return fmt.Errorf("bulk fill: %w", err)
		}
		if status != http.StatusOK {
			return replyError("bulk fill", status, resp)
		}
		err = eachItem("bulk fill", resp, func(status int, e *engineError) error {
			if status != http.StatusOK && status != http.StatusCreated {
				return fmt.Errorf("bulk fill: status %d: %s", status, e)
			}
			return nil
		})
		if err == nil {
			filled += n
		}
		return err
	})
	return filled, err
}

// fillPending runs steps 3 and 4 for the columns of tb that are pending
// in st and have a missing value.
func (s *Sink) fillPending(ctx context.Context, st *indexState, tb *upsert.TableBatch) error {
	var cols []*pipeline.Column
	for i := range tb.Cols {
		if c := &tb.Cols[i]; st.pending[c.Name] && c.Missing != nil {
			cols = append(cols, c)
		}
	}
	if len(cols) == 0 {
		return nil
	}
	n, err := s.fillMissing(ctx, st, cols)
	if err != nil {
		return err
	}
	for _, c := range cols {
		delete(st.pending, c.Name)
	}
	left := make([]string, 0, len(st.pending))
	for name := range st.pending {
		left = append(left, name)
	}
	if err := s.updateState(ctx, st, pendingDoc(left)); err != nil {
		return err
	}
	s.log.Info("added columns filled with their missing values", zap.String("index", st.name),
		zap.Int("columns", len(cols)), zap.Int("documents", n))
	return nil
}
