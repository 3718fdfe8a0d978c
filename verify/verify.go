package verify

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/sluice-cdc/sluice/pipeline"
)

// Source reads a captured database.
type Source interface {
	// Tables lists the captured tables.
	Tables() []pipeline.TableID
	// Rows returns the table's current shape and every current row,
	// decoded exactly as the source decodes changes. It blocks until
	// the read is done and honours ctx.
	Rows(ctx context.Context, id pipeline.TableID) (*pipeline.Table, [][]any, error)
	// Now returns the source's current log position: once the pipeline's
	// checkpoint covers it, every change committed before Now is durable
	// in every sink.
	Now(ctx context.Context) (Mark, error)
}

// Mark is a source position taken by Source.Now.
type Mark interface {
	// CoveredBy reports whether a checkpoint at position cp includes
	// everything before the mark.
	CoveredBy(cp pipeline.Position) (bool, error)
	String() string
}

// Sink reads what a sink holds.
type Sink interface {
	// Rows returns the live rows the sink holds for table (a source
	// shape, routed), aligned with table.Columns.
	Rows(ctx context.Context, table *pipeline.Table) ([][]any, error)
}

// NamedSink is a sink with its name and the route the pipeline gives it.
type NamedSink struct {
	Name  string
	Sink  Sink
	Route *pipeline.Route // nil: every table, every column
	// Err, when set, is why the sink cannot be read (it is reported as
	// not compared).
	Err error
}

// Options tune Run.
type Options struct {
	// Tables limits the comparison to these tables ("schema.table");
	// empty: every captured table.
	Tables []string
	// Checkpoint returns the pipeline's current checkpoint position (nil
	// when none): when set, differences of the first pass are rechecked
	// once it covers the source position taken after that pass.
	Checkpoint func(ctx context.Context) (pipeline.Position, error)
	// Settle bounds each wait for the checkpoint (default 2m).
	Settle time.Duration
	// Rechecks is how many rounds of rechecks a difference must survive
	// to be reported (default 3).
	Rechecks int
	// Progress is called after each table and sink compared.
	Progress func(done, total int, r Result)
	// MaxDiffs caps the differences kept per table and sink (default 50;
	// all are counted).
	MaxDiffs int
}

// Result is the comparison of one table with one sink.
type Result struct {
	Table      string `json:"table"`
	Sink       string `json:"sink"`
	SourceRows int    `json:"source_rows"`
	SinkRows   int    `json:"sink_rows"`
	// Differing counts the keys that differ; Diffs lists the first of
	// them.
	Differing int    `json:"differing"`
	Diffs     []Diff `json:"diffs,omitempty"`
	// Rechecked is set when the first pass differed and the keys were
	// compared again after the checkpoint caught up.
	Rechecked bool `json:"rechecked,omitempty"`
	// Unconfirmed is why the differences could not be rechecked (the
	// pipeline's checkpoint did not catch up): they may include changes
	// still on their way.
	Unconfirmed string `json:"unconfirmed,omitempty"`
	// Error is why the table could not be compared with the sink.
	Error string `json:"error,omitempty"`
}

// Diff is one differing key.
type Diff struct {
	Key string `json:"key"`
	// Kind is "missing" (in the source, not the sink), "unexpected" (in
	// the sink, not the source) or "values".
	Kind    string       `json:"kind"`
	Columns []ColumnDiff `json:"columns,omitempty"`
}

// ColumnDiff is one column's two values, in canonical form.
type ColumnDiff struct {
	Column string `json:"column"`
	Source string `json:"source"`
	Sink   string `json:"sink"`
}

// Report is every comparison of a run.
type Report struct {
	Results []Result `json:"results"`
}

// Outcome is 0 when every comparison was equal, 1 when some differ, 2
// when some could not be made (the exit codes of `sluice verify`).
func (r Report) Outcome() int {
	code := 0
	for _, x := range r.Results {
		switch {
		case x.Error != "":
			return 2
		case x.Differing > 0:
			code = 1
		}
	}
	if len(r.Results) == 0 {
		return 2
	}
	return code
}

type job struct {
	id   pipeline.TableID
	sink NamedSink
}

// Run compares every captured table (or opts.Tables) with every sink that
// receives it.
func Run(ctx context.Context, src Source, sinks []NamedSink, opts Options) (Report, error) {
	if opts.Settle <= 0 {
		opts.Settle = 2 * time.Minute
	}
	if opts.MaxDiffs <= 0 {
		opts.MaxDiffs = 50
	}
	if opts.Rechecks <= 0 {
		opts.Rechecks = 3
	}
	want := map[string]bool{}
	for _, t := range opts.Tables {
		want[t] = true
	}
	var rep Report
	var ids []pipeline.TableID
	for _, id := range src.Tables() {
		if len(want) == 0 || want[id.Schema+"."+id.Table] {
			ids = append(ids, id)
		}
	}
	done, total := 0, len(ids)*len(sinks)
	for _, id := range ids {
		// The first pass of every sink compares with one read of the
		// source; rechecks read both sides again.
		var first *sourceRead
		read := func() (*sourceRead, error) {
			if first == nil {
				table, rows, err := src.Rows(ctx, id)
				if err != nil {
					return nil, err
				}
				first = &sourceRead{table, rows}
			}
			return first, nil
		}
		for _, s := range sinks {
			r, routed := compareOne(ctx, src, job{id: id, sink: s}, read, opts)
			if ctx.Err() != nil {
				return rep, ctx.Err()
			}
			done++
			if !routed {
				continue // the sink does not receive this table
			}
			rep.Results = append(rep.Results, r)
			if opts.Progress != nil {
				opts.Progress(done, total, r)
			}
		}
	}
	return rep, nil
}

