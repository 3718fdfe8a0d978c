package duckdb

import (
	"context"
	"database/sql/driver"
	"encoding/binary"
	"fmt"
	"math"
	"strings"

	"go.uber.org/zap"

	duck "github.com/duckdb/duckdb-go/v2"
	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/pipeline/textform"
	"github.com/sluice-cdc/sluice/sinks/upsert"
)

// Values a column's DuckDB type cannot hold. A Postgres array column may
// hold values of any dimension, while its DuckDB column is a LIST of the
// element type, which holds one dimension; a numeric(p,s) column may hold
// NaN and ±Infinity, which a DuckDB DECIMAL(p,s) cannot; a float column
// may hold -0, which DuckDB's DOUBLE and FLOAT take as equal to 0 in an
// update (0 to -0 is no change) and which its checkpoint compresses to 0
// among zeros. Such a value is stored in the row's companion column _sluice_text_<column> (VARCHAR,
// created the first time the table gets such a value), in the text form of
// package pipeline/textform (JSON arrays, "NaN", "Infinity", "-0"), with NULL in the
// typed column; a value the typed column holds clears the companion.
// Reading gives the companion's value back when it is set. So the row
// lands whole and every other column stays current.

const companionPrefix = "_sluice_text_"

// companionColumn is the companion column of column name.
func companionColumn(name string) string { return companionPrefix + name }

// companionValue is the staged form of a value the typed column cannot
// hold: its text.
type companionValue string

// hasCompanion reports whether column c may need a companion: an array,
// a float, or a decimal stored as DuckDB DECIMAL(p,s).
func hasCompanion(c *pipeline.Column) bool {
	switch c.Type {
	case pipeline.TypeArray, pipeline.TypeFloat32, pipeline.TypeFloat64:
		return true
	}
	return c.Type == pipeline.TypeDecimal && strings.HasPrefix(typeOf(c).ddl, "DECIMAL(")
}

// needsCompanion reports whether v, a value of column c, goes to the
// companion: an array with an array element, a float -0, or a decimal
// NaN or infinity in a DECIMAL(p,s) column.
func needsCompanion(c *pipeline.Column, v any) bool {
	// The value first: this runs for every staged value, and the column
	// test (typeOf) formats the column's DDL.
	switch x := v.(type) {
	case []any:
		if c.Type != pipeline.TypeArray {
			return false
		}
		for _, e := range x {
			if _, ok := e.([]any); ok {
				return true
			}
		}
	case float64:
		return x == 0 && math.Signbit(x) && (c.Type == pipeline.TypeFloat32 || c.Type == pipeline.TypeFloat64)
	case pipeline.Decimal:
		return !x.IsFinite() && hasCompanion(c)
	}
	return false
}

// stageCompanion is toStage for the upsert fold: a value the typed column
// cannot hold becomes its companionValue.
func stageCompanion(c *pipeline.Column, v any) (any, error) {
	if !needsCompanion(c, v) {
		return toStage(c, v)
	}
	s, err := textform.Encode(c, v)
	if err != nil {
		return nil, valueErr("column %s: %v", c.Name, err)
	}
	return companionValue(s), nil
}

// splitCompanion returns the typed column's and the companion's staged
// values of x.
func splitCompanion(x any) (typed, text any) {
	if s, ok := x.(companionValue); ok {
		return nil, string(s)
	}
	return x, nil
}

// companionCols reports, per column of tb, whether its target has the
// companion column; it first creates the companions the batch's rows
// need (their values or kept fallbacks go to the companion).
func (s *Sink) companionCols(ctx context.Context, tb *upsert.TableBatch) ([]bool, error) {
	have := s.tables[strings.ToLower(tb.Target)]
	out := make([]bool, len(tb.Cols))
	for i := range tb.Cols {
		c := &tb.Cols[i]
		if !hasCompanion(c) {
			continue
		}
		name := companionColumn(c.Name)
		if _, ok := have[strings.ToLower(name)]; ok {
			out[i] = true
			continue
		}
		need := false
		for r := range tb.Rows {
			row := &tb.Rows[r]
			_, a := row.Vals[i].(companionValue)
			b := false
			if row.Kept != nil && row.Kept.HasFb[i] {
				_, b = row.Kept.Fb[i].(companionValue)
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
		s.log.Info("companion column added for values the column type cannot hold", zap.String("table", tb.Target),
			zap.String("column", c.Name), zap.String("companion", name))
	}
	return out, nil
}

// readCompanion gives a row's value of column c back from the typed
// column's value and the companion's text (nil when unset).
func readCompanion(c *pipeline.Column, typed, companion any) (any, error) {
	text, ok := companion.(string)
	if !ok {
		return fromRead(c, typed)
	}
	v, err := textform.Decode(c, text)
	if err != nil {
		return nil, fmt.Errorf("column %s: companion %s: %w", c.Name, companionColumn(c.Name), err)
	}
	return v, nil
}

// appendCompanionRows is appendRows for a batch with companion columns: each
// value of such a column is appended as the pair (typed value, companion
// text), in the staging order of stageTypes.
func appendCompanionRows(ctx context.Context, a *duck.Appender, n int, rows []upsert.Row, lean bool, comp []bool) error {
	args := make([]driver.Value, 0, 2*n+4)
	put := func(c int, x any) {
		if comp[c] {
			l, t := splitCompanion(x)
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
