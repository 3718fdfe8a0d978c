package config

// The sluice pipeline schema. One file configures one pipeline. Defaults,
// bounds and allowed values are declared in the struct tags (see strict.go
// for their meaning); rules spanning several fields are in validate.go.
// configs/reference.yaml documents every key.

// Config is one pipeline's configuration.
type Config struct {
	// Pipeline names the pipeline; it is part of replication slot and
	// publication names, so it is restricted to lower-case identifiers.
	Pipeline string `yaml:"pipeline" required:"true" pattern:"^[a-z][a-z0-9_]{0,62}$" doc:"a name such as shop"`
	Source   Source `yaml:"source" required:"true" doc:"a generate or postgres block"`
	Sinks    []Sink `yaml:"sinks" required:"true" min:"1" doc:"a list with at least one sink, e.g. - duckdb: {path: ./sluice.duckdb}"`
	// Transforms run in order between the source and the sinks.
	Transforms []Transform `yaml:"transforms"`
	Offsets    Offsets     `yaml:"offsets"`
	DLQ        DLQ         `yaml:"dlq"`
	Runtime    Runtime     `yaml:"runtime"`
	Verify     Verify      `yaml:"verify"`
	HTTP       HTTP        `yaml:"http"`
	Log        Log         `yaml:"log"`

	// File is the config file name as given to Load or Parse.
	File string `yaml:"-"`
	// Dir is the directory relative paths were resolved against.
	Dir string `yaml:"-"`
	// positions keeps where the transforms' fields are written (ErrorAt).
	positions map[string]fieldPos
}

// Source selects the change source: exactly one field is set.
type Source struct {
	Generate *GenerateSource `yaml:"generate"`
	MySQL    *MySQLSource    `yaml:"mysql"`
	Postgres *PostgresSource `yaml:"postgres"`
}

func (*Source) exclusive() {}

// Kind returns "generate", "mysql" or "postgres" (or "" when none is set).
func (s Source) Kind() string {
	switch {
	case s.Generate != nil:
		return "generate"
	case s.MySQL != nil:
		return "mysql"
	case s.Postgres != nil:
		return "postgres"
	}
	return ""
}

// GenerateSource configures the built-in synthetic data generator, which
// writes to three fixed typed tables: customers, orders and events.
type GenerateSource struct {
	Seed        int64   `yaml:"seed" default:"1"`
	Tables      int     `yaml:"tables" default:"3" min:"1" max:"3"`
	InitialRows int64   `yaml:"initial_rows" default:"1000" min:"0"`
	Changes     int64   `yaml:"changes" default:"0" min:"0"` // 0: unbounded
	Rate        float64 `yaml:"rate" default:"0" min:"0"`    // changes per second; 0: unthrottled
	Mix         Mix     `yaml:"mix"`
	Batch       int     `yaml:"batch" default:"500" min:"1" max:"100000"`
}

// Mix is the percentage of each change kind the generator produces; the
// three sum to 100.
type Mix struct {
	Insert int `yaml:"insert" default:"30" min:"0" max:"100"`
	Update int `yaml:"update" default:"60" min:"0" max:"100"`
	Delete int `yaml:"delete" default:"10" min:"0" max:"100"`
}

// PostgresSource configures logical replication (pgoutput) from Postgres.
type PostgresSource struct {
	// DSN is a postgres:// URL or a key=value connection string.
	DSN string `yaml:"dsn" required:"true" secret:"true" doc:"e.g. postgres://user@127.0.0.1:5432/db"`
	// Password, when set, overrides the DSN's password.
	Password string `yaml:"password" secret:"true"`
	// Tables lists the captured tables as "schema.table"; after loading,
	// every entry is qualified (unqualified names mean schema public).
	Tables []string `yaml:"tables" required:"true" min:"1" doc:"e.g. [public.orders]"`
	// Publication and Slot default to "sluice_<pipeline>" (filled in by
	// Parse).
	Publication string `yaml:"publication" pattern:"^[a-z_][a-z0-9_]{0,62}$"`
	Slot        string `yaml:"slot" pattern:"^[a-z_][a-z0-9_]{0,62}$"`
	// FullIdentityTables may lack a primary key or replica identity index
	// (they use REPLICA IDENTITY FULL); each must be in Tables. Qualified
	// like Tables after loading.
	FullIdentityTables []string         `yaml:"full_identity_tables"`
	HeartbeatInterval  Duration         `yaml:"heartbeat_interval" default:"10s" min:"0s"` // 0: no heartbeats
	Streaming          bool             `yaml:"streaming" default:"true"`
	SpillThreshold     ByteSize         `yaml:"spill_threshold" default:"64MiB" min:"1MiB"`
	StatusInterval     Duration         `yaml:"status_interval" default:"10s" min:"100ms"`
	ReconnectBackoff   ReconnectBackoff `yaml:"reconnect_backoff"`
	Snapshot           Snapshot         `yaml:"snapshot"`
}

