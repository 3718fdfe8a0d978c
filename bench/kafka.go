package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"

	"github.com/sluice-cdc/sluice/integration/harness"
	"github.com/sluice-cdc/sluice/offsets"
	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/schema"
	kafkasink "github.com/sluice-cdc/sluice/sinks/kafka"
)

// broker is the Kafka side every Kafka scenario shares: one broker and one
// schema registry (Apicurio, a separate JVM like the broker), both from the
// integration harness on loopback.
type broker struct {
	k   *harness.Kafka
	reg *harness.Registry
}

// brokerSettings override the test harness's server.properties where a
// test's choice would skew a throughput figure. The harness rolls a log
// segment every 64 MiB; with sluice's compacted topics the broker's log
// cleaner then compacts each rolled segment while later phases run,
// sharing the two cores with them (a profile of the broker during a
// 2,000,000-row mariadb-incremental run: two thirds of its samples in the
// cleaner, on topics whose keys are all distinct). Kafka's own default, 1
// GiB, is what a user's broker rolls at.
var brokerSettings = map[string]string{"log.segment.bytes": "1073741824"}

func startBroker(ctx context.Context, o RunOptions) (*broker, error) {
	var (
		wg           sync.WaitGroup
		b            broker
		kErr, regErr error
	)
	wg.Add(2)
	go func() {
		defer wg.Done()
		b.k, kErr = harness.StartKafka(ctx, harness.KafkaOptions{Settings: brokerSettings})
	}()
	go func() { defer wg.Done(); b.reg, regErr = harness.StartRegistry(ctx, harness.RegistryOptions{}) }()
	wg.Wait()
	if err := errors.Join(kErr, regErr); err != nil {
		b.stop()
		return nil, err
	}
	o.version("Kafka", harness.KafkaVersion+" (KRaft, one node)")
	o.version("Apicurio Registry", harness.RegistryVersion)
	return &b, nil
}

// withBroker starts a database (start) and the broker in parallel.
func withBroker[T interface{ stop() }](ctx context.Context, o RunOptions, start func(RunOptions) (T, error)) (T, *broker, error) {
	type res struct {
		db  T
		err error
	}
	ch := make(chan res, 1)
	do := o
	do.Versions = map[string]string{} // not shared between the goroutines
	go func() { db, err := start(do); ch <- res{db, err} }()
	br, berr := startBroker(ctx, o)
	r := <-ch
	if err := errors.Join(r.err, berr); err != nil {
		if r.err == nil {
			r.db.stop()
		}
		if br != nil {
			br.stop()
		}
		var zero T
		return zero, nil, err
	}
	for k, v := range do.Versions {
		o.version(k, v)
	}
	return r.db, br, nil
}

func (b *broker) stop() {
	if b.k != nil {
		_ = b.k.Stop()
	}
	if b.reg != nil {
		_ = b.reg.Stop()
	}
}

// sinkOptions are the config defaults of the Kafka sink (Debezium envelope
// in Avro, acks=all, idempotent, lz4, linger 5ms) with topics
// {prefix}.{schema}.{table}.
func (b *broker) sinkOptions(prefix, connector string) kafkasink.Options {
	o := kafkasink.Defaults(b.k.Brokers(), prefix)
	o.Version = "bench"
	o.ConnectorName = connector
	return o
}

// phase is what a measured phase cost this process.
type phase struct {
	wall    time.Duration
	first   time.Duration // until the first batch was durable
	cpu     time.Duration // this process's user+system time
	peakRSS float64       // bytes, VmHWM over the phase
}

// kafkaRun is one in-process sluice pipeline into the Kafka sink.
type kafkaRun struct {
	src       pipeline.Source
	prefix    string                       // pipeline name, topic prefix
	connector string                       // the envelope's source.connector
	records   int64                        // stop once the sink wrote this many records
	until     func(*pipeline.Runtime) bool // or once it returns true (checked every 5ms)
	linger    time.Duration
	from      []byte // a checkpoint position to resume at; nil: none
	wrap      func(pipeline.Sink) pipeline.Sink
	profile   string
}