// sourceRead is one read of a table from the source.
type sourceRead struct {
	table *pipeline.Table
	rows  [][]any
}

func compareOne(ctx context.Context, src Source, j job, read func() (*sourceRead, error), opts Options) (Result, bool) {
	r := Result{Table: j.id.Schema + "." + j.id.Table, Sink: j.sink.Name}
	if j.sink.Err != nil {
		r.Error = j.sink.Err.Error()
		return r, true
	}
	first, err := pass(ctx, j, read)
	if errors.Is(err, errNotRouted) {
		return r, false
	}
	if err != nil {
		r.Error = err.Error()
		return r, true
	}
	for round := 0; round < opts.Rechecks && len(first.diffs) > 0 && opts.Checkpoint != nil; round++ {
		// The differences may be changes still on their way: wait until
		// the checkpoint covers a position taken now, then keep only the
		// keys that still differ. A key rewritten again meanwhile may be
		// in flight once more, so a key is reported only when it differs
		// in every round.
		if err := settle(ctx, src, opts); err != nil {
			if ctx.Err() != nil {
				r.Error = err.Error()
				return r, true
			}
			// The pipeline is stopped or stuck: the differences stand as
			// found, with the reason they could not be rechecked.
			r.Unconfirmed = err.Error()
			break
		}
		again, err := pass(ctx, j, func() (*sourceRead, error) {
			table, rows, err := src.Rows(ctx, j.id)
			return &sourceRead{table, rows}, err
		})
		if err != nil {
			r.Error = err.Error()
			return r, true
		}
		still := map[string]Diff{}
		for k, d := range again.diffs {
			if _, ok := first.diffs[k]; ok {
				still[k] = d
			}
		}
		first.diffs, first.source, first.sink = still, again.source, again.sink
		r.Rechecked = true
	}
	r.SourceRows, r.SinkRows, r.Differing = first.source, first.sink, len(first.diffs)
	keys := make([]string, 0, len(first.diffs))
	for k := range first.diffs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys[:min(len(keys), opts.MaxDiffs)] {
		r.Diffs = append(r.Diffs, first.diffs[k])
	}
	return r, true
}

var errNotRouted = errors.New("not routed to this sink")

type passResult struct {
	source, sink int
	diffs        map[string]Diff
}

// pass compares the table as read reads it from the source with what the
// sink holds now.
func pass(ctx context.Context, j job, read func() (*sourceRead, error)) (passResult, error) {
	sr, err := read()
	if err != nil {
		return passResult{}, fmt.Errorf("source: %w", err)
	}
	table, rows := sr.table, sr.rows
	routed := j.sink.Route.Shape(table)
	if routed == nil {
		return passResult{}, errNotRouted
	}
	want := map[string][]any{}
	for _, rec := range j.sink.Route.Apply(readRecords(table, rows)) {
		want[RowKey(routed, rec.After)] = rec.After
	}
	held, err := j.sink.Sink.Rows(ctx, routed)
	if err != nil {
		return passResult{}, fmt.Errorf("sink %s: %w", j.sink.Name, err)
	}
	got := make(map[string][]any, len(held))
	for _, row := range held {
		got[RowKey(routed, row)] = row
	}
	return passResult{source: len(want), sink: len(got), diffs: Compare(routed, want, got)}, nil
}

func readRecords(table *pipeline.Table, rows [][]any) []pipeline.Record {
	out := make([]pipeline.Record, len(rows))
	for i, row := range rows {
		out[i] = pipeline.Record{Op: pipeline.OpRead, Table: table, After: row}
	}
	return out
}

// Compare returns the differing keys of two row sets keyed by RowKey.
func Compare(table *pipeline.Table, want, got map[string][]any) map[string]Diff {
	out := map[string]Diff{}
	for k, w := range want {
		g, ok := got[k]
		if !ok {
			out[k] = Diff{Key: k, Kind: "missing"}
			continue
		}
		var cols []ColumnDiff
		for i := range w {
			var gv any
			if i < len(g) {
				gv = g[i]
			}
			if cw, cg := Canon(w[i]), Canon(gv); cw != cg {
				cols = append(cols, ColumnDiff{Column: table.Columns[i].Name, Source: cw, Sink: cg})
			}
		}
		if len(cols) > 0 {
			out[k] = Diff{Key: k, Kind: "values", Columns: cols}
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			out[k] = Diff{Key: k, Kind: "unexpected"}
		}
	}
	return out
}

// settle waits until the pipeline's checkpoint covers the source's
// position now.
func settle(ctx context.Context, src Source, opts Options) error {
	mark, err := src.Now(ctx)
	if err != nil {
		return fmt.Errorf("source position: %w", err)
	}
	deadline := time.Now().Add(opts.Settle)
	for {
		cp, err := opts.Checkpoint(ctx)
		if err != nil {
			return fmt.Errorf("checkpoint: %w", err)
		}
		if cp != nil {
			ok, err := mark.CoveredBy(cp)
			if err != nil {
				return fmt.Errorf("checkpoint: %w", err)
			}
			if ok {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the pipeline's checkpoint did not reach the source position %s within %s (is the pipeline running?)", mark, opts.Settle)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// ErrNotSupported marks a sink kind verify cannot read yet.
var ErrNotSupported = errors.New("verify cannot read this sink kind yet")