// MySQLSource configures binlog replication from MySQL or MariaDB.
type MySQLSource struct {
	// DSN is mysql://user[:password]@host:port.
	DSN string `yaml:"dsn" required:"true" secret:"true" pattern:"^(mysql|mariadb)://[^\\s/]+$" doc:"e.g. mysql://sluice@127.0.0.1:3306"`
	// Password, when set, overrides the DSN's password.
	Password string `yaml:"password" secret:"true"`
	// Tables lists the captured tables as "database.table".
	Tables []string `yaml:"tables" required:"true" min:"1" doc:"e.g. [shop.orders]"`
	// ServerID is the replica id of the binlog connection; 0 derives one
	// from the pipeline name.
	ServerID          int64            `yaml:"server_id" default:"0" min:"0" max:"4294967295"`
	TLS               TLS              `yaml:"tls"`
	HeartbeatInterval Duration         `yaml:"heartbeat_interval" default:"10s" min:"100ms"`
	ReadTimeout       Duration         `yaml:"read_timeout" default:"30s" min:"1s"`
	StatusInterval    Duration         `yaml:"status_interval" default:"10s" min:"100ms"`
	ZeroDates         string           `yaml:"zero_dates" default:"as_null" enum:"as_null|dead_letter"`
	IgnoreDDLTables   []string         `yaml:"ignore_ddl_tables"`
	CascadeTables     []string         `yaml:"cascade_tables"`
	ReconnectBackoff  ReconnectBackoff `yaml:"reconnect_backoff"`
	Snapshot          MySQLSnapshot    `yaml:"snapshot"`
}

// MySQLSnapshot configures the binlog source's copy of existing rows,
// with the modes of Snapshot.
type MySQLSnapshot struct {
	Mode      string `yaml:"mode" default:"initial" enum:"initial|incremental|never"`
	Parallel  int    `yaml:"parallel" default:"2" min:"1" max:"64"`
	ChunkRows int64  `yaml:"chunk_rows" default:"100000" min:"1"`
	// ChunkTime, MaxChunkRows and MaxChunkBytes size incremental chunks
	// (Snapshot).
	ChunkTime     Duration `yaml:"chunk_time" default:"500ms" min:"10ms"`
	MaxChunkRows  int      `yaml:"max_chunk_rows" default:"65536" min:"64" max:"1000000"`
	MaxChunkBytes ByteSize `yaml:"max_chunk_bytes" default:"16MiB" min:"64KiB"`
	// WatermarkTable is where incremental snapshots write watermarks.
	WatermarkTable string `yaml:"watermark_table" default:"sluice.watermarks" pattern:"^[^.\\s]+\\.[^.\\s]+$" doc:"database.table"`
	// ReadOnly writes nothing: watermarks are GTID positions read from
	// the server (a replica, or a user without write privileges).
	ReadOnly bool   `yaml:"read_only" default:"false"`
	Lock     string `yaml:"lock" default:"flush_tables" enum:"flush_tables|none"`
}

// ReconnectBackoff bounds the exponential wait between reconnect attempts.
type ReconnectBackoff struct {
	Initial Duration `yaml:"initial" default:"1s" min:"1ms"`
	Max     Duration `yaml:"max" default:"30s" min:"1ms"`
}

