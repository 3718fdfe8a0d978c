package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"go.uber.org/zap"

	"github.com/sluice-cdc/sluice/config"
	"github.com/sluice-cdc/sluice/obs"
	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/sources/generate"
	"github.com/sluice-cdc/sluice/sources/mysql"
	"github.com/sluice-cdc/sluice/transform/aggregate"
	"github.com/sluice-cdc/sluice/transform/compute"
	"github.com/sluice-cdc/sluice/transform/dedup"
	"github.com/sluice-cdc/sluice/transform/eval"
	"github.com/sluice-cdc/sluice/transform/filter"
	"github.com/sluice-cdc/sluice/transform/join"
	"github.com/sluice-cdc/sluice/transform/mask"
	"github.com/sluice-cdc/sluice/transform/reshape"
	"github.com/sluice-cdc/sluice/transform/route"
	"github.com/sluice-cdc/sluice/transform/scope"
	"github.com/sluice-cdc/sluice/transform/window"
	"github.com/sluice-cdc/sluice/verify"
)

// buildTransforms opens the configured transforms in order. With
// resetState, their state is removed first: a pipeline starting over
// with a fresh snapshot rebuilds it. The returned func closes them; call
// it even on error.
func buildTransforms(cfg *config.Config, src pipeline.Source, resetState bool, windows window.Observer, metrics *obs.OperatorMetrics, log *zap.Logger) ([]pipeline.NamedOperator, func(), error) {
	var ops []pipeline.NamedOperator
	var closers []func() error
	closeAll := func() {
		for _, c := range closers {
			_ = c()
		}
	}
	for i := range cfg.Transforms {
		t := &cfg.Transforms[i]
		if w := t.Window; w != nil {
			if resetState {
				if err := os.RemoveAll(w.StateDir); err != nil {
					return nil, closeAll, fmt.Errorf("reset window %s: %w", w.Output, err)
				}
			}
			op, err := openWindow(cfg, i, src, windows, metrics, log)
			if err != nil {
				return nil, closeAll, &pipeline.OpenError{What: "transform " + transformName(cfg, i), Err: err}
			}
			closers = append(closers, op.Close)
			ops = append(ops, pipeline.NamedOperator{Name: transformName(cfg, i), Operator: op})
			continue
		}
		if g := t.Aggregate; g != nil {
			if resetState {
				if err := os.RemoveAll(g.StateDir); err != nil {
					return nil, closeAll, fmt.Errorf("reset %s: %w", transformName(cfg, i), err)
				}
			}
			op, err := openAggregate(cfg, i, metrics, log)
			if err != nil {
				return nil, closeAll, &pipeline.OpenError{What: "transform " + transformName(cfg, i), Err: err}
			}
			closers = append(closers, op.Close)
			ops = append(ops, pipeline.NamedOperator{Name: transformName(cfg, i), Operator: op})
			continue
		}
		if dd := t.Dedup; dd != nil {
			if resetState {
				if err := os.RemoveAll(dd.StateDir); err != nil {
					return nil, closeAll, fmt.Errorf("reset %s: %w", transformName(cfg, i), err)
				}
			}
			op, err := openDedup(cfg, i, metrics, log)
			if err != nil {
				return nil, closeAll, &pipeline.OpenError{What: "transform " + transformName(cfg, i), Err: err}
			}
			closers = append(closers, op.Close)
			ops = append(ops, pipeline.NamedOperator{Name: transformName(cfg, i), Operator: op})
			continue
		}
		if t.Join == nil && t.Nest == nil {
			op, err := recordTransform(cfg, i)
			if err != nil {
				return nil, closeAll, &pipeline.OpenError{What: "transform " + transformName(cfg, i), Err: err}
			}
			ops = append(ops, pipeline.NamedOperator{Name: transformName(cfg, i), Operator: op})
			continue
		}
		opts := joinOptions(cfg, i, metrics, log)
		if resetState {
			if err := os.RemoveAll(opts.Dir); err != nil {
				return nil, closeAll, fmt.Errorf("reset %s %s: %w", t.Kind(), opts.Output, err)
			}
		}
		op, err := join.Open(opts)
		if err != nil {
			return nil, closeAll, &pipeline.OpenError{What: "transform " + t.Kind() + " " + opts.Output, Err: err}
		}
		closers = append(closers, op.Close)
		ops = append(ops, pipeline.NamedOperator{Name: t.Kind() + ":" + opts.Output, Operator: op})
	}
	return ops, closeAll, nil
}

