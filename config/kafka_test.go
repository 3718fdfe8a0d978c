package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The shipped Kafka example validates and loads with the documented
// defaults filled in.
func TestKafkaExampleConfig(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(configsDir, "postgres-kafka.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := Parse("postgres-kafka.yaml", data, env(testEnv))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Sinks) != 1 || c.Sinks[0].Kind() != "kafka" || c.Sinks[0].Name() != "events" {
		t.Fatalf("sinks %+v", c.Sinks)
	}
	k := c.Sinks[0].Kafka
	if k.ServerName != "shop" || k.TopicTemplate != "{prefix}.{schema}.{table}" || k.Envelope != "debezium" ||
		k.SubjectStrategy != "topic" || k.Compatibility != "BACKWARD" || k.IncompatiblePolicy != "fail" ||
		!k.Tombstones || !k.UnchangedFields || k.DLQTopic != "shop.dlq" {
		t.Errorf("kafka %+v", k)
	}
	if k.Brokers[0] != "127.0.0.1:9092" || k.Registry.URL != "http://127.0.0.1:8081" || k.Registry.Timeout.Std() != 10*time.Second {
		t.Errorf("brokers %v registry %+v", k.Brokers, k.Registry)
	}
	ct, p := k.CreateTopics, k.Producer
	if !ct.Enabled || ct.Partitions != 3 || ct.ReplicationFactor != 1 || !ct.Compact {
		t.Errorf("create_topics %+v", ct)
	}
	if p.Linger.Std() != 5*time.Millisecond || p.BatchMaxBytes.Int64() != 1_000_000 || p.Compression != "zstd" ||
		p.DeliveryTimeout.Std() != 2*time.Minute {
		t.Errorf("producer %+v", p)
	}
	if k.TLS.Enabled || k.SASL.Mechanism != "" {
		t.Errorf("tls %+v sasl %+v", k.TLS, k.SASL)
	}
}

