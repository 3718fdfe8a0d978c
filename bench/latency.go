package bench

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/sluice-cdc/sluice/pipeline"
)

// latencyDB is a source database under a steady write load.
type latencyDB interface {
	// insert commits one transaction of n rows with ids from first.
	insert(ctx context.Context, first, n int) error
	// streamFromNow is a source that streams changes committed from now
	// on, with heartbeat canaries every interval, and its starting
	// checkpoint position (nil when the source starts there by itself).
	streamFromNow(ctx context.Context, name string, heartbeat time.Duration) (pipeline.Source, []byte, error)
	// connector names the source in the envelope.
	connector() string
}

// writer commits per rows every 10ms (per×100 rows/s) from id first
// until stop is closed, on a schedule that catches up rather than drops
// ticks. It reports the rows written and how far it fell behind.
type writer struct {
	rows   int
	behind time.Duration
	took   time.Duration
	err    error
	done   chan struct{}

	mu      sync.Mutex
	commits map[int64]time.Time // a transaction's last id → when its commit returned
}

const writeEvery = 10 * time.Millisecond

func startWriter(ctx context.Context, db latencyDB, first, per int, stop <-chan struct{}) *writer {
	w := &writer{done: make(chan struct{}), commits: map[int64]time.Time{}}
	go func() {
		defer close(w.done)
		t0 := time.Now()
		defer func() { w.took = time.Since(t0) }()
		for next := t0; ; next = next.Add(writeEvery) {
			// Pacing the offered load is what this sleep is for.
			if d := time.Until(next); d > 0 {
				select {
				case <-stop:
					return
				case <-time.After(d):
				}
			} else {
				w.behind = max(w.behind, -d)
				select {
				case <-stop:
					return
				default:
				}
			}
			if err := db.insert(ctx, first+w.rows, per); err != nil {
				w.err = err
				return
			}
			w.mu.Lock()
			w.commits[int64(first+w.rows+per-1)] = time.Now()
			w.mu.Unlock()
			w.rows += per
		}
	}()
	return w
}

// latSink records, when a Write returns, now minus the commit time of
// each transaction whose last row the batch holds, and of each heartbeat
// canary. A transaction's commit time is when the writer's COMMIT
// returned, the same clock for every source (MariaDB's binlog stamps
// events in whole seconds, too coarse for latency); a canary's is the
// time it carries.
type latSink struct {
	pipeline.Sink
	w       *writer
	mu      sync.Mutex
	from    time.Time // commits before it are warm-up
	tx      []float64 // ms
	canary  []float64 // ms
	written int64
}

func (s *latSink) Write(ctx context.Context, records []pipeline.Record) error {
	if err := s.Sink.Write(ctx, records); err != nil {
		return err
	}
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.w != nil { // the writer's commit times, once per batch
		s.w.mu.Lock()
		defer s.w.mu.Unlock()
	}
	for i := range records {
		r := &records[i]
		ms := float64(now.Sub(r.EventTime).Microseconds()) / 1000
		switch {
		case r.Op == pipeline.OpHeartbeat:
			if !r.EventTime.IsZero() && !r.EventTime.Before(s.from) {
				s.canary = append(s.canary, ms)
			}
		case r.Op.IsData():
			s.written++
			if s.w == nil {
				continue
			}
			if at, ok := s.w.commits[keyID(r)]; ok && !at.Before(s.from) {
				s.tx = append(s.tx, float64(now.Sub(at).Microseconds())/1000)
			}
		}
	}
	return nil
}

// keyID is a record's single integer key (0 when it has none).
func keyID(r *pipeline.Record) int64 {
	k := r.Key()
	if len(k) != 1 {
		return 0
	}
	switch v := k[0].(type) {
	case int64:
		return v
	case int32:
		return int64(v)
	case int:
		return int64(v)
	case uint64:
		return int64(v)
	}
	return 0
}

func (s *latSink) count() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.written
}

// quantiles are p50, p95 and p99 of ms (sorted in place).
func quantiles(ms []float64) (p50, p95, p99 float64) {
	if len(ms) == 0 {
		return 0, 0, 0
	}
	slices.Sort(ms)
	q := func(p float64) float64 { return ms[min(len(ms)-1, int(p*float64(len(ms))))] }
	return q(0.50), q(0.95), q(0.99)
}

