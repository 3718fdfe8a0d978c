package verify

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"maps"
	"sort"
	"time"

	"github.com/sluice-cdc/sluice/pipeline"
)

// Source reads a captured database.
type Source interface {
	// Tables lists the captured tables.
	Tables() []pipeline.TableID
	// Scan reads the table's current shape, calls shape with it once, then
	// calls row for every current row, decoded exactly as the source
	// decodes changes, in no particular order; row owns the slice it gets.
	// It streams (its memory does not grow with the table), blocks until
	// the read is done, returns the first error of a callback, and
	// honours ctx.
	Scan(ctx context.Context, id pipeline.TableID, shape func(*pipeline.Table) error, row func([]any) error) error
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

// Scanner is a Sink that streams its rows: Run prefers Scan to Rows, so
// its memory does not grow with the table.
type Scanner interface {
	// Scan calls row for every live row the sink holds for table, as Rows
	// returns them, in no particular order; row owns the slice it gets.
	// It blocks until the read is done, returns the first error of row,
	// and honours ctx.
	Scan(ctx context.Context, table *pipeline.Table, row func([]any) error) error
}

// NamedSink is a sink with its name and the route the pipeline gives it.
type NamedSink struct {
	Name  string
	Sink  Sink
	Route *pipeline.Route // nil: every table, every column
	// Transform is the pipeline's record transforms; nil: none.
	Transform Transform
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
	// Buckets is how many buckets each pass sums rows into (default
	// 4096): a difference costs a second pass holding the rows of its
	// bucket, about rows/Buckets of them.
	Buckets int
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
	// Narrowed counts the rows (source and sink) held and compared key by
	// key because their bucket differed; the rest were compared by bucket
	// sums only.
	Narrowed int `json:"narrowed_rows,omitempty"`
	// Rechecked is set when the first pass differed and the keys were
	// compared again after the checkpoint caught up.
	Rechecked bool `json:"rechecked,omitempty"`
	// Unconfirmed is why the differences could not be rechecked (the
	// pipeline's checkpoint did not catch up): they may include changes
	// still on their way.
	Unconfirmed string `json:"unconfirmed,omitempty"`
	// Error is why the table could not be compared with the sink.
	Error string `json:"error,omitempty"`
	// Keys are every differing key's values (Shape's key columns, in
	// the record model's types), for a repair; Shape is the table as
	// the sink mirrors it.
	Keys  [][]any         `json:"-"`
	Shape *pipeline.Table `json:"-"`
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

// Run compares every captured table (or opts.Tables) with every sink that
// receives it.
//
// Each comparison streams: one pass over the source (shared by every
// sink) and one over each sink sum the rows into Buckets buckets by key
// (a row count and a sum of row hashes over canonical forms), so memory
// does not grow with the table. Only when buckets differ does a second
// pass hold the rows of those buckets, on both sides, and compare them
// key by key. Differences are rechecked after the checkpoint catches up
// by reading only the differing keys (KeySource and KeyReader), or the
// differing buckets again where a side cannot read by key.
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
	if opts.Buckets <= 0 {
		opts.Buckets = 4096
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
		results, err := compareTable(ctx, src, id, sinks, opts)
		if ctx.Err() != nil {
			return rep, ctx.Err()
		}
		for _, r := range results {
			done++
			if r == nil {
				continue // the sink does not receive this table
			}
			if err != nil && r.Error == "" {
				r.Error = err.Error()
			}
			rep.Results = append(rep.Results, *r)
			if opts.Progress != nil {
				opts.Progress(done, total, *r)
			}
		}
	}
	return rep, nil
}

// side is one sink's comparison of a table in progress.
type side struct {
	sink   NamedSink
	routed *pipeline.Table
	src    summary // the source's rows, routed to this sink
	res    *Result
}

// compareTable compares one table with every sink; a nil result means
// the sink does not receive the table. The error is the source's: every
// sink's result carries it.
func compareTable(ctx context.Context, src Source, id pipeline.TableID, sinks []NamedSink, opts Options) ([]*Result, error) {
	name := id.Schema + "." + id.Table
	sides := make([]*side, len(sinks))
	results := make([]*Result, len(sinks))
	for i, s := range sinks {
		results[i] = &Result{Table: name, Sink: s.Name}
		if s.Err != nil {
			results[i].Error = s.Err.Error()
			continue
		}
		sides[i] = &side{sink: s, res: results[i], src: newSummary(opts.Buckets)}
	}
	// One source pass sums the rows for every sink.
	var table *pipeline.Table
	err := src.Scan(ctx, id, func(t *pipeline.Table) error {
		table = t
		for i, sd := range sides {
			if sd == nil {
				continue
			}
			if sd.routed = sd.sink.shape(t); sd.routed == nil {
				sides[i], results[i] = nil, nil
			}
		}
		return nil
	}, func(row []any) error {
		for _, sd := range sides {
			if sd != nil {
				if r := sd.sink.row(table, row); r != nil {
					sd.src.add(sd.routed, r)
				}
			}
		}
		return nil
	})
	if err != nil {
		return results, fmt.Errorf("source: %w", err)
	}
	for _, sd := range sides {
		if sd == nil {
			continue
		}
		if err := compareSide(ctx, src, table, sd, opts); err != nil {
			sd.res.Error = err.Error()
		}
	}
	return results, nil
}

// compareSide sums the sink's rows, narrows to the differing buckets and
// rechecks what differs there.
func compareSide(ctx context.Context, src Source, table *pipeline.Table, sd *side, opts Options) error {
	held := newSummary(opts.Buckets)
	if err := scanSink(ctx, sd.sink, sd.routed, func(row []any) error {
		held.add(sd.routed, row)
		return nil
	}); err != nil {
		return fmt.Errorf("sink %s: %w", sd.sink.Name, err)
	}
	sd.res.SourceRows, sd.res.SinkRows = sd.src.rows, held.rows
	buckets := sd.src.differing(held)
	if len(buckets) == 0 {
		return nil
	}
	diffs, err := narrow(ctx, src, table, sd, buckets, held)
	if err != nil {
		return err
	}
	for round := 0; round < opts.Rechecks && len(diffs.diffs) > 0 && opts.Checkpoint != nil; round++ {
		// The differences may be changes still on their way: wait until
		// the checkpoint covers a position taken now, then keep only the
		// keys that still differ. A key rewritten again meanwhile may be
		// in flight once more, so a key is reported only when it differs
		// in every round.
		if err := settle(ctx, src, opts); err != nil {
			if ctx.Err() != nil {
				return err
			}
			// The pipeline is stopped or stuck: the differences stand as
			// found, with the reason they could not be rechecked.
			sd.res.Unconfirmed = err.Error()
			break
		}
		again, err := recheck(ctx, src, table, sd, diffs, held)
		if err != nil {
			return err
		}
		for k := range diffs.diffs {
			if d, ok := again[k]; ok {
				diffs.diffs[k] = d
			} else {
				delete(diffs.diffs, k)
				delete(diffs.keys, k)
			}
		}
		sd.res.Rechecked = true
	}
	sd.res.Differing = len(diffs.diffs)
	sd.res.Shape = sd.routed
	keys := make([]string, 0, len(diffs.diffs))
	for k := range diffs.diffs {
		keys = append(keys, k)
		sd.res.Keys = append(sd.res.Keys, diffs.keys[k])
	}
	sort.Strings(keys)
	for _, k := range keys[:min(len(keys), opts.MaxDiffs)] {
		sd.res.Diffs = append(sd.res.Diffs, diffs.diffs[k])
	}
	return nil
}

// found is the differing keys of one comparison and their key values.
type found struct {
	diffs map[string]Diff
	keys  map[string][]any
}

// narrow reads the rows of the differing buckets on both sides and
// compares them key by key.
func narrow(ctx context.Context, src Source, table *pipeline.Table, sd *side, buckets map[int]bool, held summary) (found, error) {
	want, got := map[string][]any{}, map[string][]any{}
	err := src.Scan(ctx, table.ID, func(t *pipeline.Table) error {
		table = t
		sd.routed = sd.sink.shape(t)
		if sd.routed == nil {
			return fmt.Errorf("the table is no longer routed to sink %s", sd.sink.Name)
		}
		return nil
	}, func(row []any) error {
		if r := sd.sink.row(table, row); r != nil {
			if k := RowKey(sd.routed, r); buckets[held.bucket(k)] {
				want[k] = r
			}
		}
		return nil
	})
	if err != nil {
		return found{}, fmt.Errorf("source: %w", err)
	}
	if err := scanSink(ctx, sd.sink, sd.routed, func(row []any) error {
		if k := RowKey(sd.routed, row); buckets[held.bucket(k)] {
			got[k] = row
		}
		return nil
	}); err != nil {
		return found{}, fmt.Errorf("sink %s: %w", sd.sink.Name, err)
	}
	sd.res.Narrowed += len(want) + len(got)
	f := found{diffs: Compare(sd.routed, want, got), keys: map[string][]any{}}
	for k := range f.diffs {
		row := want[k]
		if row == nil {
			row = got[k]
		}
		f.keys[k] = keyValues(sd.routed, row)
	}
	return f, nil
}

// recheck compares the differing keys again: by key where both sides can
// read by key, else by their buckets.
func recheck(ctx context.Context, src Source, table *pipeline.Table, sd *side, f found, held summary) (map[string]Diff, error) {
	ks, okSrc := src.(KeySource)
	kr, okSink := sd.sink.Sink.(KeyReader)
	if !okSrc || !okSink {
		buckets := map[int]bool{}
		for k := range f.diffs {
			buckets[held.bucket(k)] = true
		}
		again, err := narrow(ctx, src, table, sd, buckets, held)
		return again.diffs, err
	}
	keys := make([][]any, 0, len(f.keys))
	for _, k := range f.keys {
		keys = append(keys, k)
	}
	out := map[string]Diff{}
	for from := 0; from < len(keys); from += keyChunk {
		chunk := keys[from:min(from+keyChunk, len(keys))]
		t, rows, _, err := ks.KeyRows(ctx, table.ID, chunk)
		if err != nil {
			return nil, fmt.Errorf("source: %w", err)
		}
		routed := sd.sink.shape(t)
		if routed == nil {
			return nil, fmt.Errorf("the table is no longer routed to sink %s", sd.sink.Name)
		}
		want, got := map[string][]any{}, map[string][]any{}
		for _, r := range sd.sink.rows(t, rows) {
			want[RowKey(routed, r)] = r
		}
		held, err := kr.RowsByKey(ctx, routed, chunk)
		if err != nil {
			return nil, fmt.Errorf("sink %s: %w", sd.sink.Name, err)
		}
		for _, row := range held {
			got[RowKey(routed, row)] = row
		}
		maps.Copy(out, Compare(routed, want, got))
	}
	return out, nil
}

// keyChunk is how many keys one keyed read asks for.
const keyChunk = 500

// scanSink streams the sink's rows of table: Scan where the sink can,
// else its Rows.
func scanSink(ctx context.Context, s NamedSink, table *pipeline.Table, row func([]any) error) error {
	if sc, ok := s.Sink.(Scanner); ok {
		return sc.Scan(ctx, table, row)
	}
	rows, err := s.Sink.Rows(ctx, table)
	if err != nil {
		return err
	}
	for _, r := range rows {
		if err := row(r); err != nil {
			return err
		}
	}
	return nil
}

func keyValues(table *pipeline.Table, row []any) []any {
	k := make([]any, len(table.KeyIdx))
	for i, idx := range table.KeyIdx {
		k[i] = row[idx]
	}
	return k
}

// summary is a table's rows summed into buckets by key: a count and a
// sum of row hashes per bucket, whatever order the rows come in.
type summary struct {
	rows  int
	count []int64
	sum   []uint64
	seed  maphash.Seed
}

// summarySeed is shared by every summary of a run, so buckets match.
var summarySeed = maphash.MakeSeed()

func newSummary(buckets int) summary {
	return summary{count: make([]int64, buckets), sum: make([]uint64, buckets), seed: summarySeed}
}

// bucket is the bucket of a key (its RowKey).
func (s summary) bucket(key string) int {
	return int(maphash.String(s.seed, key) % uint64(len(s.count)))
}

// add sums a row (aligned with table.Columns) into its bucket.
func (s *summary) add(table *pipeline.Table, row []any) {
	if row == nil {
		return
	}
	key := RowKey(table, row)
	var h maphash.Hash
	h.SetSeed(s.seed)
	for _, v := range row {
		h.WriteString(Canon(v))
		h.WriteByte(0)
	}
	b := s.bucket(key)
	s.rows++
	s.count[b]++
	s.sum[b] += h.Sum64()
}

// differing returns the buckets whose count or sum differ.
func (s summary) differing(o summary) map[int]bool {
	out := map[int]bool{}
	for i := range s.count {
		if s.count[i] != o.count[i] || s.sum[i] != o.sum[i] {
			out[i] = true
		}
	}
	return out
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
