package bleve

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/blevesearch/bleve/v2/document"
	"go.uber.org/zap"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/sinks/upsert"
)

// fillMissing gives the documents of every table of tbs the missing value
// of each column the index does not know yet and that has one
// (pipeline.Column.Missing: ALTER TABLE … ADD COLUMN … DEFAULT, whose
// existing rows hold the default with no change event saying so).
//
// It runs before the Write's plan and stores no state: only a later plan
// records the columns as known. The documents it rewrites keep their
// versions and lack the column until rewritten, so a crash part way only
// leaves the rest to the next attempt, which finds the columns unknown
// again and rewrites the documents that still lack them (idempotent).
// Tombstones are left as they are: they hold no values.
func (s *Sink) fillMissing(ctx context.Context, tbs []*upsert.TableBatch) error {
	for _, tb := range tbs {
		ts := s.state.Tables[tb.Target]
		if ts == nil {
			continue // no document of the table yet
		}
		var fills []*pipeline.Column
		wide := ts.clone()
		for j := range tb.Cols {
			c := &tb.Cols[j]
			if hasColumn(wide, c.Name) {
				continue
			}
			wide.byName[c.Name] = len(wide.Columns)
			wide.Columns = append(wide.Columns, colState{Name: c.Name, Type: c.Type, Elem: c.Elem,
				TypeName: c.Type.String(), ElemName: elemName(c)})
			if c.Missing != nil {
				fills = append(fills, c)
			}
		}
		if len(fills) == 0 {
			continue
		}
		n, err := s.fillTable(ctx, wide, tb.Target, fills)
		if err != nil {
			return fmt.Errorf("table %s: fill added columns with their missing values: %w", tb.ID, err)
		}
		s.log.Info("added columns filled with their missing values", zap.String("table", ts.ID),
			zap.Int("columns", len(fills)), zap.Int("documents", n))
	}
	return nil
}

// fillTable rewrites the live documents of the table (prefix) that lack
// one of fills, with its missing value, page by page; wide is the table's
// state with the new columns. It returns how many it rewrote.
func (s *Sink) fillTable(ctx context.Context, wide *tableState, prefix string, fills []*pipeline.Column) (int, error) {
	raws := make(map[string]json.RawMessage, len(fills))
	for _, c := range fills {
		b, err := appendValue(nil, c.Type, c.Elem, c.Missing)
		if err != nil {
			return 0, fmt.Errorf("column %s: missing value: %w", c.Name, err)
		}
		raws[c.Name] = b
	}
	pos := make([]int, len(wide.Columns))
	for k := range pos {
		pos[k] = -1 // every value comes from the stored row
	}
	none := &upsert.TableBatch{}
	total := 0
	p := &plan{}
	flush := func() error {
		if len(p.docs) == 0 {
			return nil
		}
		total += len(p.docs)
		err := s.apply(ctx, p)
		p = &plan{}
		return err
	}
	var rowBuf []byte
	err := eachDoc(ctx, s.idx, tableQuery(wide.ID), []string{fieldVersion, fieldDeleted, fieldKey, fieldRow},
		func(id string, f map[string]any) error {
			if f[fieldDeleted] == "true" {
				return nil
			}
			text, _ := f[fieldVersion].(string)
			v, err := pipeline.ParseVersion(text)
			if err != nil {
				return fmt.Errorf("document %s: %w", id, err)
			}
			rowText, _ := f[fieldRow].(string)
			var row map[string]json.RawMessage
			if err := json.Unmarshal([]byte(rowText), &row); err != nil {
				return fmt.Errorf("document %s: stored row: %w", id, err)
			}
			lacks := false
			for name, raw := range raws {
				if _, ok := row[name]; !ok {
					row[name], lacks = raw, true
				}
			}
			if !lacks {
				return nil
			}
			patched, err := json.Marshal(row)
			if err != nil {
				return err
			}
			d := document.NewDocument(id)
			var idx []string
			rowBuf, idx, err = s.buildRow(d, rowBuf[:0], wide, none, pos, &upsert.Row{Version: v},
				&stored{version: v, row: patched}, nil)
			if err != nil {
				return fmt.Errorf("document %s: %w", id, err)
			}
			key, _ := f[fieldKey].(string)
			addInternal(d, wide.ID, v, false, 0, []byte(key), append([]byte(nil), rowBuf...), idx)
			p.docs = append(p.docs, d)
			p.sizes = append(p.sizes, 3*len(rowBuf)+len(id)+256)
			if len(p.docs) >= writePart {
				return flush()
			}
			return nil
		})
	if err != nil {
		return total, err
	}
	return total, flush()
}
