package verify

import (
	"context"
	"fmt"
	"hash/maphash"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"sort"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/sluice-cdc/sluice/pipeline"
)

// SampleOptions tune continuous verification.
type SampleOptions struct {
	// Rate is the fraction of changes whose key is checked, in (0, 1].
	Rate float64
	// Delay is how long a sampled key waits before it is checked (default
	// 10s): a key changed again meanwhile is checked once, at its newest
	// change.
	Delay time.Duration
	// Interval is how often due keys are checked (default 5s).
	Interval time.Duration
	// MaxKeysPerSecond bounds the keys checked per second, each costing
	// one keyed read of the source and of every sink (default 100).
	MaxKeysPerSecond int
	// MaxPending bounds the keys waiting to be checked (default 10000);
	// samples beyond it are dropped and counted.
	MaxPending int
	// Settle bounds the wait for the checkpoint to cover a check's source
	// read (default 1m); a check that waits longer is tried again later.
	Settle time.Duration
}

func (o *SampleOptions) defaults() {
	if o.Delay <= 0 {
		o.Delay = 10 * time.Second
	}
	if o.Interval <= 0 {
		o.Interval = 5 * time.Second
	}
	if o.MaxKeysPerSecond <= 0 {
		o.MaxKeysPerSecond = 100
	}
	if o.MaxPending <= 0 {
		o.MaxPending = 10000
	}
	if o.Settle <= 0 {
		o.Settle = time.Minute
	}
}

// SampleObserver receives the sampler's counts (the daemon exports them
// as sluice_verify_* metrics). Methods must not block.
type SampleObserver interface {
	// Checked counts keys compared with a sink and found equal.
	Checked(sink, table string, n int)
	// Mismatch counts one key that differs in a sink.
	Mismatch(sink, table string)
	// Inconclusive counts keys changed again while they were checked:
	// they stay queued and are checked at their newest change.
	Inconclusive(table string, n int)
	// Dropped counts samples not taken because MaxPending keys wait.
	Dropped(n int)
}

// Sampler is continuous verification: it samples the keys of changes the
// pipeline reads and, once a checkpoint covers a sampled change, compares
// the key's row in the source with every sink that mirrors it.
//
// A check never reports a change in flight as a difference. It reads the
// source rows of its keys, then waits until a checkpoint covers the
// source position taken after that read, then reads the sinks. Every
// change of a key the pipeline reads passes Read first; a key changed
// after it was sampled (before or during its check) is inconclusive and
// is checked again at its newest change. So a key compared had no change
// between its sampled change and the sink read: the source read returned
// that change's row (any later commit would have been read by the
// pipeline before the checkpoint covered the read), and every sink must
// hold that row.
//
// Read and Committed are the pipeline.Tap the runtime calls; Run checks.
type Sampler struct {
	src   KeySource
	sinks []NamedSink // those that are KeyReaders
	opts  SampleOptions
	obs   SampleObserver
	log   *zap.Logger

	mu        sync.Mutex
	pending   map[uint64]*sample
	committed pipeline.Position
	rng       *rand.Rand
	threshold uint64 // a change is sampled when rng.Uint64() < threshold
	seed      maphash.Seed
	now       func() time.Time

	lastTable     *pipeline.Table // the table of the last hash
	lastTableHash uint64

	shapes map[pipeline.TableID]*pipeline.Table // by Run's goroutine only
}

// sample is one key waiting to be checked.
type sample struct {
	table   *pipeline.Table
	key     []any
	pos     pipeline.Position // the newest change's position
	mark    Mark              // pos as a Mark, once asked for; nil: not yet
	seen    time.Time         // when the newest change was read
	touches uint64            // changes read since the key was sampled
}

// NewSampler returns a sampler comparing src with the sinks that can read
// rows by key (verify.KeyReader); the others are named in the log and
// skipped.
func NewSampler(src KeySource, sinks []NamedSink, opts SampleOptions, obs SampleObserver, log *zap.Logger) *Sampler {
	opts.defaults()
	if log == nil {
		log = zap.NewNop()
	}
	s := &Sampler{src: src, opts: opts, obs: obs, log: log, pending: map[uint64]*sample{},
		rng: rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())), seed: maphash.MakeSeed(), now: time.Now}
	switch {
	case opts.Rate >= 1:
		s.threshold = math.MaxUint64
	case opts.Rate > 0:
		s.threshold = uint64(opts.Rate * (1 << 63) * 2)
	}
	for _, ns := range sinks {
		if _, ok := ns.Sink.(KeyReader); ok && ns.Err == nil {
			s.sinks = append(s.sinks, ns)
			continue
		}
		log.Info("continuous verification skips a sink that cannot read rows by key", zap.String("sink", ns.Name))
	}
	return s
}