// latencyAt streams from db into Kafka while a writer offers rate rows/s
// for d (the first 2s are warm-up and not counted), then waits until every
// written row is durable. Latency is commit → the sink's Write returned
// (the broker acknowledged with acks=all), per transaction and per
// heartbeat canary.
func latencyAt(ctx context.Context, o RunOptions, db latencyDB, br *broker, name string, rate int, d time.Duration, first int) ([]Figure, error) {
	src, from, err := db.streamFromNow(ctx, name, 200*time.Millisecond)
	if err != nil {
		return nil, err
	}
	ls := &latSink{}
	stop := make(chan struct{})
	var w *writer
	started := make(chan struct{})
	type out struct {
		p   phase
		err error
	}
	res := make(chan out, 1)
	// The pipeline runs until it wrote every row; the writer starts once it
	// is streaming and stops after d.
	go func() {
		p, err := br.toKafka(ctx, kafkaRun{src: src, prefix: name, connector: db.connector(), records: -1, from: from,
			wrap: func(s pipeline.Sink) pipeline.Sink { ls.Sink = s; return ls },
			until: func(rt *pipeline.Runtime) bool {
				select {
				case <-started:
				default:
					if rt.Ready() == nil {
						w = startWriter(ctx, db, first, rate/100, stop)
						ls.mu.Lock()
						ls.from, ls.w = time.Now().Add(2*time.Second), w
						ls.mu.Unlock()
						close(started)
					}
					return false
				}
				select {
				case <-w.done:
					return ls.count() >= int64(w.rows)
				default:
					return false
				}
			}})
		res <- out{p, err}
	}()
	select {
	case <-started:
	case r := <-res:
		return nil, fmt.Errorf("latency pipeline stopped before streaming: %v", r.err)
	}
	select {
	case <-time.After(d):
	case r := <-res:
		close(stop)
		return nil, fmt.Errorf("latency pipeline stopped: %v", r.err)
	}
	close(stop)
	<-w.done
	if w.err != nil {
		return nil, w.err
	}
	r := <-res
	if r.err != nil {
		return nil, r.err
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if len(ls.tx) == 0 {
		return nil, fmt.Errorf("latency at %d rows/s: no transaction measured", rate)
	}
	t50, t95, t99 := quantiles(ls.tx)
	c50, c95, c99 := quantiles(ls.canary)
	o.log("latency at %d rows/s: %d rows in %s (writer at most %s behind), %d transactions p50 %.1f p95 %.1f p99 %.1f ms, %d canaries p50 %.1f p95 %.1f p99 %.1f ms",
		rate, w.rows, w.took.Round(time.Millisecond), w.behind.Round(time.Millisecond), len(ls.tx), t50, t95, t99, len(ls.canary), c50, c95, c99)
	at := fmt.Sprintf(" at %dk rows/s", rate/1000)
	target := ""
	if rate == 5000 {
		target = "< 250"
	}
	figs := []Figure{
		{Name: "achieved" + at, Unit: "rows/s", Value: float64(w.rows) / w.took.Seconds()},
		{Name: "p50" + at, Unit: "ms", Value: t50},
		{Name: "p95" + at, Unit: "ms", Value: t95},
		{Name: "p99" + at, Unit: "ms", Value: t99, Target: target},
		{Name: "canary p99" + at, Unit: "ms", Value: c99},
		{Name: "peak RSS" + at, Unit: "MiB", Value: r.p.peakRSS / (1 << 20)},
	}
	if len(ls.canary) == 0 {
		figs = slices.DeleteFunc(figs, func(f Figure) bool { return f.Name == "canary p99"+at })
	}
	return figs, nil
}

func (o RunOptions) duration() time.Duration {
	if o.Duration > 2*time.Second {
		return o.Duration
	}
	return 20 * time.Second
}

// latencyScenario is workload (d) on db: latency at 5,000 and 20,000
// rows/s (latencyAt), then the recovery after a kill -9 of the daemon, whose
// source block is sourceYAML and whose topic is topic, at 5,000 rows/s.
func latencyScenario(ctx context.Context, o RunOptions, db latencyDB, br *broker, sourceYAML, topic string) ([]Figure, error) {
	var figs []Figure
	for i, rate := range []int{5000, 20000} {
		f, err := latencyAt(ctx, o, db, br, fmt.Sprintf("lat%d", rate), rate, o.duration(), (i+1)*10_000_000)
		if err != nil {
			return nil, err
		}
		figs = append(figs, f...)
	}
	f, err := recovery(ctx, o, db, br, sourceYAML, topic, 5000, 30_000_000)
	if err != nil {
		return nil, err
	}
	return append(figs, f...), nil
}
