package daemon

import (
	"fmt"
	"os"

	"go.uber.org/zap"

	"github.com/sluice-cdc/sluice/config"
	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/transform/join"
)

// buildTransforms opens the configured transforms in order. With
// resetState, their state is removed first: a pipeline starting over
// with a fresh snapshot rebuilds it. The returned func closes them; call
// it even on error.
func buildTransforms(cfg *config.Config, resetState bool, log *zap.Logger) ([]pipeline.NamedOperator, func(), error) {
	var ops []pipeline.NamedOperator
	var joins []*join.Join
	closeAll := func() {
		for _, j := range joins {
			_ = j.Close()
		}
	}
	for _, t := range cfg.Transforms {
		j := t.Join
		if j == nil {
			continue
		}
		if resetState {
			if err := os.RemoveAll(j.StateDir); err != nil {
				return nil, closeAll, fmt.Errorf("reset join %s: %w", j.Output, err)
			}
		}
		opts := join.Options{Output: j.Output, From: j.From, Dir: j.StateDir, Log: log.Named("join")}
		for _, l := range j.With {
			opts.With = append(opts.With, join.Lookup{Table: l.Table, On: l.On, As: l.As, Columns: l.Columns})
		}
		op, err := join.Open(opts)
		if err != nil {
			return nil, closeAll, &pipeline.OpenError{What: "transform join " + j.Output, Err: err}
		}
		joins = append(joins, op)
		ops = append(ops, pipeline.NamedOperator{Name: "join:" + j.Output, Operator: op})
	}
	return ops, closeAll, nil
}
