package window

import (
	"fmt"
	"time"

	"github.com/cockroachdb/apd/v3"

	"go.etcd.io/bbolt"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/pipeline/binform"
	"github.com/sluice-cdc/sluice/transform/eval"
	"github.com/sluice-cdc/sluice/transform/scope"
)

// The results' table (Output): window_start and window_end (timestamptz),
// the group columns (as the input declares them), then one column per
// aggregate:
//
//	count(), count(col), count_distinct(col)   int64
//	sum(col)      decimal(38,0) for integers, decimal(38,s) for
//	              decimal(p,s), float64 for floats
//	avg(col)      decimal (unconstrained) for integers and decimals,
//	              float64 for floats
//	min, max, first, last   the column's own type
//
// With early results, a last column, partial (bool), says whether the
// row is a partial result of an open window. Its key is (window_start,
// window_end, the group columns).

// plan works out, for an input shape, the columns the window reads, and
// the results' shape; an error (a column missing, a sum of text) rejects
// the shape's records.
func (o *Operator) plan(t *pipeline.Table) (*plan, error) {
	fail := func(field string, err error) (*plan, error) {
		return nil, &scope.FieldError{Field: field, Table: t.ID, Err: err}
	}
	index := func(name string) int {
		for i := range t.Columns {
			if t.Columns[i].Name == name {
				return i
			}
		}
		return -1
	}
	p := &plan{time: -1}
	if o.opts.EventTime != "" {
		if p.time = index(o.opts.EventTime); p.time < 0 {
			return fail("event_time", fmt.Errorf("%s", eval.UnknownColumn(t, o.opts.EventTime)))
		}
		switch c := t.Columns[p.time]; c.Type {
		case pipeline.TypeTimestamp, pipeline.TypeTimestampTZ, pipeline.TypeDate, pipeline.TypeInt16, pipeline.TypeInt32,
			pipeline.TypeInt64, pipeline.TypeUint32, pipeline.TypeUint64, pipeline.TypeFloat64, pipeline.TypeDecimal:
		default:
			return fail("event_time", fmt.Errorf("column %s is %s; an event time is a timestamp, timestamptz, date or a number of seconds since 1970", c.Name, c.Type))
		}
	}
	ts := pipeline.Column{Type: pipeline.TypeTimestampTZ, Key: true, SourceType: "timestamptz"}
	start, end := ts, ts
	start.Name, end.Name = "window_start", "window_end"
	out := &pipeline.Table{ID: o.opts.Output, Generation: t.Generation, Columns: []pipeline.Column{start, end}}
	for _, g := range o.opts.GroupBy {
		i := index(g)
		if i < 0 {
			return fail("group_by", fmt.Errorf("%s", eval.UnknownColumn(t, g)))
		}
		p.groups = append(p.groups, i)
		c := t.Columns[i]
		c.Key, c.Missing = true, nil
		out.Columns = append(out.Columns, c)
	}
	for _, a := range o.opts.Aggregates {
		if a.Func == CountRows {
			p.args = append(p.args, -1)
			col, _ := ResultColumn(a.Func, a.As, nil)
			out.Columns = append(out.Columns, col)
			continue
		}
		i := index(a.Column)
		if i < 0 {
			return fail("aggregates", fmt.Errorf("%s", eval.UnknownColumn(t, a.Column)))
		}
		p.args = append(p.args, i)
		col, err := ResultColumn(a.Func, a.As, &t.Columns[i])
		if err != nil {
			return fail("aggregates", fmt.Errorf("%s(%s): %w", a.Func, a.Column, err))
		}
		out.Columns = append(out.Columns, col)
	}
	if o.opts.Early > 0 {
		out.Columns = append(out.Columns, pipeline.Column{Name: PartialColumn, Type: pipeline.TypeBool, Scale: -1, SourceType: "boolean"})
	}
	if o.opts.Late == LateCorrect && !t.FullBefore {
		return fail("late", fmt.Errorf("late: correct retracts a row the window no longer holds using its update's or delete's before image, and %s's carry only the key: run ALTER TABLE %s REPLICA IDENTITY FULL (or choose late: side_output)", t.ID, t.ID))
	}
	if o.opts.Late != LateDrop && o.opts.SideOutput != "" {
		var err error
		if p.late, err = o.lateShape(t); err != nil {
			return fail("side_output", err)
		}
	}
	for i := 0; i < 2+len(o.opts.GroupBy); i++ {
		out.KeyIdx = append(out.KeyIdx, i)
	}
	if o.out == nil || !pipeline.SameColumns(o.out, out) {
		o.out, o.outDirty = out, true
	}
	return p, nil
}