// joinOptions configures join or nest transform i (one operator,
// transform/join).
func joinOptions(cfg *config.Config, i int, metrics *obs.OperatorMetrics, log *zap.Logger) join.Options {
	t := &cfg.Transforms[i]
	var opts join.Options
	var with []config.JoinLookup
	var maxBytes config.ByteSize
	if j := t.Join; j != nil {
		opts = join.Options{Output: j.Output, From: j.From, Dir: j.StateDir}
		with, maxBytes = j.With, j.MaxStateBytes
	} else {
		n := t.Nest
		opts = join.Options{Output: n.Output, From: n.Parent, Dir: n.StateDir}
		with, maxBytes = n.With, n.MaxStateBytes
		for k, c := range n.Children {
			overflow := join.OverflowTruncate
			if c.OnOverflow == "fail" {
				overflow = join.OverflowFail
			}
			opts.Children = append(opts.Children, join.Child{Table: c.Table, On: c.On, As: c.As, OrderBy: c.OrderBy, Columns: c.Columns,
				Max: c.MaxChildren, Overflow: overflow, MaxSetting: fmt.Sprintf("transforms[%d].nest.children[%d].max_children", i, k)})
		}
	}
	for _, l := range with {
		opts.With = append(opts.With, join.Lookup{Table: l.Table, On: l.On, As: l.As, Columns: l.Columns})
	}
	if cfg.Source.Kind() == "mysql" {
		opts.Covers = mysql.Covers // a replay on another server is known by its GTIDs
	}
	name := t.Kind() + ":" + opts.Output
	opts.Log = log.Named(t.Kind())
	opts.MaxStateBytes, opts.MaxStateSetting = int64(maxBytes), fmt.Sprintf("transforms[%d].%s.max_state_bytes", i, t.Kind())
	opts.StateSized = metrics.StateSized(name, int64(maxBytes))
	opts.Overflowed = metrics.Truncated(name)
	return opts
}

// openDedup opens dedup transform i.
func openDedup(cfg *config.Config, i int, metrics *obs.OperatorMetrics, log *zap.Logger) (*dedup.Dedup, error) {
	dd := cfg.Transforms[i].Dedup
	name := transformName(cfg, i)
	tables, err := scope.NewTables(dd.Tables)
	if err != nil {
		return nil, err
	}
	policy, err := scope.ParsePolicy(dd.OnError)
	if err != nil {
		return nil, err
	}
	return dedup.Open(dedup.Options{Name: name, Tables: tables, Key: dd.Key, TTL: dd.TTL.Std(), Policy: policy, Dir: dd.StateDir,
		MaxStateBytes: int64(dd.MaxStateBytes), MaxStateSetting: name + ".max_state_bytes",
		StateSized: metrics.StateSized(name, int64(dd.MaxStateBytes)), Dropped: metrics.Dropped(name), Log: log.Named("dedup")})
}

// transformName names transform i by its config path, e.g.
// "transforms[2].mask": in errors and the dead-letter queue's stage.
func transformName(cfg *config.Config, i int) string {
	return fmt.Sprintf("transforms[%d].%s", i, cfg.Transforms[i].Kind())
}

