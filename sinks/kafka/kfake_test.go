package kafka

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap/zaptest"

	"github.com/sluice-cdc/sluice/pipeline"
)

// Fault-injection tests on kfake, franz-go's in-process fake cluster:
// produce errors and slow acknowledgements are injected with ControlKey on
// Produce requests, so the sink's retry and ack paths run without a broker.

var fakeTable = &pipeline.Table{ID: pipeline.TableID{Database: "d", Schema: "public", Table: "items"},
	Columns: []pipeline.Column{{Name: "id", Type: pipeline.TypeInt64, Key: true}, {Name: "v", Type: pipeline.TypeString, Nullable: true}},
	KeyIdx:  []int{0}, Generation: 1}

const fakeTopic = "srv.public.items"

// fakeRec is change n of fakeTable: key n%keys, version {0, 0, 0, n+1}.
func fakeRec(n, keys int) pipeline.Record {
	return pipeline.Record{Op: pipeline.OpUpdate, Table: fakeTable, After: []any{int64(n % keys), "v" + strconv.Itoa(n)},
		Version: pipeline.Version{0, 0, 0, uint64(n + 1)}, EventTime: time.Now(), Size: 100,
		Pos: pipeline.Position(fmt.Sprintf(`{"n":%d}`, n))}
}