// ResultColumn is the column of aggregate f named name over input column
// in (nil for count()), typed as the table above says; an error when f
// cannot take in's type (a sum of text).
func ResultColumn(f Func, name string, in *pipeline.Column) (pipeline.Column, error) {
	col := pipeline.Column{Name: name, Nullable: true, Scale: -1}
	switch f {
	case CountRows, Count, CountDistinct:
		col.Type, col.Nullable = pipeline.TypeInt64, false
	case Sum, Avg:
		switch in.Type {
		case pipeline.TypeInt16, pipeline.TypeInt32, pipeline.TypeInt64, pipeline.TypeUint8, pipeline.TypeUint16,
			pipeline.TypeUint32, pipeline.TypeUint64:
			col.Type, col.Precision, col.Scale = pipeline.TypeDecimal, 38, 0
		case pipeline.TypeFloat32, pipeline.TypeFloat64:
			col.Type = pipeline.TypeFloat64
		case pipeline.TypeDecimal:
			col.Type = pipeline.TypeDecimal
			if in.Scale >= 0 {
				col.Precision, col.Scale = 38, in.Scale
			}
		default:
			return col, fmt.Errorf("column %s is %s, not a number", in.Name, in.Type)
		}
		if f == Avg && col.Type == pipeline.TypeDecimal {
			col.Precision, col.Scale = 0, -1
		}
	default: // min, max, first, last
		col = *in
		col.Name, col.Key, col.Nullable, col.Missing = name, false, true, nil
	}
	return col, nil
}

var keyShape = []byte("shape")

// shapeChanges stores the results' shape when it changed, so a restarted
// window can emit before a change of the input arrives.
func (o *Operator) shapeChanges(cs *changeSet) error {
	if !o.outDirty || o.out == nil {
		return nil
	}
	b, err := binform.AppendShape(nil, o.out)
	if err != nil {
		return err
	}
	o.outDirty = false
	cs.put(bucketMeta, keyShape, b)
	return nil
}

// loadShape reads the results' shape Process stored.
func (o *Operator) loadShape(tx *bbolt.Tx) error {
	m := tx.Bucket(bucketMeta)
	if m == nil {
		return nil
	}
	v := m.Get(keyShape)
	if v == nil {
		return nil
	}
	t, err := binform.ReadShape(binform.NewReader(v), o.opts.Output)
	if err != nil {
		return fmt.Errorf("results' shape: %w", err)
	}
	o.out = t
	return nil
}

// record is an emission as a record of the results' table: derived from
// the changes it stems from (Origin), its version ordering the window's
// results (Emission).
func (o *Operator) record(e Emission) pipeline.Record {
	img := make([]any, len(o.out.Columns))
	img[0], img[1] = pipeline.Timestamp{Micros: e.Window.Start}, pipeline.Timestamp{Micros: e.Window.End}
	copy(img[2:], e.Group)
	if o.opts.Early > 0 {
		img[len(img)-1] = e.Partial
	}
	r := pipeline.Record{Table: o.out, Version: e.Version, Origin: e.Origin, EventTime: time.UnixMicro(e.Window.End).UTC()}
	switch {
	case e.Delete:
		r.Op, r.Before = pipeline.OpDelete, img
	default:
		copy(img[2+len(e.Group):], e.Values)
		r.Op, r.After = pipeline.OpInsert, img
		if e.Update {
			r.Op = pipeline.OpUpdate
		}
	}
	return r
}

// eventTime reads an event time column's value as Unix microseconds: a
// timestamp's instant (a timestamp without zone as UTC), a date's
// midnight UTC, a number as seconds since 1970.
func eventTime(v any) (int64, error) {
	switch x := v.(type) {
	case pipeline.Timestamp:
		if x.Special != pipeline.Finite {
			return 0, fmt.Errorf("the event time is %s", x.Special)
		}
		return x.Micros, nil
	case pipeline.Date:
		if x.Special != pipeline.Finite {
			return 0, fmt.Errorf("the event time is %s", x.Special)
		}
		return int64(x.Days) * 86400e6, nil
	case int64:
		return x * 1e6, nil
	case uint64:
		return int64(x) * 1e6, nil
	case float64:
		return int64(x * 1e6), nil
	case pipeline.Decimal:
		d, err := eval.ToAPD(x)
		if err != nil || !x.IsFinite() {
			return 0, fmt.Errorf("the event time %s is not a number of seconds", x)
		}
		d.Exponent += 6 // seconds → microseconds
		var us apd.Decimal
		if _, err := apd.BaseContext.WithPrecision(1000).Quantize(&us, d, 0); err != nil {
			return 0, fmt.Errorf("the event time %s: %w", x, err)
		}
		n, err := us.Int64()
		if err != nil {
			return 0, fmt.Errorf("the event time %s is out of range", x)
		}
		return n, nil
	case nil:
		return 0, fmt.Errorf("the event time is NULL")
	}
	return 0, fmt.Errorf("the event time is a %T", v)
}