// Snapshot configures the copy of existing rows: mode initial loads a
// new pipeline from the slot's exported snapshot before streaming;
// incremental reads every table in chunks while the stream flows
// (resumable; snapshot/); never reads no existing rows. Tables added to
// a running pipeline, and `sluice snapshot` requests, are read
// incrementally in every mode but never.
type Snapshot struct {
	Mode     string `yaml:"mode" default:"initial" enum:"initial|incremental|never"`
	Parallel int    `yaml:"parallel" default:"2" min:"1" max:"64"`
	// ChunkRows is the initial load's key range size.
	ChunkRows int64 `yaml:"chunk_rows" default:"100000" min:"1"`
	// ChunkTime is the read time an incremental chunk aims at; its rows
	// adapt between 64 and MaxChunkRows.
	ChunkTime    Duration `yaml:"chunk_time" default:"500ms" min:"10ms"`
	MaxChunkRows int      `yaml:"max_chunk_rows" default:"65536" min:"64" max:"1000000"`
	// MaxChunkBytes bounds an incremental chunk's rows by their memory:
	// each of the Parallel windows holds one chunk until its high
	// watermark, beside the runtime's in-flight cap.
	MaxChunkBytes ByteSize `yaml:"max_chunk_bytes" default:"16MiB" min:"64KiB"`
	// ReadOnly writes nothing: watermarks are WAL positions read from
	// the server (a user without write privileges); a hot standby is
	// always read this way.
	ReadOnly bool `yaml:"read_only" default:"false"`
}

// Sink is one list item of sinks: exactly one field (the sink kind) is set.
type Sink struct {
	Bleve         *BleveSink    `yaml:"bleve"`
	DuckDB        *DuckDBSink   `yaml:"duckdb"`
	Elasticsearch *IndexSink    `yaml:"elasticsearch"`
	Kafka         *KafkaSink    `yaml:"kafka"`
	OpenSearch    *IndexSink    `yaml:"opensearch"`
	Postgres      *PostgresSink `yaml:"postgres"`
	Redis         *RedisSink    `yaml:"redis"`
}

func (*Sink) exclusive() {}

// Kind returns the sink kind, e.g. "duckdb".
func (s Sink) Kind() string {
	switch {
	case s.Bleve != nil:
		return "bleve"
	case s.Elasticsearch != nil:
		return "elasticsearch"
	case s.OpenSearch != nil:
		return "opensearch"
	case s.DuckDB != nil:
		return "duckdb"
	case s.Kafka != nil:
		return "kafka"
	case s.Postgres != nil:
		return "postgres"
	case s.Redis != nil:
		return "redis"
	}
	return ""
}

// Name returns the sink's name (always set after loading).
func (s Sink) Name() string {
	if c := s.Common(); c != nil {
		return c.Name
	}
	return ""
}

// Common returns the settings shared by every kind, nil when no kind is set.
func (s Sink) Common() *SinkCommon {
	switch {
	case s.Bleve != nil:
		return &s.Bleve.SinkCommon
	case s.Elasticsearch != nil:
		return &s.Elasticsearch.SinkCommon
	case s.OpenSearch != nil:
		return &s.OpenSearch.SinkCommon
	case s.DuckDB != nil:
		return &s.DuckDB.SinkCommon
	case s.Kafka != nil:
		return &s.Kafka.SinkCommon
	case s.Postgres != nil:
		return &s.Postgres.SinkCommon
	case s.Redis != nil:
		return &s.Redis.SinkCommon
	}
	return nil
}

// BleveSink keeps an embedded full-text index of the captured rows (see
// sinks/bleve); `sluice search` queries it.
type BleveSink struct {
	SinkCommon `yaml:",inline"`
	// Path is the index directory; relative paths are resolved against the
	// config file's directory.
	Path         string   `yaml:"path" required:"true" doc:"the index directory, e.g. ./sluice.bleve"`
	TombstoneTTL Duration `yaml:"tombstone_ttl" default:"168h" min:"0s"`
}

