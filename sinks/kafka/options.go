package kafka

import (
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-cdc/sluice/internal/kafkaauth"
	"github.com/sluice-cdc/sluice/internal/tlsconf"
	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/schema"
)

// Options configures a Sink. Zero values mean what their documentation
// says; the config package supplies the documented defaults (Defaults
// returns them too).
type Options struct {
	// Name identifies the sink in logs; default "kafka".
	Name string
	// Brokers are the bootstrap addresses (host:port). Required.
	Brokers []string
	// ServerName is {prefix} of TopicTemplate, the first component of every
	// Avro namespace and the envelope's source.name (the config defaults it
	// to the pipeline name).
	ServerName string
	// TopicTemplate names a table's topic; it may use {prefix},
	// {database}, {schema} and {table}. Characters Kafka does not allow in
	// topic names become '_'. Default "{prefix}.{schema}.{table}".
	TopicTemplate string
	// RouteTopics are the topic templates route transforms send records
	// to besides TopicTemplate (pipeline.Dest): Rows reads them too.
	RouteTopics []string
	// Envelope is "debezium" (before/after/source/op/ts_ms change events;
	// the default) or "row" (the after image, or the before image of a
	// delete, plus __op, __version, __deleted and __source_ts_ms).
	Envelope string
	// SubjectStrategy is "topic" (<topic>-key / <topic>-value; the
	// default) or "record" (the record's full name).
	SubjectStrategy string
	// Compatibility is the level set on every subject before its first
	// registration: NONE, BACKWARD (the default), BACKWARD_TRANSITIVE,
	// FORWARD, FORWARD_TRANSITIVE, FULL or FULL_TRANSITIVE.
	Compatibility string
	// IncompatiblePolicy says what a table shape the registry finds
	// incompatible does: "fail" (the default) stops the pipeline before
	// anything of the new shape is produced; "new_subject_version" sets
	// the subject's level to NONE, registers the shape as a new version,
	// restores Compatibility and goes on.
	IncompatiblePolicy string
	// Tombstones makes every delete event be followed by a tombstone (same
	// key, null value) so compaction drops the key.
	Tombstones bool
	// Unchanged makes unchanged TOAST values representable: non-key value
	// fields become nullable and __sluice_unchanged lists the fields not
	// sent (schema.Options.Unchanged). Without it such records cannot be
	// encoded and are dead-lettered.
	Unchanged bool
	// ConnectorName is the source kind ("postgresql", "mysql") written to
	// source.connector of the Debezium envelope; empty means "sluice".
	ConnectorName string
	// Version is sluice's version, written to source.version.
	Version string
	// CreateTopics creates missing topics (and the DLQ topic) with kadm.
	CreateTopics TopicOptions
	// Producer tunes batching and compression.
	Producer ProducerOptions
	// TLS and SASL secure the broker connections.
	TLS  TLSOptions
	SASL SASLOptions
	// DLQTopic, when set, receives records that cannot be encoded (value:
	// pipeline.MarshalRecord JSON; headers sluice.error, sluice.table,
	// sluice.op, sluice.version, sluice.sink). Without it such records are
	// returned as permanent failures and the runtime's dead-letter queue
	// takes them (Invariant 7).
	DLQTopic string
	// MaxBufferedRecords bounds the producer's buffer; zero means 2 ×
	// 10000 (the default runtime batch, with room for tombstones). A full
	// buffer makes Write wait (backpressure, Invariant 6).
	MaxBufferedRecords int
	// ExactlyOnce produces every Write inside one Kafka transaction
	// together with a high-water mark in OffsetsTopic, and after a restart
	// drops the stream changes that mark shows as already committed
	// (txn.go). Consumers must read with isolation.level=read_committed.
	ExactlyOnce bool
	// OffsetsTopic is the compacted topic holding the high-water marks of
	// ExactlyOnce sinks and the generation records of plain ones
	// (generation.go); "" means "<ServerName>.sluice.offsets".
	OffsetsTopic string
	// Pipeline is the pipeline's name: with Name it keys the high-water
	// mark and makes the transactional id "sluice-<Pipeline>-<Name>".
	// "" means ServerName.
	Pipeline string
	// Covers, set for a source whose positions name transactions on every
	// server (mysql.Covers), reports whether the transaction ending at pos
	// (a record's Pos) is within mark (an earlier record's Pos, from any
	// generation or server); false when it cannot tell. With it,
	// ExactlyOnce also recognises the stream changes of a later generation
	// that Kafka already holds: what a run on another server, or after a
	// cut-short run, replays (txn.go). It must not block.
	Covers pipeline.PositionOrder
}