// Read samples the batch's changes and marks queued keys it changes again
// (pipeline.Tap).
func (s *Sampler) Read(b *pipeline.Batch) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	dropped := 0
	for i := range b.Records {
		r := &b.Records[i]
		if r.Table == nil || !r.Op.IsData() {
			continue
		}
		if r.Op == pipeline.OpTruncate {
			// Every queued key of the table changed.
			for _, p := range s.pending {
				if p.table.ID == r.Table.ID {
					p.touches++
				}
			}
			continue
		}
		img := r.After
		if img == nil {
			img = r.Before
		}
		if img == nil || len(r.Table.KeyIdx) == 0 {
			continue
		}
		sampled := s.rng.Uint64() < s.threshold
		if !sampled && len(s.pending) == 0 {
			continue
		}
		h := s.hash(r.Table, img)
		if p, ok := s.pending[h]; ok {
			// Changed again (or a hash collision, which only costs a
			// retry): check it at this change.
			p.touches++
			if p.table.ID == r.Table.ID {
				s.move(p, r, now)
			}
			continue
		}
		if !sampled || r.Pos == nil {
			continue
		}
		if len(s.pending) >= s.opts.MaxPending {
			dropped++
			continue
		}
		p := &sample{key: r.Key()}
		s.move(p, r, now)
		s.pending[h] = p
	}
	if dropped > 0 && s.obs != nil {
		s.obs.Dropped(dropped)
	}
}

// move points p at change r (a change without a position keeps the one
// before).
func (s *Sampler) move(p *sample, r *pipeline.Record, now time.Time) {
	if r.Pos != nil {
		p.table, p.pos, p.mark, p.seen = r.Table, r.Pos, nil, now
	}
}

// Committed records the newest checkpoint (pipeline.Tap).
func (s *Sampler) Committed(pos pipeline.Position) {
	s.mu.Lock()
	s.committed = pos
	s.mu.Unlock()
}

// hash identifies a key of a table in the pending set. A collision only
// makes a key look changed again (a later recheck), never a mismatch.
func (s *Sampler) hash(t *pipeline.Table, img []any) uint64 {
	if t != s.lastTable {
		s.lastTable = t
		s.lastTableHash = maphash.String(s.seed, t.ID.Database+"\x00"+t.ID.Schema+"\x00"+t.ID.Table)
	}
	h := s.lastTableHash
	for _, idx := range t.KeyIdx {
		var x uint64
		switch v := img[idx].(type) {
		case int64:
			x = uint64(v)
		case int32:
			x = uint64(v)
		case string:
			x = maphash.String(s.seed, v)
		case []byte:
			x = maphash.Bytes(s.seed, v)
		default:
			x = maphash.String(s.seed, Canon(v))
		}
		h = mix(h ^ x)
	}
	return h
}

// mix is a 64-bit finalizer (splitmix64's).
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// Pending is how many keys wait to be checked.
func (s *Sampler) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.pending)
}

// Run checks due keys every Interval until ctx ends. Read errors are
// logged and the keys tried again later; it returns ctx's error.
func (s *Sampler) Run(ctx context.Context) error {
	t := time.NewTicker(s.opts.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		budget := max(1, int(float64(s.opts.MaxKeysPerSecond)*s.opts.Interval.Seconds()))
		if err := s.CheckDue(ctx, budget); err != nil && ctx.Err() == nil {
			s.log.Warn("continuous verification: a check failed; its keys are tried again", zap.Error(err))
		}
	}
}

// due is one table's keys to check in one round.
type due struct {
	table  *pipeline.Table
	hashes []uint64
	keys   [][]any
	counts []uint64 // touches when the round began
}

// CheckDue checks up to budget keys whose change is older than Delay and
// covered by the last committed checkpoint. It blocks until the reads
// are done and returns the first error (the keys stay queued).
func (s *Sampler) CheckDue(ctx context.Context, budget int) error {
	groups := s.takeDue(budget)
	var firstErr error
	for _, g := range groups {
		if err := s.check(ctx, g); err != nil && firstErr == nil {
			firstErr = fmt.Errorf("%s: %w", g.table.ID, err)
		}
	}
	return firstErr
}

// takeDue picks the due keys, oldest change first, grouped by table.
func (s *Sampler) takeDue(budget int) []*due {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.committed == nil {
		return nil
	}
	type cand struct {
		h uint64
		p *sample
	}
	var cands []cand
	cutoff := s.now().Add(-s.opts.Delay)
	for h, p := range s.pending {
		if p.seen.After(cutoff) {
			continue
		}
		if p.mark == nil {
			m, err := s.src.MarkOf(p.pos)
			if err != nil {
				s.log.Warn("continuous verification cannot read a change's position; the key is not checked",
					zap.String("table", p.table.ID.String()), zap.Error(err))
				delete(s.pending, h)
				continue
			}
			p.mark = m
		}
		if ok, err := p.mark.CoveredBy(s.committed); err != nil || !ok {
			continue
		}
		cands = append(cands, cand{h, p})
	}
	sort.Slice(cands, func(i, j int) bool { return cands[i].p.seen.Before(cands[j].p.seen) })
	byTable := map[pipeline.TableID]*due{}
	var out []*due
	for _, c := range cands[:min(len(cands), budget)] {
		g := byTable[c.p.table.ID]
		if g == nil {
			g = &due{table: c.p.table}
			byTable[c.p.table.ID] = g
			out = append(out, g)
		}
		g.hashes = append(g.hashes, c.h)
		g.keys = append(g.keys, c.p.key)
		g.counts = append(g.counts, c.p.touches)
	}
	return out
}