// IndexSink writes documents to an OpenSearch or Elasticsearch cluster
// (see sinks/search); the kind key says which.
type IndexSink struct {
	SinkCommon `yaml:",inline"`
	URLs       []string `yaml:"urls" required:"true" min:"1" doc:"e.g. [http://127.0.0.1:9200]"`
	Username   string   `yaml:"username"`
	Password   string   `yaml:"password" secret:"true"`
	// APIKey is an Elasticsearch API key (base64 id:key); instead of
	// username and password.
	APIKey        string         `yaml:"api_key" secret:"true"`
	TLS           IndexTLS       `yaml:"tls"`
	IndexTemplate string         `yaml:"index_template" default:"'{schema}.{table}'"`
	Mappings      []IndexMapping `yaml:"mappings"`
	// AliasSuffix names each index's filtered alias of live documents.
	AliasSuffix string `yaml:"alias_suffix" default:"-live" pattern:"^[a-z0-9_.-]{1,64}$"`
	// StateIndex holds the sink's barriers and snapshot marks.
	StateIndex   string   `yaml:"state_index" default:"sluice_state" pattern:"^[a-z0-9][a-z0-9_.-]{0,200}$"`
	Refresh      bool     `yaml:"refresh" default:"false"`
	TombstoneTTL Duration `yaml:"tombstone_ttl" default:"168h" min:"0s"`
	BulkMaxBytes ByteSize `yaml:"bulk_max_bytes" default:"10MiB" min:"64KiB" max:"100MiB"`
	Timeout      Duration `yaml:"timeout" default:"60s" min:"1s"`
}

// IndexTLS configures TLS to search nodes (server verification only).
type IndexTLS struct {
	Enabled            bool   `yaml:"enabled" default:"false"`
	CAFile             string `yaml:"ca_file"`
	InsecureSkipVerify bool   `yaml:"insecure_skip_verify" default:"false"`
}

// IndexMapping overrides the mapping derived for one table's index.
type IndexMapping struct {
	Table string `yaml:"table" required:"true" doc:"schema.table"`
	// JSON is the index's "mappings" object.
	JSON string `yaml:"json" required:"true" doc:"the mappings object as JSON, e.g. '{\"properties\": {…}}'"`
}

// SinkCommon holds the settings every sink kind takes: its name, which
// tables and columns it receives, and where its dead letters go.
type SinkCommon struct {
	// Name defaults to the kind ("duckdb"), or kind_<index in sinks> when
	// several sinks share the kind (filled in by Parse).
	Name string `yaml:"name" pattern:"^[a-z][a-z0-9_-]*$"`
	// Tables the sink receives, as "schema.table" patterns (* and ? match
	// within a name part); empty: every captured table.
	Tables []string `yaml:"tables"`
	// Columns narrows the columns the sink receives.
	Columns Columns `yaml:"columns"`
	// DLQ, when set, sends this sink's dead letters to Kafka instead of
	// the pipeline's dead-letter queue.
	DLQ SinkDLQ `yaml:"dlq"`
}

// Columns selects columns by "schema.table.column" patterns. A column is
// sent when no include pattern names its table or one matches it, and no
// exclude pattern matches it. Primary-key columns are always sent.
type Columns struct {
	Include []string `yaml:"include"`
	Exclude []string `yaml:"exclude"`
}

// SinkDLQ overrides the dead-letter queue of one sink.
type SinkDLQ struct {
	Kafka *KafkaDLQ `yaml:"kafka"`
}

// KafkaDLQ writes dead letters as JSON records to a Kafka topic.
type KafkaDLQ struct {
	Brokers []string `yaml:"brokers" required:"true" min:"1" doc:"host:port list, e.g. [127.0.0.1:9092]"`
	Topic   string   `yaml:"topic" required:"true" pattern:"^[A-Za-z0-9._-]{1,249}$" doc:"e.g. shop.dlq"`
	// CreateTopic creates the topic (one partition, delete policy) when
	// it is missing.
	CreateTopic bool `yaml:"create_topic" default:"true"`
	TLS         TLS  `yaml:"tls"`
	SASL        SASL `yaml:"sasl"`
}