// recordTransform builds the stateless record transform i.
func recordTransform(cfg *config.Config, i int) (pipeline.Operator, error) {
	t := &cfg.Transforms[i]
	name := transformName(cfg, i)
	policy := func(s string) scope.Policy { p, _ := scope.ParsePolicy(s); return p }
	pats := func(p []string) (scope.Tables, error) { return scope.NewTables(p) }
	switch {
	case t.Filter != nil:
		tables, err := pats(t.Filter.Tables)
		if err != nil {
			return nil, err
		}
		return filter.New(name, tables, t.Filter.Where, policy(t.Filter.OnError)), nil
	case t.Project != nil:
		tables, err := pats(t.Project.Tables)
		if err != nil {
			return nil, err
		}
		return reshape.New(name, tables, policy(t.Project.OnError), reshape.Project(t.Project.Keep, t.Project.Drop)), nil
	case t.Rename != nil:
		tables, err := pats(t.Rename.Tables)
		if err != nil {
			return nil, err
		}
		var cols []reshape.ColumnRename
		for _, c := range t.Rename.Columns {
			cols = append(cols, reshape.ColumnRename{From: c.From, To: c.To})
		}
		return reshape.New(name, tables, policy(t.Rename.OnError), reshape.Rename(t.Rename.Table, cols)), nil
	case t.Cast != nil:
		tables, err := pats(t.Cast.Tables)
		if err != nil {
			return nil, err
		}
		var casts []reshape.ColumnCast
		for _, c := range t.Cast.Columns {
			casts = append(casts, reshape.ColumnCast{Column: c.Column, To: c.To})
		}
		return reshape.New(name, tables, policy(t.Cast.OnError), reshape.Cast(casts)), nil
	case t.Compute != nil:
		tables, err := pats(t.Compute.Tables)
		if err != nil {
			return nil, err
		}
		c := t.Compute
		return compute.New(name, tables, policy(c.OnError), compute.Options{Column: c.Column, Type: c.Type, Expr: c.Expr})
	case t.Mask != nil:
		tables, err := pats(t.Mask.Tables)
		if err != nil {
			return nil, err
		}
		m := t.Mask
		o := mask.Options{Columns: m.Columns, With: m.With, Value: m.Value, Last: m.Last}
		if m.SecretEnv != "" {
			key := os.Getenv(m.SecretEnv)
			obs.RegisterSecret(key)
			o.Secret = []byte(key)
		}
		return mask.New(name, tables, policy(m.OnError), o)
	case t.Route != nil:
		tables, err := pats(t.Route.Tables)
		if err != nil {
			return nil, err
		}
		o := route.Options{Otherwise: t.Route.Otherwise}
		for _, r := range t.Route.Rules {
			o.Rules = append(o.Rules, route.Rule{When: r.When, Sinks: r.Sinks, Topic: r.Topic})
		}
		for _, s := range cfg.Sinks {
			o.Sinks = append(o.Sinks, s.Name())
		}
		return route.New(name, tables, policy(t.Route.OnError), o)
	}
	return nil, fmt.Errorf("transforms[%d]: no kind set", i)
}

// shaper is an operator that maps a table's shape to the one its records
// leave with (the record transforms); an error is what the table's
// records would be rejected with.
type shaper interface {
	Shape(*pipeline.Table) (*pipeline.Table, error)
}

// errStopScan ends a scan once the shape is known.
var errStopScan = errors.New("shape read")

// checkTransforms checks the record transforms against the captured
// tables' shapes, read from the source, before anything is read: an
// unknown column, a type mismatch, a key column dropped or cast. The
// problems are config errors at their file:line:col (*config.Errors).
func checkTransforms(ctx context.Context, cfg *config.Config, ops []pipeline.NamedOperator) error {
	var chain []pipeline.NamedOperator
	for _, op := range ops {
		if _, ok := op.Operator.(shaper); ok {
			chain = append(chain, op)
		}
	}
	if len(chain) == 0 {
		return nil
	}
	shapes, err := sourceShapes(ctx, cfg)
	if err != nil {
		return &pipeline.OpenError{What: "source (reading the tables' shapes to check the transforms)", Err: err}
	}
	var errs config.Errors
	for _, t := range shapes {
		for _, op := range chain {
			out, err := op.Operator.(shaper).Shape(t)
			if err != nil {
				errs.List = append(errs.List, shapeError(cfg, op.Name, t.ID, err))
				break
			}
			t = out
		}
	}
	if len(errs.List) > 0 {
		return &errs
	}
	return nil
}

