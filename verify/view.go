package verify

import "github.com/sluice-cdc/sluice/pipeline"

// Transform is what the pipeline's record transforms (filter, project,
// rename, cast, compute, mask, route) make of the source's rows: verify
// compares a sink with the source's rows as they leave the transforms,
// not as the source holds them.
type Transform interface {
	// Shape returns the shape records of t leave the transforms with; an
	// error means they are all rejected (none reach a sink).
	Shape(t *pipeline.Table) (*pipeline.Table, error)
	// Records transforms records as the pipeline's operators do; records
	// the operators reject are left out (they went to the dead-letter
	// queue). It may reuse recs.
	Records(recs []pipeline.Record) []pipeline.Record
}

// shape returns the shape sink s holds of source table t: the
// transforms', projected by the sink's route; nil when s does not
// receive the table.
func (s NamedSink) shape(t *pipeline.Table) *pipeline.Table {
	if s.Transform != nil {
		out, err := s.Transform.Shape(t)
		if err != nil || out == nil {
			return nil
		}
		t = out
	}
	return s.Route.Shape(t)
}

// rows returns what sink s holds of source rows of table t: each row
// through the transforms (those they drop or send to other sinks left
// out), projected by the sink's route.
func (s NamedSink) rows(t *pipeline.Table, rows [][]any) [][]any {
	recs := readRecords(t, rows)
	if s.Transform != nil {
		recs = s.Transform.Records(recs)
	}
	recs = s.Route.Apply(pipeline.ForSink(s.Name, recs))
	out := make([][]any, 0, len(recs))
	for _, r := range recs {
		if r.Op != pipeline.OpDelete && r.After != nil {
			out = append(out, r.After)
		}
	}
	return out
}

// row is rows for one row: nil when s does not hold it.
func (s NamedSink) row(t *pipeline.Table, row []any) []any {
	if s.Transform == nil && s.Route == nil {
		return row
	}
	if out := s.rows(t, [][]any{row}); len(out) > 0 {
		return out[0]
	}
	return nil
}