func TestKafkaSinkValidation(t *testing.T) {
	const head = "pipeline: p\nsource:\n  generate: {}\nsinks:\n"
	dir := t.TempDir()
	c, errs := parseErrs(t, head+`  - kafka:
      brokers: [b1:9092]
      registry: {url: "https://sr:8081", username: u, password: "${SR_PW}", tls: {enabled: true, ca_file: ca.pem}}
      sasl: {mechanism: SCRAM-SHA-256, username: u, password: "${K_PW}"}
      tls: {enabled: true, cert_file: c.pem, key_file: /abs/k.pem}
  - kafka:
      brokers: [b2:9092]
      server_name: other
      registry: {url: "http://sr:8081"}
`, map[string]string{"SR_PW": "registry-secret", "K_PW": "kafka-secret"})
	if errs != nil {
		t.Fatal(strings.Join(errs, "\n"))
	}
	k0, k1 := c.Sinks[0].Kafka, c.Sinks[1].Kafka
	if k0.Name != "kafka_0" || k1.Name != "kafka_1" || k0.ServerName != "p" || k1.ServerName != "other" {
		t.Errorf("names %q %q, server names %q %q", k0.Name, k1.Name, k0.ServerName, k1.ServerName)
	}
	if k0.SASL.Password != "kafka-secret" || k0.Registry.Password != "registry-secret" {
		t.Error("secrets not interpolated")
	}
	// Certificate files are resolved against the config file's directory.
	c, err := Parse(filepath.Join(dir, "pipe.yaml"), []byte(head+`  - kafka:
      brokers: [b1:9092]
      registry: {url: "https://sr:8081", tls: {enabled: true, ca_file: ca.pem}}
      tls: {enabled: true, cert_file: c.pem, key_file: /abs/k.pem}
`), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	k := c.Sinks[0].Kafka
	if k.TLS.CertFile != filepath.Join(dir, "c.pem") || k.TLS.KeyFile != "/abs/k.pem" || k.Registry.TLS.CAFile != filepath.Join(dir, "ca.pem") {
		t.Errorf("tls paths %+v %+v", k.TLS, k.Registry.TLS)
	}

	for _, c := range []struct{ body, want string }{
		{"brokers: [b:9092]", "sinks[0].kafka.registry: missing required field"},
		{"registry: {url: http://sr}", "sinks[0].kafka.brokers: missing required field"},
		{"brokers: []\n      registry: {url: http://sr}", "sinks[0].kafka.brokers: must not be empty"},
		{"brokers: [b:9092]\n      registry: {url: sr:8081}", "sinks[0].kafka.registry.url: invalid value"},
		{"brokers: [b:9092]\n      topic_template: \"{prefix}.{schema}\"\n      registry: {url: http://sr}", "topic_template: must contain {table}"},
		{"brokers: [b:9092]\n      envelope: json\n      registry: {url: http://sr}", "sinks[0].kafka.envelope: invalid value"},
		{"brokers: [b:9092]\n      compatibility: backward\n      registry: {url: http://sr}", `did you mean "BACKWARD"?`},
		{"brokers: [b:9092]\n      sasl: {mechanism: PLAIN}\n      registry: {url: http://sr}", "sasl.mechanism: needs username and password"},
		{"brokers: [b:9092]\n      sasl: {username: u, password: pw-12345}\n      registry: {url: http://sr}", "sasl.mechanism: missing"},
		{"brokers: [b:9092]\n      tls: {ca_file: ca.pem}\n      registry: {url: http://sr}", "tls.enabled: TLS settings are given but TLS is not enabled"},
		{"brokers: [b:9092]\n      tls: {enabled: true, cert_file: c.pem}\n      registry: {url: http://sr}", "tls.cert_file: cert_file and key_file go together"},
		{"brokers: [b:9092]\n      registry: {url: http://sr, username: u}", "registry.username: username and password go together"},
		{"brokers: [b:9092]\n      create_topics: {partitions: 0}\n      registry: {url: http://sr}", "create_topics.partitions"},
		{"brokers: [b:9092]\n      producer: {compression: brotli}\n      registry: {url: http://sr}", "producer.compression: invalid value"},
	} {
		_, errs := parseErrs(t, head+"  - kafka:\n      "+c.body+"\n", nil)
		if !strings.Contains(strings.Join(errs, "\n"), c.want) {
			t.Errorf("%s:\n got %q\nwant %q", c.body, errs, c.want)
		}
	}
	// Secrets never appear in messages.
	_, errs = parseErrs(t, head+"  - kafka:\n      brokers: [b:9092]\n      sasl: {mechanism: PLAIN, username: u, password: [x]}\n      registry: {url: http://sr}\n", nil)
	if len(errs) == 0 || strings.Contains(strings.Join(errs, "\n"), "[x]") {
		t.Errorf("secret list: %q", errs)
	}
}

// exactly_once fills the offsets topic default from the server name; an
// explicit offsets_topic is kept.
func TestKafkaExactlyOnce(t *testing.T) {
	const head = "pipeline: p\nsource:\n  generate: {}\nsinks:\n"
	c, errs := parseErrs(t, head+`  - kafka:
      brokers: [b1:9092]
      registry: {url: "http://sr:8081"}
      exactly_once: true
  - kafka:
      brokers: [b2:9092]
      server_name: other
      registry: {url: "http://sr:8081"}
      exactly_once: true
      offsets_topic: my.offsets
  - kafka:
      brokers: [b3:9092]
      registry: {url: "http://sr:8081"}
`, nil)
	if errs != nil {
		t.Fatal(strings.Join(errs, "\n"))
	}
	k0, k1, k2 := c.Sinks[0].Kafka, c.Sinks[1].Kafka, c.Sinks[2].Kafka
	if !k0.ExactlyOnce || k0.OffsetsTopic != "p.sluice.offsets" {
		t.Errorf("sink 0: exactly_once %v, offsets_topic %q", k0.ExactlyOnce, k0.OffsetsTopic)
	}
	if !k1.ExactlyOnce || k1.OffsetsTopic != "my.offsets" {
		t.Errorf("sink 1: exactly_once %v, offsets_topic %q", k1.ExactlyOnce, k1.OffsetsTopic)
	}
	if k2.ExactlyOnce || k2.OffsetsTopic != "" {
		t.Errorf("sink 2: exactly_once %v, offsets_topic %q (default off)", k2.ExactlyOnce, k2.OffsetsTopic)
	}
	if _, errs := parseErrs(t, head+`  - kafka:
      brokers: [b1:9092]
      registry: {url: "http://sr:8081"}
      exactly_once: true
      offsets_topic: "bad topic"
`, nil); len(errs) == 0 {
		t.Error("invalid offsets_topic accepted")
	}
}
