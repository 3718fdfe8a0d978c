package duckdb

import (
	"context"
	"database/sql/driver"
	"encoding/binary"
	"fmt"
	"strings"

	"go.uber.org/zap"

	duck "github.com/duckdb/duckdb-go/v2"
	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/sinks/textform"
	"github.com/sluice-cdc/sluice/sinks/upsert"
)

// Multi-dimensional arrays. A Postgres array column may hold values of
// any dimension, while its DuckDB column is a LIST of the element type,
// which holds one dimension. A value of more than one dimension is stored
// in the row's companion column _sluice_nested_<column> (VARCHAR, created
// the first time the table gets such a value), in the text form of package
// sinks/textform (JSON arrays), with NULL in the LIST column; a value of
// one dimension clears the companion. Reading gives the companion's value
// back when it is set. So the row lands whole and every other column stays
// current.

const nestedPrefix = "_sluice_nested_"

// nestedColumn is the companion column of array column name.
func nestedColumn(name string) string { return nestedPrefix + name }

// nestedValue is the staged form of a multi-dimensional array: its text.
type nestedValue string

// isNested reports whether v is an array value with an array element.
func isNested(c *pipeline.Column, v any) bool {
	if c.Type != pipeline.TypeArray {
		return false
	}
	list, ok := v.([]any)
	if !ok {
		return false
	}
	for _, e := range list {
		if _, ok := e.([]any); ok {
			return true
		}
	}
	return false
}

// stageNested is toStage for the upsert fold: a multi-dimensional array
// becomes its nestedValue.
func stageNested(c *pipeline.Column, v any) (any, error) {
	if !isNested(c, v) {
		return toStage(c, v)
	}
	s, err := textform.Encode(c, v)
	if err != nil {
		return nil, valueErr("column %s: %v", c.Name, err)
	}
	return nestedValue(s), nil
}

// splitNested returns the LIST column's and the companion's staged values
// of x.
func splitNested(x any) (list, nested any) {
	if s, ok := x.(nestedValue); ok {
		return nil, string(s)
	}
	return x, nil
}

// nestedCols reports, per column of tb, whether its target has the
// companion column; it first creates the companions the batch's rows
// need (their values or kept fallbacks are multi-dimensional).
func (s *Sink) nestedCols(ctx context.Context, tb *upsert.TableBatch) ([]bool, error) {
	have := s.tables[strings.ToLower(tb.Target)]
	out := make([]bool, len(tb.Cols))
	for i := range tb.Cols {
		c := &tb.Cols[i]
		if c.Type != pipeline.TypeArray {
			continue
		}
		name := nestedColumn(c.Name)
		if _, ok := have[strings.ToLower(name)]; ok {
			out[i] = true
			continue
		}
		need := false
		for r := range tb.Rows {
			row := &tb.Rows[r]
			_, a := row.Vals[i].(nestedValue)
			b := false
			if row.Kept != nil && row.Kept.HasFb[i] {
				_, b = row.Kept.Fb[i].(nestedValue)
			}
			if a || b {
				need = true
				break
			}
		}
		if !need {
			continue
		}
		if _, err := s.conn.ExecContext(ctx, "ALTER TABLE "+s.qualified(tb.Target)+" ADD COLUMN "+quote(name)+" VARCHAR"); err != nil {
			return nil, fmt.Errorf("add column %s: %w", name, err)
		}
		have[strings.ToLower(name)] = "VARCHAR"
		out[i] = true
		s.log.Info("companion column added for multi-dimensional array values", zap.String("table", tb.Target),
			zap.String("column", c.Name), zap.String("companion", name))
	}
	return out, nil
}

// readNested gives a row's value of array column c back from the LIST
// column's value list and the companion's text nested (nil when unset).
func readNested(c *pipeline.Column, list, nested any) (any, error) {
	text, ok := nested.(string)
	if !ok {
		return fromRead(c, list)
	}
	v, err := textform.Decode(c, text)
	if err != nil {
		return nil, fmt.Errorf("column %s: companion %s: %w", c.Name, nestedColumn(c.Name), err)
	}
	return v, nil
}

// appendNestedRows is appendRows for a batch with companion columns: each
// value of such a column is appended as the pair (LIST value, companion
// text), in the staging order of stageTypes.
func appendNestedRows(ctx context.Context, a *duck.Appender, n int, rows []upsert.Row, lean bool, nested []bool) error {
	args := make([]driver.Value, 0, 2*n+4)
	put := func(c int, x any) {
		if nested[c] {
			l, t := splitNested(x)
			args = append(args, l, t)
			return
		}
		args = append(args, x)
	}
	for i := range rows {
		r := &rows[i]
		if i%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		v := make([]byte, 32)
		for c, x := range r.Version {
			binary.BigEndian.PutUint64(v[8*c:], x)
		}
		args = args[:0]
		for c := range n {
			put(c, r.Vals[c])
		}
		if lean {
			args = append(args, v, r.Deleted)
		} else {
			keep, fbv := make([]any, n), make([]any, n)
			for c := range n {
				var fb any
				keep[c] = false
				if k := r.Kept; k != nil {
					keep[c] = k.Keep[c]
					if k.HasFb[c] {
						fb, fbv[c] = k.Fb[c], k.Fbv[c].Bytes()
					}
				}
				put(c, fb)
			}
			args = append(args, v, r.Deleted, keep, fbv)
		}
		if err := a.AppendRow(args...); err != nil {
			return err
		}
	}
	return nil
}