func fakeCluster(t *testing.T) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// fakeSink opens a sink on c with one partition per topic and a short
// delivery timeout, changed by mod.
func fakeSink(t *testing.T, c *kfake.Cluster, mod func(*Options)) *Sink {
	t.Helper()
	reg, _ := registryFor(t)
	o := Defaults(c.ListenAddrs(), "srv")
	o.CreateTopics = TopicOptions{Enabled: true, Partitions: 1, ReplicationFactor: 1}
	o.Producer.DeliveryTimeout = 10 * time.Second
	if mod != nil {
		mod(&o)
	}
	s, err := New(o, reg, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Open(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

// produceErr answers a produce request with code on every partition.
func produceErr(req kmsg.Request, code int16) kmsg.Response {
	pr := req.(*kmsg.ProduceRequest)
	resp := pr.ResponseKind().(*kmsg.ProduceResponse)
	for _, t := range pr.Topics {
		rt := kmsg.NewProduceResponseTopic()
		rt.Topic, rt.TopicID = t.Topic, t.TopicID
		for _, p := range t.Partitions {
			rp := kmsg.NewProduceResponseTopicPartition()
			rp.Partition, rp.ErrorCode = p.Partition, code
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

// isProduceTo reports whether req produces to topic (requests of
// Produce v13+ name topics by id only; those count as produces to topic).
func isProduceTo(req kmsg.Request, topic string) bool {
	pr, ok := req.(*kmsg.ProduceRequest)
	if !ok {
		return false
	}
	for _, t := range pr.Topics {
		if t.Topic == topic || t.Topic == "" {
			return true
		}
	}
	return false
}

// fakeVersions reads every record of topic up to its end (read_committed
// when committed) and counts the records per sluice.version header.
func fakeVersions(t *testing.T, brokers []string, topic string, committed bool) map[string]int {
	t.Helper()
	out, err := readVersions(t.Context(), brokers, topic, committed)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func readVersions(ctx context.Context, brokers []string, topic string, committed bool) (map[string]int, error) {
	recs, err := readRecords(ctx, brokers, topic, committed)
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for _, r := range recs {
		v, _ := header(r, headerVersion)
		out[v]++
	}
	return out, nil
}

// readRecords reads topic from the start to its end (committed: with
// read_committed, to the last stable offset once it caught up).
func readRecords(ctx context.Context, brokers []string, topic string, committed bool) ([]*kgo.Record, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	opts := []kgo.Opt{kgo.SeedBrokers(brokers...)}
	if committed {
		opts = append(opts, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	}
	adm, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, err
	}
	defer adm.Close()
	ends, err := kadm.NewClient(adm).ListEndOffsets(ctx, topic)
	if err != nil {
		return nil, err
	}
	if committed {
		// A commit returns before the coordinator has written its markers
		// to the partitions: wait (briefly) until the last stable offset
		// reaches the end; a transaction a test holds open on purpose keeps
		// it below, and then the read stops at the last stable offset.
		settle := time.Now().Add(3 * time.Second)
		for {
			stable, err := kadm.NewClient(adm).ListCommittedOffsets(ctx, topic)
			if err != nil {
				return nil, err
			}
			caught := true
			ends.Each(func(o kadm.ListedOffset) {
				if s, ok := stable.Lookup(topic, o.Partition); !ok || s.Offset < o.Offset {
					caught = false
				}
			})
			if caught || time.Now().After(settle) {
				ends = stable
				break
			}
			select {
			case <-ctx.Done():
				return nil, fmt.Errorf("topic %s: last stable offset never reached the end: %w", topic, ctx.Err())
			case <-time.After(20 * time.Millisecond):
			}
			if ends, err = kadm.NewClient(adm).ListEndOffsets(ctx, topic); err != nil {
				return nil, err
			}
		}
	}
	want := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err == nil && o.Offset > 0 {
			want[o.Partition] = o.Offset
		}
	})
	var out []*kgo.Record
	if len(want) == 0 {
		return out, nil
	}
	parts := map[string]map[int32]kgo.Offset{topic: {}}
	for p := range want {
		parts[topic][p] = kgo.NewOffset().AtStart()
	}
	// Control records are kept so that the read can tell when it reached
	// the end offset even when a transaction marker sits last.
	cl, err := kgo.NewClient(append(opts, kgo.ConsumePartitions(parts), kgo.KeepControlRecords())...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	next := map[int32]int64{}
	for {
		done := true
		for p, end := range want {
			if next[p] < end {
				done = false
			}
		}
		if done {
			return out, nil
		}
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil, fmt.Errorf("topic %s: read up to %v of %v", topic, next, want)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset >= want[r.Partition] {
				return
			}
			next[r.Partition] = r.Offset + 1
			if r.Attrs.IsControl() {
				return
			}
			out = append(out, r)
		})
	}
}

func fakeBatch(from, n, keys int) []pipeline.Record {
	var out []pipeline.Record
	for i := from; i < from+n; i++ {
		out = append(out, fakeRec(i, keys))
	}
	return out
}

// A transient produce error (NOT_LEADER_FOR_PARTITION) is retried inside
// franz-go: Write still succeeds and every record lands once. (One error:
// with the leader unchanged in the metadata, franz-go parks a partition
// that keeps failing until the delivery timeout, which the runtime test
// below exercises as a failed Write.)
func TestKfakeTransientProduceError(t *testing.T) {
	c := fakeCluster(t)
	var failed, seen atomic.Int32
	c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if !isProduceTo(req, fakeTopic) {
			return nil, nil, false
		}
		seen.Add(1)
		if failed.Add(1) == 1 {
			return produceErr(req, kerr.NotLeaderForPartition.Code), nil, true
		}
		return nil, nil, false
	})
	s := fakeSink(t, c, nil)
	if err := s.Write(t.Context(), fakeBatch(0, 20, 100)); err != nil {
		t.Fatalf("write with transient errors: %v", err)
	}
	if seen.Load() < 2 {
		t.Fatalf("%d produce requests for 1 injected error", seen.Load())
	}
	got := fakeVersions(t, c.ListenAddrs(), fakeTopic, false)
	for i := 0; i < 20; i++ {
		if v := fakeRec(i, 100).Version.String(); got[v] != 1 {
			t.Errorf("record %d landed %d times", i, got[v])
		}
	}
}

// A non-retriable refusal (INVALID_RECORD) is a permanent per-record
// failure in a *pipeline.BatchError, and the sink goes on. (A batch refused
// as too large is split instead: TestKfakeTooLarge.)
func TestKfakePermanentProduceError(t *testing.T) {
	for _, e := range []*kerr.Error{kerr.InvalidRecord} {
		t.Run(e.Message, func(t *testing.T) {
			c := fakeCluster(t)
			var refuse atomic.Bool
			c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
				c.KeepControl()
				if refuse.Load() && isProduceTo(req, fakeTopic) {
					return produceErr(req, e.Code), nil, true
				}
				return nil, nil, false
			})
			s := fakeSink(t, c, nil)
			// The sink records its generation before its first batch; the
			// refusal starts after that.
			if err := s.Write(t.Context(), fakeBatch(10, 1, 100)); err != nil {
				t.Fatal(err)
			}
			refuse.Store(true)
			recs := fakeBatch(0, 5, 100)
			err := s.Write(t.Context(), recs)
			var be *pipeline.BatchError
			if !errors.As(err, &be) || len(be.Failed) != len(recs) {
				t.Fatalf("want a BatchError naming all %d records, got %v", len(recs), err)
			}
			for _, f := range be.Failed {
				if !f.Permanent || !errors.Is(f.Err, e) {
					t.Errorf("record %d: permanent %v, err %v", f.Index, f.Permanent, f.Err)
				}
			}
			// The producer recovers: the next batch is written.
			refuse.Store(false)
			if err := s.Write(t.Context(), fakeBatch(5, 5, 100)); err != nil {
				t.Fatalf("write after a refusal: %v", err)
			}
			got := fakeVersions(t, c.ListenAddrs(), fakeTopic, false)
			for i := 5; i < 10; i++ {
				if got[fakeRec(i, 100).Version.String()] != 1 {
					t.Errorf("record %d missing after recovery: %v", i, got)
				}
			}
		})
	}
}