// shapeError places an operator's shape error in the config file.
func shapeError(cfg *config.Config, op string, table pipeline.TableID, err error) *config.Error {
	var fe *scope.FieldError
	if !errors.As(err, &fe) {
		return cfg.ErrorAt(op, fmt.Sprintf("table %s: %v", table, err), "")
	}
	path := op + "." + fe.Field
	var ee *eval.Error
	if errors.As(fe.Err, &ee) {
		return cfg.ExprErrorAt(path, ee.Line, ee.Col, fmt.Sprintf("table %s: %s", table, ee.Msg), "see the expression reference in the README")
	}
	return cfg.ErrorAt(path, fmt.Sprintf("table %s: %v", table, fe.Err), "")
}

// sourceShapes reads the captured tables' current shapes.
func sourceShapes(ctx context.Context, cfg *config.Config) ([]*pipeline.Table, error) {
	if g := cfg.Source.Generate; g != nil {
		return generate.Tables(generateOptions(g)), nil
	}
	src, err := verifySource(cfg)
	if err != nil {
		return nil, err
	}
	var out []*pipeline.Table
	for _, id := range src.Tables() {
		err := src.Scan(ctx, id, func(t *pipeline.Table) error {
			out = append(out, t)
			return errStopScan
		}, func([]any) error { return errStopScan })
		if err != nil && !errors.Is(err, errStopScan) {
			return nil, fmt.Errorf("table %s: %w", id, err)
		}
	}
	return out, nil
}

// chain is the record transforms of a config as a verify.Transform: a
// set of their own, so verification never shares an operator with the
// running pipeline. Joins, nests and windows are left out (they add tables of
// their own and pass the captured ones through). A dedup's tables are
// left out of the comparison (unverifiable): which rows it dropped is in
// its state, not in the source.
type chain []pipeline.NamedOperator

// recordChain builds the config's record transforms; nil when there are
// none.
func recordChain(cfg *config.Config) (verify.Transform, error) {
	var c chain
	for i := range cfg.Transforms {
		if t := &cfg.Transforms[i]; t.Join != nil || t.Nest != nil || t.Window != nil || t.Aggregate != nil {
			continue
		} else if t.Dedup != nil {
			tables, err := scope.NewTables(t.Dedup.Tables)
			if err != nil {
				return nil, err
			}
			c = append(c, pipeline.NamedOperator{Name: transformName(cfg, i), Operator: unverifiable{tables}})
			continue
		}
		op, err := recordTransform(cfg, i)
		if err != nil {
			return nil, err
		}
		c = append(c, pipeline.NamedOperator{Name: transformName(cfg, i), Operator: op})
	}
	if len(c) == 0 {
		return nil, nil
	}
	return c, nil
}

func (c chain) Shape(t *pipeline.Table) (*pipeline.Table, error) {
	for _, op := range c {
		var err error
		if t, err = op.Operator.(shaper).Shape(t); err != nil || t == nil {
			return nil, err // nil: no sink's rows of t are compared
		}
	}
	return t, nil
}

// unverifiable stands for a dedup in the verify chain: its tables reach
// no comparison (Shape gives nil), since the duplicates it dropped are
// rows of the source that its sinks lack; records pass untouched.
type unverifiable struct{ tables scope.Tables }

func (u unverifiable) Shape(t *pipeline.Table) (*pipeline.Table, error) {
	if u.tables.Match(t.ID) {
		return nil, nil
	}
	return t, nil
}

func (unverifiable) Process(_ context.Context, in []pipeline.Record) ([]pipeline.Record, error) {
	return in, nil
}

func (unverifiable) Snapshot() ([]byte, error) { return nil, nil }
func (unverifiable) Restore([]byte) error      { return nil }