// PostgresSink upserts into PostgreSQL tables (an analytics store or
// replica); see sinks/postgres.
type PostgresSink struct {
	SinkCommon `yaml:",inline"`
	// DSN is a postgres:// URL or a key=value connection string of the
	// target database.
	DSN string `yaml:"dsn" required:"true" secret:"true" doc:"e.g. postgres://writer@127.0.0.1:5432/analytics"`
	// Password, when set, overrides the DSN's password.
	Password string `yaml:"password" secret:"true"`
	Schema   string `yaml:"schema" default:"public" pattern:"^[A-Za-z_][A-Za-z0-9_]{0,62}$"`
	// TableTemplate names a source table's target table ({database},
	// {schema}, {table}); TablePrefix P, the older setting, is
	// TableTemplate "P{table}" and may not be set with it.
	TableTemplate string   `yaml:"table_template" default:"'{schema}_{table}'"`
	TablePrefix   string   `yaml:"table_prefix" pattern:"^[A-Za-z0-9_]{0,40}$"`
	HardDelete    bool     `yaml:"hard_delete" default:"false"`
	TombstoneTTL  Duration `yaml:"tombstone_ttl" default:"168h" min:"0s"`
}

// RedisSink keeps Redis keys in step with the captured rows (a cache); see
// sinks/redis.
type RedisSink struct {
	SinkCommon   `yaml:",inline"`
	Addr         string   `yaml:"addr" required:"true" doc:"host:port, e.g. 127.0.0.1:6379"`
	Username     string   `yaml:"username"`
	Password     string   `yaml:"password" secret:"true"`
	DB           int      `yaml:"db" default:"0" min:"0" max:"1000"`
	KeyTemplate  string   `yaml:"key_template" default:"'{schema}.{table}:{pk}'"`
	Format       string   `yaml:"format" default:"json" enum:"json|hash"`
	TTL          Duration `yaml:"ttl" default:"0s" min:"0s"`
	TombstoneTTL Duration `yaml:"tombstone_ttl" default:"168h" min:"1s"`
	TLS          bool     `yaml:"tls" default:"false"`
}

// DuckDBSink writes into a DuckDB database file.
type DuckDBSink struct {
	SinkCommon `yaml:",inline"`
	// Path is the database file; relative paths are resolved against the
	// config file's directory. ":memory:" is kept as is.
	Path   string `yaml:"path" required:"true" doc:"the DuckDB database file, e.g. ./sluice.duckdb"`
	Schema string `yaml:"schema" default:"main" pattern:"^[A-Za-z_][A-Za-z0-9_]{0,62}$"`
	// TableTemplate names a source table's target table ({database},
	// {schema}, {table}).
	TableTemplate string   `yaml:"table_template" default:"'{schema}_{table}'"`
	HardDelete    bool     `yaml:"hard_delete" default:"false"`
	TombstoneTTL  Duration `yaml:"tombstone_ttl" default:"168h" min:"0s"`
	// MemoryLimit caps DuckDB's own memory (beyond it DuckDB spills to
	// temporary files; 0: the indexes' memory plus a working headroom,
	// followed by the sink); Threads is its worker count (0: CPUs - 1).
	MemoryLimit ByteSize `yaml:"memory_limit" default:"0" min:"0"`
	Threads     int      `yaml:"threads" default:"0" min:"0" max:"256"`
	// RowGroupSize is the rows per row group DuckDB writes (a multiple of
	// 2048); DuckDB compresses a whole group at once, so its memory
	// grows with group size × row width.
	RowGroupSize int `yaml:"row_group_size" default:"16384" min:"2048" max:"1048576"`
}