// TopicOptions configures topic creation.
type TopicOptions struct {
	Enabled           bool
	Partitions        int // zero means 1
	ReplicationFactor int // zero means 1
	// Compact creates topics with cleanup.policy=compact.
	Compact bool
}

// ProducerOptions tunes the producer.
type ProducerOptions struct {
	// Linger is how long a partition's batch waits for more records; zero
	// sends at once.
	Linger time.Duration
	// BatchMaxBytes caps a record batch; zero keeps the client default
	// (1MB, the broker's default message.max.bytes).
	BatchMaxBytes int
	// Compression is lz4, zstd, snappy, gzip or none; "" means lz4.
	Compression string
	// DeliveryTimeout bounds how long a record may wait for the broker's
	// acknowledgement (retries included) before Write fails; zero means
	// 2m, as the Java client's delivery.timeout.ms.
	DeliveryTimeout time.Duration
}

// TLSOptions enables TLS to the brokers.
type TLSOptions struct {
	Enabled            bool
	CAFile             string // PEM roots; "" uses the system roots
	CertFile, KeyFile  string // client certificate (mutual TLS), both or neither
	InsecureSkipVerify bool
}

// SASLOptions enables SASL authentication.
type SASLOptions struct {
	// Mechanism is PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512; "" disables SASL.
	Mechanism          string
	Username, Password string
}

// Envelope kinds, subject strategies and incompatible-shape policies.
const (
	EnvelopeDebezium        = "debezium"
	EnvelopeRow             = "row"
	StrategyTopic           = "topic"
	StrategyRecord          = "record"
	PolicyFail              = "fail"
	PolicyNewSubjectVersion = "new_subject_version"
	DefaultTopicTemplate    = "{prefix}.{schema}.{table}"
	defaultMaxBuffered      = 20000
	defaultDeliveryTimeout  = 2 * time.Minute
	headerVersion           = "sluice.version"
	headerOp                = "sluice.op"
	// headerText + column: the text form (pipeline/textform) of an after
	// image's value that Avro cannot hold, written as null in the payload.
	headerText  = "sluice.text.after."
	headerError = "sluice.error"
	headerTable = "sluice.table"
	headerSink  = "sluice.sink"
)

// Defaults returns the options the config package defaults to, for the
// given brokers and server name.
func Defaults(brokers []string, serverName string) Options {
	return Options{
		Name: "kafka", Brokers: brokers, ServerName: serverName, TopicTemplate: DefaultTopicTemplate,
		Envelope: EnvelopeDebezium, SubjectStrategy: StrategyTopic, Compatibility: schema.CompatBackward,
		IncompatiblePolicy: PolicyFail, Tombstones: true, Unchanged: true, ConnectorName: "postgresql",
		CreateTopics: TopicOptions{Enabled: true, Partitions: 1, ReplicationFactor: 1, Compact: true},
		Producer:     ProducerOptions{Linger: 5 * time.Millisecond, Compression: "lz4", DeliveryTimeout: defaultDeliveryTimeout},
	}
}