// toKafka runs r.src through pipeline.Runtime into the Kafka sink until the
// runtime reports r.records written (acknowledged by the broker with
// acks=all), then stops it. The process's CPU time and peak RSS are the
// phase's: sluice's source, runtime, encoder and producer (not the
// servers). r.wrap, when set, wraps the sink (latency probes).
func (b *broker) toKafka(ctx context.Context, r kafkaRun) (res phase, err error) {
	src, prefix, n := r.src, r.prefix, r.records
	dir, err := os.MkdirTemp("", "sluice-bench-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	store, err := offsets.OpenDir(filepath.Join(dir, "offsets"), prefix)
	if err != nil {
		return res, err
	}
	defer store.Close()
	if r.from != nil {
		if err := store.Commit(ctx, pipeline.Checkpoint{Pipeline: prefix, Position: r.from, Seq: 1, CommittedAt: time.Now().UTC()}); err != nil {
			return res, err
		}
	}
	log, err := zap.NewDevelopment(zap.IncreaseLevel(zap.WarnLevel))
	if err != nil {
		return res, err
	}
	reg := schema.NewSRClient(b.reg.URL(), schema.SRClientOptions{})
	ks, err := kafkasink.New(b.sinkOptions(prefix, r.connector), reg, log)
	if err != nil {
		return res, err
	}
	var sink pipeline.Sink = ks
	if r.wrap != nil {
		sink = r.wrap(ks)
	}
	// The config defaults, except that a write failing 5 times in a row
	// fails the run instead of retrying for ever.
	rt, err := pipeline.New(pipeline.Config{Pipeline: prefix, RetryMaxAttempts: 5, BatchLinger: r.linger}, src,
		[]pipeline.NamedSink{{Name: "kafka", Sink: sink}}, store, pipeline.Options{Log: log})
	if err != nil {
		return res, err
	}
	return measure(ctx, rt, "kafka", r.profile, "kafka-"+prefix, n, r.until)
}

// measure runs rt until its sink named sink wrote n records (or until
// returns true, checked every 5ms), then stops it: the phase's wall time,
// time to the first durable batch, this process's CPU time and peak RSS,
// under a profile named phase when profile is set, and under the daemon's
// memory limit (daemonMemoryLimit).
func measure(ctx context.Context, rt *pipeline.Runtime, sink, profile, phaseName string, n int64, until func(*pipeline.Runtime) bool) (res phase, err error) {
	err = underDaemonLimit(func() error {
		res, err = measureUnlimited(ctx, rt, sink, profile, phaseName, n, until)
		return err
	})
	return res, err
}

func measureUnlimited(ctx context.Context, rt *pipeline.Runtime, sink, profile, phaseName string, n int64, until func(*pipeline.Runtime) bool) (res phase, err error) {
	_, err = profiled(profile, phaseName, func() (time.Duration, error) {
		// The peak is the phase's: memory earlier phases freed goes back
		// to the system first.
		debug.FreeOSMemory()
		ResetPeakRSS()
		cpu0 := SelfCPU()
		runCtx, stop := context.WithCancel(ctx)
		defer stop()
		runErr := make(chan error, 1)
		t0 := time.Now()
		go func() { runErr <- rt.Run(runCtx) }()
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			w := rt.Stats().Written[sink]
			if w > 0 && res.first == 0 {
				res.first = time.Since(t0)
			}
			if (until == nil && w >= n) || (until != nil && until(rt)) {
				break
			}
			select {
			case err := <-runErr:
				return 0, fmt.Errorf("pipeline stopped after %d of %d records: %v", w, n, err)
			case <-tick.C:
			}
		}
		res.wall = time.Since(t0)
		res.cpu, res.peakRSS = SelfCPU()-cpu0, PeakRSS()
		stop()
		return res.wall, <-runErr
	})
	return res, err
}

// topicEnd is the number of records in topic (the sum of its partitions'
// end offsets).
func (b *broker) topicEnd(ctx context.Context, topic string) (int64, error) {
	cl, err := b.k.Client()
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err != nil {
		return 0, err
	}
	var n int64
	var errs []error
	ends.Each(func(o kadm.ListedOffset) {
		errs = append(errs, o.Err)
		n += o.Offset
	})
	return n, errors.Join(errs...)
}

// ceiling measures the Kafka ceiling: the records sluice wrote to from
// (keys, values and headers as stored, so the same number of the same size,
// already encoded) are read into memory, then produced to a new topic with
// the sink's producer settings (acks=all, idempotent, lz4, linger 5ms, the
// same partitioner) until every one is acknowledged. Only the produce is
// timed.
func (b *broker) ceiling(ctx context.Context, from string) (time.Duration, int64, error) {
	n, err := b.topicEnd(ctx, from)
	if err != nil {
		return 0, 0, err
	}
	cons, err := b.k.Client(kgo.ConsumeTopics(from), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return 0, 0, err
	}
	recs := make([]*kgo.Record, 0, n)
	var bytes int64
	for int64(len(recs)) < n {
		fs := cons.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			cons.Close()
			return 0, 0, err
		}
		fs.EachRecord(func(r *kgo.Record) {
			recs = append(recs, &kgo.Record{Key: r.Key, Value: r.Value, Headers: r.Headers})
			bytes += int64(len(r.Key) + len(r.Value))
		})
	}
	cons.Close()
	to := from + ".ceiling"
	if err := b.k.CreateTopic(ctx, to, 1, nil); err != nil {
		return 0, 0, err
	}
	opts := kafkasink.Defaults(b.k.Brokers(), "ceiling").Producer
	prod, err := b.k.Client(kgo.DefaultProduceTopic(to), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)), kgo.ProducerLinger(opts.Linger),
		kgo.ProducerBatchCompression(opts.Codec()), kgo.MaxBufferedRecords(200_000))
	if err != nil {
		return 0, 0, err
	}
	defer prod.Close()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var perr error
	t0 := time.Now()
	for _, r := range recs {
		wg.Add(1)
		prod.Produce(ctx, r, func(_ *kgo.Record, err error) {
			if err != nil {
				mu.Lock()
				perr = err
				mu.Unlock()
			}
			wg.Done()
		})
	}
	wg.Wait()
	took := time.Since(t0)
	if perr != nil {
		return 0, 0, perr
	}
	return took, bytes / max(n, 1), nil
}