// KafkaSink produces change events to Kafka (Avro, Confluent wire format,
// schemas in a registry); see sinks/kafka.
type KafkaSink struct {
	SinkCommon `yaml:",inline"`
	Brokers    []string `yaml:"brokers" required:"true" min:"1" doc:"bootstrap addresses, e.g. [127.0.0.1:9092]"`
	// ServerName is {prefix} in topic names and the first component of
	// Avro namespaces; it defaults to the pipeline name (filled in by
	// Parse).
	ServerName         string       `yaml:"server_name" pattern:"^[A-Za-z_][A-Za-z0-9_.-]*$"`
	TopicTemplate      string       `yaml:"topic_template" default:"'{prefix}.{schema}.{table}'"`
	Envelope           string       `yaml:"envelope" default:"debezium" enum:"debezium|row"`
	SubjectStrategy    string       `yaml:"subject_strategy" default:"topic" enum:"topic|record"`
	Compatibility      string       `yaml:"compatibility" default:"BACKWARD" enum:"NONE|BACKWARD|BACKWARD_TRANSITIVE|FORWARD|FORWARD_TRANSITIVE|FULL|FULL_TRANSITIVE"`
	IncompatiblePolicy string       `yaml:"incompatible_policy" default:"fail" enum:"fail|new_subject_version"`
	Tombstones         bool         `yaml:"tombstones" default:"true"`
	UnchangedFields    bool         `yaml:"unchanged_fields" default:"true"`
	DLQTopic           string       `yaml:"dlq_topic" pattern:"^[A-Za-z0-9._-]{1,249}$"`
	ExactlyOnce        bool         `yaml:"exactly_once" default:"false"`                    // Kafka transactions + high-water marks (sinks/kafka/txn.go)
	OffsetsTopic       string       `yaml:"offsets_topic" pattern:"^[A-Za-z0-9._-]{1,249}$"` // default <server_name>.sluice.offsets, filled in by Parse
	CreateTopics       KafkaTopics  `yaml:"create_topics"`
	Producer           KafkaProduce `yaml:"producer"`
	TLS                TLS          `yaml:"tls"`
	SASL               SASL         `yaml:"sasl"`
	Registry           Registry     `yaml:"registry" required:"true" doc:"the schema registry, e.g. {url: http://127.0.0.1:8081}"`
}

// KafkaTopics configures topic creation.
type KafkaTopics struct {
	Enabled           bool `yaml:"enabled" default:"true"`
	Partitions        int  `yaml:"partitions" default:"1" min:"1" max:"100000"`
	ReplicationFactor int  `yaml:"replication_factor" default:"1" min:"1" max:"32767"`
	Compact           bool `yaml:"compact" default:"true"`
}

// KafkaProduce tunes the producer.
type KafkaProduce struct {
	Linger          Duration `yaml:"linger" default:"5ms" min:"0s"`
	BatchMaxBytes   ByteSize `yaml:"batch_max_bytes" default:"1MB" min:"1KiB" max:"1GiB"`
	Compression     string   `yaml:"compression" default:"lz4" enum:"lz4|zstd|snappy|gzip|none"`
	DeliveryTimeout Duration `yaml:"delivery_timeout" default:"2m" min:"1s"`
}

// TLS configures a TLS client. Relative file paths are resolved against
// the config file's directory.
type TLS struct {
	Enabled            bool   `yaml:"enabled" default:"false"`
	CAFile             string `yaml:"ca_file"`
	CertFile           string `yaml:"cert_file"`
	KeyFile            string `yaml:"key_file"`
	InsecureSkipVerify bool   `yaml:"insecure_skip_verify" default:"false"`
}

// SASL configures SASL authentication to Kafka brokers.
type SASL struct {
	Mechanism string `yaml:"mechanism" enum:"PLAIN|SCRAM-SHA-256|SCRAM-SHA-512"`
	Username  string `yaml:"username"`
	Password  string `yaml:"password" secret:"true"`
}

// Registry configures a Confluent-API schema registry client.
type Registry struct {
	URL      string   `yaml:"url" required:"true" pattern:"^https?://[^\\s]+$" doc:"e.g. http://127.0.0.1:8081"`
	Username string   `yaml:"username"`
	Password string   `yaml:"password" secret:"true"`
	TLS      TLS      `yaml:"tls"`
	Timeout  Duration `yaml:"timeout" default:"10s" min:"100ms"`
}

// Offsets configures the checkpoint store.
type Offsets struct {
	// Dir holds checkpoints; relative paths are resolved against the config
	// file's directory.
	Dir string `yaml:"dir" default:"./.sluice"`
}

