package dlq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-cdc/sluice/internal/kafkaauth"
	"github.com/sluice-cdc/sluice/internal/tlsconf"
	"github.com/sluice-cdc/sluice/pipeline"
)

// KafkaOptions configures a Kafka dead-letter topic.
type KafkaOptions struct {
	Brokers []string
	Topic   string
	// CreateTopic creates a missing topic with one partition.
	CreateTopic bool
	TLS         bool
	CAFile      string
	CertFile    string
	KeyFile     string
	Insecure    bool
	// SASL mechanism (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) or "".
	SASLMechanism, Username, Password string
}

// Kafka is a pipeline.DLQ that produces every dead letter as one JSON
// record (the pipeline.DeadLetter, raw bytes in base64) to a topic, keyed
// by table, with headers sluice.stage and sluice.error. Writes are
// idempotent with acks=all: Put returns only when the broker has the
// letters (Invariant 7), so a crash before that re-delivers the record and
// may write its letter twice, never zero times.
//
// Depth counts the letters in the topic: its size when opened (end minus
// start offsets) plus what this process put. OldestAge is measured from the
// first letter this process put (older letters' ages are not read back).
type Kafka struct {
	opts   KafkaOptions
	client *kgo.Client

	depth  atomic.Int64
	mu     sync.Mutex
	oldest time.Time
}

var _ pipeline.DLQ = (*Kafka)(nil)

// OpenKafka connects, creates the topic when asked and missing, and reads
// its size. It fails when the brokers cannot be reached within ctx.
func OpenKafka(ctx context.Context, o KafkaOptions) (*Kafka, error) {
	if len(o.Brokers) == 0 || o.Topic == "" {
		return nil, errors.New("dlq: kafka needs brokers and a topic")
	}
	opts := []kgo.Opt{kgo.SeedBrokers(o.Brokers...), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.DefaultProduceTopic(o.Topic), kgo.ProducerLinger(0)}
	if o.TLS {
		tc, err := tlsconf.Config(o.CAFile, o.CertFile, o.KeyFile, o.Insecure)
		if err != nil {
			return nil, fmt.Errorf("dlq: %w", err)
		}
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	sasl, err := kafkaauth.SASL(o.SASLMechanism, o.Username, o.Password)
	if err != nil {
		return nil, fmt.Errorf("dlq: %w", err)
	}
	opts = append(opts, sasl...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("dlq: kafka client: %w", err)
	}
	k := &Kafka{opts: o, client: cl}
	if err := k.prepare(ctx); err != nil {
		cl.Close()
		return nil, err
	}
	return k, nil
}

func (k *Kafka) prepare(ctx context.Context) error {
	adm := kadm.NewClient(k.client)
	exists := false
	if k.opts.CreateTopic {
		// kadm returns the topic's own error as err too.
		_, err := adm.CreateTopic(ctx, 1, -1, nil, k.opts.Topic)
		switch {
		case err == nil:
			// A new topic holds no letters. Its partitions are not listed
			// until the brokers have read its creation from the metadata
			// log, so there is nothing to read and nothing to wait for.
			return nil
		case errors.Is(err, kerr.TopicAlreadyExists):
			exists = true
		default:
			return fmt.Errorf("dlq: create topic %s: %w", k.opts.Topic, err)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		n, err := k.size(ctx, adm)
		if err == nil {
			k.depth.Store(n)
			return nil
		}
		// A topic the controller says exists but this broker does not list
		// yet was created a moment ago (by another pipeline sharing it):
		// wait for the metadata to reach the broker.
		if !exists || !errors.Is(err, kerr.UnknownTopicOrPartition) || time.Now().After(deadline) {
			hint := ""
			if !k.opts.CreateTopic && errors.Is(err, kerr.UnknownTopicOrPartition) {
				hint = " (create it, or set create_topic: true)"
			}
			return fmt.Errorf("dlq: topic %s: %w%s", k.opts.Topic, err, hint)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("dlq: topic %s: %w", k.opts.Topic, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// size is the number of letters the topic holds: end minus start offsets.
func (k *Kafka) size(ctx context.Context, adm *kadm.Client) (int64, error) {
	ends, err := adm.ListEndOffsets(ctx, k.opts.Topic)
	if err != nil {
		return 0, err
	}
	starts, err := adm.ListStartOffsets(ctx, k.opts.Topic)
	if err != nil {
		return 0, err
	}
	if err := errors.Join(ends.Error(), starts.Error()); err != nil {
		return 0, err
	}
	var n int64
	ends.Each(func(o kadm.ListedOffset) {
		if s, ok := starts.Lookup(o.Topic, o.Partition); ok {
			n += o.Offset - s.Offset
		}
	})
	return n, nil
}

// Put produces letters and returns when every one is acknowledged by the
// brokers, or the first error (then some may be stored: a retry may
// duplicate them). It honours ctx.
func (k *Kafka) Put(ctx context.Context, letters []pipeline.DeadLetter) error {
	recs := make([]*kgo.Record, 0, len(letters))
	for i := range letters {
		l := &letters[i]
		v, err := json.Marshal(l)
		if err != nil {
			return fmt.Errorf("dlq: encode letter: %w", err)
		}
		recs = append(recs, &kgo.Record{Key: []byte(l.Table), Value: v, Timestamp: l.Time, Headers: []kgo.RecordHeader{
			{Key: "sluice.stage", Value: []byte(l.Stage)}, {Key: "sluice.error", Value: []byte(l.Error)}}})
	}
	if err := k.client.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return fmt.Errorf("dlq: produce to %s: %w", k.opts.Topic, err)
	}
	k.depth.Add(int64(len(letters)))
	k.mu.Lock()
	if k.oldest.IsZero() && len(letters) > 0 {
		k.oldest = time.Now()
	}
	k.mu.Unlock()
	return nil
}

// Depth is the number of letters in the topic (see Kafka).
func (k *Kafka) Depth() int64 { return k.depth.Load() }

// OldestAge is the age of the first letter this process put, 0 if none.
func (k *Kafka) OldestAge() time.Duration {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.oldest.IsZero() {
		return 0
	}
	return time.Since(k.oldest)
}

// Close releases the client; Put has already made every letter durable.
func (k *Kafka) Close() error {
	k.client.Close()
	return nil
}
