package daemon

import (
	"context"
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/sluice-cdc/sluice/config"
	"github.com/sluice-cdc/sluice/obs"
	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/sources/mysql"
	"github.com/sluice-cdc/sluice/sources/postgres"
	"github.com/sluice-cdc/sluice/verify"
)

// buildSampler returns continuous verification over the pipeline's own
// sinks (verify.sample), or nil when it is off.
func buildSampler(cfg *config.Config, sinks []pipeline.NamedSink, reg prometheus.Registerer, log *zap.Logger) (*verify.Sampler, error) {
	o := cfg.Verify.Sample
	if o.Rate <= 0 {
		return nil, nil
	}
	src, err := verifySource(cfg)
	if err != nil {
		return nil, err
	}
	ks, ok := src.(verify.KeySource)
	if !ok {
		return nil, fmt.Errorf("verify.sample: the %s source cannot read rows by key", cfg.Source.Kind())
	}
	transform, err := recordChain(cfg)
	if err != nil {
		return nil, err
	}
	var named []verify.NamedSink
	for _, s := range sinks {
		vs := verify.NamedSink{Name: s.Name, Route: s.Route, Transform: transform}
		if r, ok := s.Sink.(verify.Sink); ok {
			vs.Sink = r
		} else {
			vs.Err = verify.ErrNotSupported
		}
		named = append(named, vs)
	}
	return verify.NewSampler(ks, named, verify.SampleOptions{
		Rate: o.Rate, Delay: o.Delay.Std(), Interval: o.Interval.Std(), MaxKeysPerSecond: o.MaxKeysPerSecond,
		MaxPending: o.MaxPending, Settle: o.Settle.Std(),
	}, obs.NewVerifyMetrics(reg, cfg.Pipeline), log.Named("verify")), nil
}

// startSampler runs s (when not nil) until the returned stop is called;
// stop waits for it to end.
func startSampler(ctx context.Context, s *verify.Sampler) (stop func()) {
	if s == nil {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = s.Run(ctx)
	}()
	return func() { cancel(); wg.Wait() }
}

// tapOf is s as the runtime's tap (nil when s is nil, never a typed nil).
func tapOf(s *verify.Sampler) pipeline.Tap {
	if s == nil {
		return nil
	}
	return s
}

func (p pgVerify) KeyRows(ctx context.Context, id pipeline.TableID, keys [][]any) (*pipeline.Table, [][]any, verify.Mark, error) {
	t, rows, lsn, err := postgres.KeyRows(ctx, p.dsn, id.Schema, id.Table, keys)
	return t, rows, lsnMark(lsn), err
}

func (p pgVerify) MarkOf(pos pipeline.Position) (verify.Mark, error) {
	pp, err := postgres.ParsePosition(pos)
	return lsnMark(pp.LSN), err
}

func (m mysqlVerify) KeyRows(ctx context.Context, id pipeline.TableID, keys [][]any) (*pipeline.Table, [][]any, verify.Mark, error) {
	t, rows, pos, err := mysql.KeyRows(ctx, m.opts, id.Schema, id.Table, keys)
	return t, rows, gtidMark{pos}, err
}

func (m mysqlVerify) MarkOf(pos pipeline.Position) (verify.Mark, error) {
	p, err := mysql.ParsePosition(pos)
	return gtidMark{p}, err
}