// DLQ configures the dead-letter queue.
type DLQ struct {
	// Dir defaults to <offsets.dir>/dlq (filled in by Parse); relative
	// paths are resolved against the config file's directory.
	Dir string `yaml:"dir"`
	// Kafka, when set, replaces the file queue: every dead letter goes to
	// this topic.
	Kafka *KafkaDLQ `yaml:"kafka"`
}

// Runtime bounds memory and paces batching, checkpointing and retries.
type Runtime struct {
	MaxInFlightRecords int      `yaml:"max_in_flight_records" default:"50000" min:"1"`
	MaxInFlightBytes   ByteSize `yaml:"max_in_flight_bytes" default:"64MiB" min:"1MiB"`
	// MemoryLimit is the Go runtime's soft memory limit (the GC works
	// harder near it; 0: derived from the caps, see daemon.memoryLimit);
	// GOMEMLIMIT in the environment takes precedence.
	MemoryLimit        ByteSize `yaml:"memory_limit" default:"0" min:"0"`
	BatchMaxRecords    int      `yaml:"batch_max_records" default:"10000" min:"1"`
	BatchMaxBytes      ByteSize `yaml:"batch_max_bytes" default:"16MiB" min:"1KiB"`
	BatchLinger        Duration `yaml:"batch_linger" default:"100ms" min:"0s"`
	CheckpointInterval Duration `yaml:"checkpoint_interval" default:"1s" min:"1ms"`
	ShutdownTimeout    Duration `yaml:"shutdown_timeout" default:"30s" min:"1ms"`
	WriteTimeout       Duration `yaml:"write_timeout" default:"2m" min:"100ms"`
	PipelinedWrites    int      `yaml:"pipelined_writes" default:"3" min:"1"`
	WriteTargetLatency Duration `yaml:"write_target_latency" default:"2s" min:"1ms"`
	DegradedAfter      Duration `yaml:"degraded_after" default:"30s" min:"1ms"`
	// Quarantine is what happens to the changes of a table a sink refused
	// permanently: "dlq" (to the dead-letter queue) or "hold" (kept in the
	// source's log, no checkpoint passes them).
	Quarantine string `yaml:"quarantine" default:"dlq" enum:"dlq|hold"`
	Retry      Retry  `yaml:"retry"`
}

// Retry bounds the exponential backoff of failed sink writes.
type Retry struct {
	Initial     Duration `yaml:"initial" default:"100ms" min:"1ms"`
	Max         Duration `yaml:"max" default:"30s" min:"1ms"`
	MaxAttempts int      `yaml:"max_attempts" default:"0" min:"0"` // 0: retry forever
}

// Verify configures continuous verification.
type Verify struct {
	Sample VerifySample `yaml:"sample"`
}

// VerifySample makes the running daemon compare a sample of recently
// changed keys with every sink that can read rows by key, once a
// checkpoint covers their change (see verify.Sampler).
type VerifySample struct {
	// Rate is the fraction of changes whose key is checked; 0 turns
	// continuous verification off.
	Rate             float64  `yaml:"rate" default:"0" min:"0" max:"1"`
	Delay            Duration `yaml:"delay" default:"10s" min:"0s"`
	Interval         Duration `yaml:"interval" default:"5s" min:"10ms"`
	MaxKeysPerSecond int      `yaml:"max_keys_per_second" default:"100" min:"1"`
	MaxPending       int      `yaml:"max_pending" default:"10000" min:"1"`
	Settle           Duration `yaml:"settle" default:"1m" min:"1ms"`
}

// HTTP configures the metrics/status server.
type HTTP struct {
	// Listen is host:port; "" disables the server.
	Listen string `yaml:"listen" default:"127.0.0.1:9090"`
	// Pprof serves Go's runtime profiles under /debug/pprof/ (heap, CPU,
	// goroutines) for diagnosing memory or CPU use in place.
	Pprof bool `yaml:"pprof" default:"false"`
}

// Log configures logging.
type Log struct {
	Level  string `yaml:"level" default:"info" enum:"debug|info|warn|error"`
	Format string `yaml:"format" default:"json" enum:"json|console"`
}