// holdAcks makes the fake cluster hold its answers to produce requests to
// fakeTopic from hold on, until answer: a broker slow to acknowledge.
func holdAcks(c *kfake.Cluster) (hold, answer func()) {
	var slow atomic.Bool
	release := make(chan struct{})
	c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if slow.Load() && isProduceTo(req, fakeTopic) {
			c.SleepControl(func() { <-release })
		}
		return nil, nil, false
	})
	return func() { slow.Store(true) }, func() { slow.Store(false); close(release) }
}

// A slow acknowledgement holds Write until the broker answers; cancelling
// the context returns ctx.Err() (never nil) without waiting.
func TestKfakeSlowAck(t *testing.T) {
	c := fakeCluster(t)
	hold, answer := holdAcks(c)
	s := fakeSink(t, c, nil)
	if err := s.Write(t.Context(), fakeBatch(0, 1, 100)); err != nil { // topic and schemas ready
		t.Fatal(err)
	}
	hold()

	// Cancelled while the ack is pending: ctx.Err(), promptly.
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Write(ctx, fakeBatch(1, 5, 100)) }()
	select {
	case err := <-done:
		t.Fatalf("Write returned %v before the broker acknowledged", err)
	case <-time.After(300 * time.Millisecond):
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled Write returned %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Write did not honour cancellation")
	}

	// Not cancelled: Write returns nil only after the ack. (The records
	// of the cancelled Write still hold the partition's sequence, so the
	// Writes around the release may fail with its context's error; the
	// runtime retries those. An attempt begun before the release may
	// fail after it, so failures are retried a few times after it too.)
	var released atomic.Bool
	go func() {
		failedAfter := 0
		for {
			err := s.Write(t.Context(), fakeBatch(6, 5, 100))
			if err == nil || t.Context().Err() != nil {
				done <- err
				return
			}
			if released.Load() {
				if failedAfter++; failedAfter > 3 {
					done <- err
					return
				}
			}
			t.Logf("write while the ack is pending failed (retried): %v", err)
		}
	}()
	select {
	case err := <-done:
		t.Fatalf("Write returned %v before the broker acknowledged", err)
	case <-time.After(500 * time.Millisecond):
	}
	released.Store(true)
	answer()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("write after the ack: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Write did not return after the ack")
	}
	got := fakeVersions(t, c.ListenAddrs(), fakeTopic, false)
	for i := 6; i < 11; i++ {
		if got[fakeRec(i, 100).Version.String()] == 0 {
			t.Errorf("record %d missing", i)
		}
	}
}

// memSource emits total records in batches of size, each batch positioned
// {"n": index of its last record}, resuming after a position.
type memSource struct {
	total, size, keys int
	mu                sync.Mutex
	next              int
	acks              []int
}

func (m *memSource) Open(_ context.Context, from pipeline.Position) error {
	if from != nil {
		var p struct{ N int }
		if err := json.Unmarshal(from, &p); err != nil {
			return err
		}
		m.next = p.N + 1
	}
	return nil
}

