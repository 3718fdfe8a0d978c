package window

import (
	"fmt"
	"slices"

	"github.com/sluice-cdc/sluice/pipeline"
)

// The side output's table, <Output>_late: the input's columns, then
//
//	window_start, window_end   timestamptz, the window the change was
//	                           too late for
//	late_by_ms                 int64, how far the watermark was past the
//	                           window's end when the change came
//
// keyed by the input's key and window_start (a change too late for
// several hopping windows is a row for each). A row's version is the
// change's, so a replay writes the same row again.

// LateTable is the side output's table of a window writing to output.
func LateTable(output pipeline.TableID) pipeline.TableID {
	return pipeline.TableID{Schema: output.Schema, Table: output.Table + "_late"}
}

// lateColumns are the side output's columns after the input's.
var lateColumns = []string{"window_start", "window_end", "late_by_ms"}

// lateShape is the side output's shape for input shape t.
func (o *Operator) lateShape(t *pipeline.Table) (*pipeline.Table, error) {
	out := &pipeline.Table{ID: LateTable(o.opts.Output), Generation: t.Generation, Columns: slices.Clone(t.Columns), KeyIdx: slices.Clone(t.KeyIdx)}
	for i := range out.Columns {
		if slices.Contains(lateColumns, out.Columns[i].Name) {
			return nil, fmt.Errorf("the side output adds a column %s, which %s has already; rename it (transforms: rename) before the window", out.Columns[i].Name, t.ID)
		}
		out.Columns[i].Missing = nil
	}
	ts := pipeline.Column{Type: pipeline.TypeTimestampTZ, SourceType: "timestamptz", Scale: -1}
	start, end := ts, ts
	start.Name, start.Key, end.Name = "window_start", true, "window_end"
	by := pipeline.Column{Name: "late_by_ms", Type: pipeline.TypeInt64, SourceType: "bigint", Scale: -1}
	out.KeyIdx = append(out.KeyIdx, len(out.Columns))
	out.Columns = append(out.Columns, start, end, by)
	return out, nil
}

// sideOutput queues change r, too late for late's windows, for the side
// output's sink: a row per window, sent to that sink only. p.late is set
// (plan).
func (o *Operator) sideOutput(r *pipeline.Record, p *plan, late *Late) error {
	dest := &pipeline.Dest{To: []string{o.opts.SideOutput}}
	for _, w := range late.Windows {
		img := make([]any, 0, len(r.After)+3)
		img = append(img, r.After...)
		img = append(img, pipeline.Timestamp{Micros: w.Start}, pipeline.Timestamp{Micros: w.End}, max(o.eng.Watermark()-w.End, 0)/1000)
		o.side = append(o.side, pipeline.Record{Op: pipeline.OpInsert, Table: p.late, After: img, Version: r.Version,
			EventTime: r.EventTime, Dest: dest})
	}
	return nil
}