// check compares one table's due keys with every sink.
func (s *Sampler) check(ctx context.Context, g *due) error {
	table, rows, mark, err := s.src.KeyRows(ctx, g.table.ID, g.keys)
	if err != nil {
		return fmt.Errorf("source: %w", err)
	}
	table = s.stable(table)
	if err := s.waitCovered(ctx, mark); err != nil {
		return err
	}
	type sinkRows struct {
		routed *pipeline.Table
		want   map[string][]any
		got    map[string][]any
	}
	reads := make([]*sinkRows, len(s.sinks))
	for i, ns := range s.sinks {
		routed := ns.shape(table)
		if routed == nil {
			continue // the sink does not receive this table
		}
		sr := &sinkRows{routed: routed, want: map[string][]any{}, got: map[string][]any{}}
		for _, row := range ns.rows(table, rows) {
			sr.want[RowKey(routed, row)] = row
		}
		held, err := ns.Sink.(KeyReader).RowsByKey(ctx, routed, g.keys)
		if err != nil {
			return fmt.Errorf("sink %s: %w", ns.Name, err)
		}
		for _, row := range held {
			sr.got[RowKey(routed, row)] = row
		}
		reads[i] = sr
	}
	// Keys changed since the round began are inconclusive: they stay
	// queued at their newest change. The others are settled here.
	name := table.ID.Schema + "." + table.ID.Table
	s.mu.Lock()
	var settled []int
	inconclusive := 0
	for i, h := range g.hashes {
		p, ok := s.pending[h]
		if !ok {
			continue
		}
		if p.touches != g.counts[i] {
			inconclusive++
			continue
		}
		delete(s.pending, h)
		settled = append(settled, i)
	}
	s.mu.Unlock()
	if inconclusive > 0 && s.obs != nil {
		s.obs.Inconclusive(name, inconclusive)
	}
	for si, sr := range reads {
		if sr == nil {
			continue
		}
		equal := 0
		for _, i := range settled {
			k := Key(g.keys[i])
			want, got := map[string][]any{}, map[string][]any{}
			if row, ok := sr.want[k]; ok {
				want[k] = row
			}
			if row, ok := sr.got[k]; ok {
				got[k] = row
			}
			d, differs := Compare(sr.routed, want, got)[k]
			if !differs {
				equal++
				continue
			}
			if s.obs != nil {
				s.obs.Mismatch(s.sinks[si].Name, name)
			}
			s.log.Error("continuous verification: a sink differs from the source",
				zap.String("sink", s.sinks[si].Name), zap.String("table", name), zap.String("key", d.Key),
				zap.String("kind", d.Kind), zap.String("columns", describeColumns(d.Columns)))
		}
		if s.obs != nil && equal > 0 {
			s.obs.Checked(s.sinks[si].Name, name, equal)
		}
	}
	return nil
}

// stable returns the table read before when t has the same shape: routes
// and sinks cache per table pointer, and a check reads a new one each time.
func (s *Sampler) stable(t *pipeline.Table) *pipeline.Table {
	if s.shapes == nil {
		s.shapes = map[pipeline.TableID]*pipeline.Table{}
	}
	if old := s.shapes[t.ID]; old != nil && reflect.DeepEqual(old.Columns, t.Columns) && slices.Equal(old.KeyIdx, t.KeyIdx) {
		return old
	}
	s.shapes[t.ID] = t
	return t
}

// waitCovered waits until the last committed checkpoint covers mark.
func (s *Sampler) waitCovered(ctx context.Context, mark Mark) error {
	deadline := time.Now().Add(s.opts.Settle)
	for {
		s.mu.Lock()
		cp := s.committed
		s.mu.Unlock()
		if cp != nil {
			ok, err := mark.CoveredBy(cp)
			if err != nil {
				return err
			}
			if ok {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the checkpoint did not reach the source position %s within %s", mark, s.opts.Settle)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func describeColumns(cols []ColumnDiff) string {
	out := ""
	for i, c := range cols {
		if i > 0 {
			out += "; "
		}
		out += fmt.Sprintf("%s: source %s, sink %s", c.Column, c.Source, c.Sink)
	}
	return out
}