func (m *memSource) Read(ctx context.Context) (pipeline.Batch, error) {
	if err := ctx.Err(); err != nil {
		return pipeline.Batch{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.next >= m.total {
		return pipeline.Batch{}, io.EOF
	}
	var b pipeline.Batch
	for i := 0; i < m.size && m.next < m.total; i++ {
		r := fakeRec(m.next, m.keys)
		b.Records = append(b.Records, r)
		b.Pos = r.Pos
		m.next++
	}
	return b, nil
}

func (m *memSource) Ack(_ context.Context, upTo pipeline.Position) error {
	var p struct{ N int }
	if err := json.Unmarshal(upTo, &p); err != nil {
		return err
	}
	m.mu.Lock()
	m.acks = append(m.acks, p.N)
	m.mu.Unlock()
	return nil
}

func (m *memSource) Close(context.Context) error { return nil }

// memStore is an in-memory offset store whose Commit runs check first.
type memStore struct {
	mu      sync.Mutex
	cp      pipeline.Checkpoint
	ok      bool
	commits int
	check   func(pipeline.Checkpoint) error
}

func (s *memStore) Load(context.Context, string) (pipeline.Checkpoint, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cp, s.ok, nil
}

func (s *memStore) Commit(_ context.Context, cp pipeline.Checkpoint) error {
	if s.check != nil {
		if err := s.check(cp); err != nil {
			return err
		}
	}
	s.mu.Lock()
	s.cp, s.ok = cp, true
	s.commits++
	s.mu.Unlock()
	return nil
}

func (s *memStore) Close() error { return nil }

func posN(p []byte) int {
	var v struct{ N int }
	if err := json.Unmarshal(p, &v); err != nil {
		return -1
	}
	return v.N
}

// Invariant 1 end to end: the runtime drives the kafka sink on a cluster
// that refuses produce requests at random (retried inside franz-go) and
// in bursts longer than the delivery timeout (Write fails, the runtime
// retries the batch); every checkpoint names only records the broker holds.
func TestKfakeRuntimeCheckpointNeverPassesUnacked(t *testing.T) {
	c := fakeCluster(t)
	var (
		mu        sync.Mutex
		failUntil time.Time
		requests  int
		injected  atomic.Int32
		bursts    atomic.Int32
	)
	c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if !isProduceTo(req, fakeTopic) {
			return nil, nil, false
		}
		mu.Lock()
		defer mu.Unlock()
		requests++
		now := time.Now()
		// A burst on the second request, so that every run has one
		// however few requests the batching leaves, then every sixth.
		if (requests == 2 || requests%6 == 0) && now.After(failUntil) {
			failUntil = now.Add(1500 * time.Millisecond) // beyond the delivery timeout
			bursts.Add(1)
		}
		if now.Before(failUntil) || rand.IntN(4) == 0 {
			injected.Add(1)
			return produceErr(req, kerr.NotLeaderForPartition.Code), nil, true
		}
		return nil, nil, false
	})
	s := fakeSink(t, c, func(o *Options) {
		o.Producer.DeliveryTimeout = time.Second
		o.Producer.Linger = 0
	})
	const total, keys = 150, 150
	src := &memSource{total: total, size: 3, keys: keys}
	var violations atomic.Int32
	store := &memStore{}
	store.check = func(cp pipeline.Checkpoint) error {
		n := posN(cp.Position)
		got, err := readVersions(context.Background(), c.ListenAddrs(), fakeTopic, false)
		if err != nil {
			return err // a failed commit is retried by the runtime
		}
		for i := 0; i <= n; i++ {
			if got[fakeRec(i, keys).Version.String()] == 0 {
				violations.Add(1)
				t.Errorf("checkpoint at %d committed while record %d is not in Kafka", n, i)
				break
			}
		}
		return nil
	}
	rt, err := pipeline.New(pipeline.Config{Pipeline: "p", BatchMaxRecords: 12, BatchLinger: 5 * time.Millisecond,
		CheckpointInterval: 20 * time.Millisecond, RetryInitial: 5 * time.Millisecond, RetryMax: 50 * time.Millisecond,
		// The source ends at once, so nearly the whole run is the drain;
		// each failure burst costs the client a metadata refresh (seconds).
		ShutdownTimeout: 3 * time.Minute}, src, []pipeline.NamedSink{{Name: "kafka", Sink: s}}, store, pipeline.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	if err := rt.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if n := posN(store.cp.Position); n != total-1 {
		t.Fatalf("final checkpoint at %d, want %d", n, total-1)
	}
	if store.commits < 2 || injected.Load() == 0 || bursts.Load() == 0 {
		t.Fatalf("commits %d, injected errors %d, bursts %d: the test did not exercise its paths",
			store.commits, injected.Load(), bursts.Load())
	}
	got := fakeVersions(t, c.ListenAddrs(), fakeTopic, false)
	for i := 0; i < total; i++ {
		if got[fakeRec(i, keys).Version.String()] == 0 {
			t.Fatalf("record %d missing", i)
		}
	}
	t.Logf("%d commits, %d injected errors in %d bursts, %d records in Kafka for %d changes",
		store.commits, injected.Load(), bursts.Load(), sum(got), total)
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