// normalize fills zero values and checks the enumerations.
func (o *Options) normalize() error {
	if o.Name == "" {
		o.Name = "kafka"
	}
	if len(o.Brokers) == 0 {
		return errors.New("no brokers")
	}
	if o.TopicTemplate == "" {
		o.TopicTemplate = DefaultTopicTemplate
	}
	lower := func(s *string, def string, allowed ...string) error {
		*s = strings.ToLower(strings.TrimSpace(*s))
		if *s == "" {
			*s = def
		}
		for _, a := range allowed {
			if *s == a {
				return nil
			}
		}
		return fmt.Errorf("unknown value %q (want one of %s)", *s, strings.Join(allowed, ", "))
	}
	if err := lower(&o.Envelope, EnvelopeDebezium, EnvelopeDebezium, EnvelopeRow); err != nil {
		return fmt.Errorf("envelope: %w", err)
	}
	if err := lower(&o.SubjectStrategy, StrategyTopic, StrategyTopic, StrategyRecord); err != nil {
		return fmt.Errorf("subject strategy: %w", err)
	}
	if err := lower(&o.IncompatiblePolicy, PolicyFail, PolicyFail, PolicyNewSubjectVersion); err != nil {
		return fmt.Errorf("incompatible policy: %w", err)
	}
	if err := lower(&o.Producer.Compression, "lz4", "lz4", "zstd", "snappy", "gzip", "none"); err != nil {
		return fmt.Errorf("compression: %w", err)
	}
	o.Compatibility = strings.ToUpper(strings.TrimSpace(o.Compatibility))
	switch o.Compatibility {
	case "":
		o.Compatibility = schema.CompatBackward
	case schema.CompatNone, schema.CompatBackward, schema.CompatBackwardTransitive, schema.CompatForward,
		schema.CompatForwardTransitive, schema.CompatFull, schema.CompatFullTransitive:
	default:
		return fmt.Errorf("compatibility: unknown level %q", o.Compatibility)
	}
	if o.CreateTopics.Partitions <= 0 {
		o.CreateTopics.Partitions = 1
	}
	if o.CreateTopics.ReplicationFactor <= 0 {
		o.CreateTopics.ReplicationFactor = 1
	}
	if o.MaxBufferedRecords <= 0 {
		o.MaxBufferedRecords = defaultMaxBuffered
	}
	if o.Producer.DeliveryTimeout <= 0 {
		o.Producer.DeliveryTimeout = defaultDeliveryTimeout
	}
	return o.normalizeTxn()
}

// clientOpts builds the franz-go options: idempotent writes (the client's
// default, never disabled here; the broker drops the client's own retries),
// acks from all in-sync replicas, and the
// partitioner of the Java client (murmur2 of the key bytes, sign bit
// masked, modulo the partition count), so Kafka Streams and ksqlDB
// co-partition with sluice's topics.
func (o *Options) clientOpts() ([]kgo.Opt, error) {
	opts, err := o.connOpts("sluice-" + o.Name)
	if err != nil {
		return nil, err
	}
	opts = append(opts,
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)),
		kgo.ProducerLinger(o.Producer.Linger),
		kgo.MaxBufferedRecords(o.MaxBufferedRecords),
		kgo.RecordDeliveryTimeout(o.Producer.DeliveryTimeout),
		kgo.ProducerBatchCompression(o.Producer.Codec()),
	)
	if !o.ExactlyOnce {
		// Bounded delivery: a record still unacknowledged after
		// DeliveryTimeout fails (Write returns an error and the runtime
		// retries the batch) instead of waiting for the broker forever.
		// The broker may have stored it, so the replay can duplicate it;
		// consumers absorb duplicates by key and version (Invariant 4).
		// Transactions do not allow it: there the transaction is aborted.
		opts = append(opts, kgo.AllowIdempotentProduceCancellation())
	}
	opts = append(opts, o.txnClientOpts()...)
	if o.Producer.BatchMaxBytes > 0 {
		opts = append(opts, kgo.ProducerBatchMaxBytes(int32(min(o.Producer.BatchMaxBytes, 1<<30))))
	}
	return opts, nil
}

// connOpts are the connection options every client of the sink shares:
// the brokers, clientID, TLS and SASL; nothing of the producer.
func (o *Options) connOpts(clientID string) ([]kgo.Opt, error) {
	opts := []kgo.Opt{kgo.SeedBrokers(o.Brokers...), kgo.ClientID(clientID)}
	if o.TLS.Enabled {
		cfg, err := o.TLS.config()
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.DialTLSConfig(cfg))
	}
	sasl, err := kafkaauth.SASL(o.SASL.Mechanism, o.SASL.Username, o.SASL.Password)
	if err != nil {
		return nil, err
	}
	opts = append(opts, sasl...)
	return opts, nil
}

// Codec is the producer's compression codec.
func (p ProducerOptions) Codec() kgo.CompressionCodec {
	switch p.Compression {
	case "zstd":
		return kgo.ZstdCompression()
	case "snappy":
		return kgo.SnappyCompression()
	case "gzip":
		return kgo.GzipCompression()
	case "none":
		return kgo.NoCompression()
	}
	return kgo.Lz4Compression()
}

// config builds the TLS configuration from the files.
func (t TLSOptions) config() (*tls.Config, error) {
	return tlsconf.Config(t.CAFile, t.CertFile, t.KeyFile, t.InsecureSkipVerify)
}