func (c chain) Records(recs []pipeline.Record) []pipeline.Record {
	for _, op := range c {
		out, err := op.Operator.Process(context.Background(), recs)
		var rj *pipeline.Rejects
		if err != nil && !errors.As(err, &rj) {
			return nil // under on_error: fail the pipeline stops at it: nothing of it reached a sink
		}
		recs = out
	}
	return recs
}

// openAggregate opens aggregate transform i.
func openAggregate(cfg *config.Config, i int, metrics *obs.OperatorMetrics, log *zap.Logger) (*aggregate.Aggregate, error) {
	g := cfg.Transforms[i].Aggregate
	name := transformName(cfg, i)
	o := aggregate.Options{Name: name, Output: tableID(g.Output), Input: tableID(g.Table), GroupBy: g.GroupBy, Dir: g.StateDir,
		MaxStateBytes: int64(g.MaxStateBytes), MaxStateSetting: name + ".max_state_bytes", StateSized: metrics.StateSized(name, int64(g.MaxStateBytes)),
		Log: log.Named("aggregate")}
	for _, a := range g.Aggregates {
		as, fn, col, err := config.ParseAggregate(a)
		if err != nil {
			return nil, err
		}
		f, err := window.ParseFunc(fn, col)
		if err != nil {
			return nil, err
		}
		o.Aggregates = append(o.Aggregates, window.AggDef{As: as, Func: f, Column: col})
	}
	if cfg.Source.Kind() == "mysql" {
		o.Covers = mysql.Covers // a replay on another server is known by its GTIDs
	}
	return aggregate.Open(o)
}

// openWindow opens window transform i; its watermark holds while the
// source backfills the windowed table.
func openWindow(cfg *config.Config, i int, src pipeline.Source, windows window.Observer, metrics *obs.OperatorMetrics, log *zap.Logger) (*window.Operator, error) {
	w := cfg.Transforms[i].Window
	name := transformName(cfg, i)
	o := window.Options{
		Name: name, Output: tableID(w.Output), Input: tableID(w.Table), EventTime: w.EventTime,
		OutOfOrder: w.MaxOutOfOrderness.Std(), Lateness: w.AllowedLateness.Std(), IdleTimeout: w.IdleTimeout.Std(),
		GroupBy: w.GroupBy, Late: window.LatePolicy(w.Late), CorrectWithin: w.CorrectWithin.Std(), SideOutput: w.SideOutput, Dir: w.StateDir, Observer: windows, Log: log.Named("window"),
		MaxStateBytes: int64(w.MaxStateBytes), MaxStateSetting: name + ".max_state_bytes", StateSized: metrics.StateSized(name, int64(w.MaxStateBytes)),
	}
	if w.Emit == "early" {
		o.Early = w.EarlyInterval.Std()
	}
	if cfg.Source.Kind() == "mysql" {
		o.Covers = mysql.Covers // a replay on another server is known by its GTIDs
	}
	switch {
	case w.Hopping != nil:
		o.Spec = window.Spec{Size: w.Hopping.Size.Std(), Advance: w.Hopping.Advance.Std()}
	case w.Session != nil:
		o.Spec = window.Session(w.Session.Gap.Std())
	default:
		o.Spec = window.Tumbling(w.Tumbling.Std())
	}
	for _, a := range w.Aggregates {
		name, fn, col, err := config.ParseAggregate(a)
		if err != nil {
			return nil, err
		}
		f, err := window.ParseFunc(fn, col)
		if err != nil {
			return nil, err
		}
		o.Aggregates = append(o.Aggregates, window.AggDef{As: name, Func: f, Column: col})
	}
	if b, ok := src.(pipeline.Backfiller); ok {
		o.Backfilling = b.Backfilling
	}
	return window.Open(o)
}

// tableID reads "schema.table".
func tableID(s string) pipeline.TableID {
	schema, table, _ := strings.Cut(s, ".")
	return pipeline.TableID{Schema: schema, Table: table}
}
