package kafka

import (
	"fmt"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/schema"
)

// javaMurmur2 is MurmurHash2 as Kafka's Java client computes it
// (org.apache.kafka.common.utils.Utils.murmur2), written from the
// algorithm: seed 0x9747b28c, m 0x5bd1e995, r 24, little-endian 4-byte
// blocks, a tail of up to 3 bytes, then the final avalanche.
func javaMurmur2(data []byte) int32 {
	const (
		seed = uint32(0x9747b28c)
		m    = uint32(0x5bd1e995)
		r    = 24
	)
	n := len(data)
	h := seed ^ uint32(n)
	for i := 0; i+4 <= n; i += 4 {
		k := uint32(data[i]) | uint32(data[i+1])<<8 | uint32(data[i+2])<<16 | uint32(data[i+3])<<24
		k *= m
		k ^= k >> r
		k *= m
		h *= m
		h ^= k
	}
	tail := n &^ 3
	switch n % 4 {
	case 3:
		h ^= uint32(data[tail+2]) << 16
		fallthrough
	case 2:
		h ^= uint32(data[tail+1]) << 8
		fallthrough
	case 1:
		h ^= uint32(data[tail])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return int32(h)
}

// javaPartition is the Java default partitioner for a keyed record:
// toPositive(murmur2(key)) % numPartitions.
func javaPartition(key []byte, partitions int) int {
	return int(javaMurmur2(key)&0x7fffffff) % partitions
}

func TestMurmur2MatchesJava(t *testing.T) {
	// Values from the Java client's own test of Utils.murmur2.
	for in, want := range map[string]int32{
		"21":                         -973932308,
		"foobar":                     -790332482,
		"a-little-bit-long-string":   -985981536,
		"a-little-bit-longer-string": -1486304829,
		"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
		"abc": 479470107,
	} {
		if got := javaMurmur2([]byte(in)); got != want {
			t.Errorf("murmur2(%q) = %d, want %d", in, got, want)
		}
	}
}

// The sink's partitioner puts keyed records where the Java client would.
func TestPartitionerIsJavaCompatible(t *testing.T) {
	o := Defaults([]string{"127.0.0.1:1"}, "srv")
	if err := o.normalize(); err != nil {
		t.Fatal(err)
	}
	tbl := &pipeline.Table{ID: pipeline.TableID{Schema: "public", Table: "t"}, KeyIdx: []int{0},
		Columns: []pipeline.Column{{Name: "id", Type: pipeline.TypeInt64, Key: true}}}
	codec, err := schema.NewCodec(tbl, schema.Options{ServerName: "srv"})
	if err != nil {
		t.Fatal(err)
	}
	part := kgo.StickyKeyPartitioner(nil).ForTopic("t")
	for _, n := range []int{1, 3, 7, 12} {
		for id := int64(0); id < 200; id++ {
			k, err := codec.EncodeKey(&pipeline.Record{Op: pipeline.OpInsert, Table: tbl, After: []any{id}})
			if err != nil {
				t.Fatal(err)
			}
			key := schema.Frame(1, k)
			if got, want := part.Partition(&kgo.Record{Key: key}, n), javaPartition(key, n); got != want {
				t.Fatalf("id %d, %d partitions: partition %d, Java %d", id, n, got, want)
			}
		}
	}
}

func TestTopicName(t *testing.T) {
	id := pipeline.TableID{Database: "shop", Schema: "public", Table: "order lines"}
	for _, c := range []struct{ tmpl, prefix, want string }{
		{DefaultTopicTemplate, "shop", "shop.public.order_lines"},
		{"{prefix}-{database}-{schema}-{table}", "p", "p-shop-public-order_lines"},
		{"cdc.{table}", "", "cdc.order_lines"},
		{"{prefix}.{schema}.{table}", "prod/eu", "prod_eu.public.order_lines"},
	} {
		got, err := TopicName(c.tmpl, c.prefix, id)
		if err != nil || got != c.want {
			t.Errorf("%q: %q %v, want %q", c.tmpl, got, err, c.want)
		}
	}
	if _, err := TopicName("{database}", "", pipeline.TableID{Table: "t"}); err == nil {
		t.Error("empty topic name accepted")
	}
	if _, err := TopicName(strings.Repeat("x", 250), "", id); err == nil {
		t.Error("overlong topic name accepted")
	}
}

func TestDescribeChange(t *testing.T) {
	old := &pipeline.Table{Columns: []pipeline.Column{
		{Name: "id", Type: pipeline.TypeInt64, Key: true},
		{Name: "n", Type: pipeline.TypeInt64},
		{Name: "gone", Type: pipeline.TypeString, Nullable: true},
		{Name: "amount", Type: pipeline.TypeDecimal, Precision: 10, Scale: 2, Nullable: true},
	}}
	cur := &pipeline.Table{Columns: []pipeline.Column{
		{Name: "id", Type: pipeline.TypeInt64, Key: true},
		{Name: "n", Type: pipeline.TypeString},
		{Name: "amount", Type: pipeline.TypeDecimal, Precision: 12, Scale: 2},
		{Name: "added", Type: pipeline.TypeArray, Elem: pipeline.TypeInt32},
	}}
	got := describeChange(old, cur)
	for _, want := range []string{
		"column n: type int64 → string",
		"column amount: type decimal(10,2) → decimal(12,2)",
		"column amount: nullable → NOT NULL",
		"added column added (int32[], NOT NULL)",
		"dropped column gone (string, nullable)",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("change %q lacks %q", got, want)
		}
	}
	if got := describeChange(nil, cur); !strings.Contains(got, "n (string, NOT NULL)") {
		t.Errorf("without old shape: %q", got)
	}
}

func TestOptions(t *testing.T) {
	reg := schema.NewMemRegistry()
	if _, err := New(Options{}, reg, nil); err == nil || !strings.Contains(err.Error(), "no brokers") {
		t.Errorf("no brokers: %v", err)
	}
	for _, mod := range []func(*Options){
		func(o *Options) { o.Envelope = "xml" },
		func(o *Options) { o.SubjectStrategy = "wild" },
		func(o *Options) { o.Compatibility = "SIDEWAYS" },
		func(o *Options) { o.IncompatiblePolicy = "ignore" },
		func(o *Options) { o.Producer.Compression = "brotli" },
		func(o *Options) { o.SASL.Mechanism = "GSSAPI" },
		func(o *Options) { o.TLS = TLSOptions{Enabled: true, CAFile: "/nonexistent/ca.pem"} },
		func(o *Options) { o.TLS = TLSOptions{Enabled: true, CertFile: "c.pem"} },
		func(o *Options) { o.TopicTemplate = strings.Repeat("x", 300) },
	} {
		o := Defaults([]string{"127.0.0.1:9092"}, "")
		mod(&o)
		if _, err := New(o, reg, nil); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
	if _, err := New(Defaults([]string{"b:9092"}, "srv"), nil, nil); err == nil {
		t.Error("nil registry accepted")
	}
	o := Options{Brokers: []string{"b:9092"}, SASL: SASLOptions{Mechanism: "scram-sha-512", Username: "u", Password: "p"}}
	s, err := New(o, reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if s.opts.Envelope != EnvelopeDebezium || s.opts.SubjectStrategy != StrategyTopic || s.opts.Compatibility != schema.CompatBackward ||
		s.opts.IncompatiblePolicy != PolicyFail || s.opts.Producer.Compression != "lz4" || s.opts.TopicTemplate != DefaultTopicTemplate {
		t.Errorf("normalized %+v", s.opts)
	}
	if err := s.Write(t.Context(), nil); err == nil {
		t.Error("write before open accepted")
	}
	// Batches may be in flight together, except transactional ones: a
	// batch retried after a later one committed would be skipped.
	if !s.Pipelines() {
		t.Error("a plain Kafka sink does not pipeline its writes")
	}
	o.ExactlyOnce = true
	if eos, err := New(o, reg, nil); err != nil || eos.Pipelines() {
		t.Errorf("an exactly-once sink pipelines its writes (%v)", err)
	}
}

func TestErrorClasses(t *testing.T) {
	wrapped := fmt.Errorf("produce: %w", kerr.InvalidRecord)
	if !isPermanent(wrapped) || isFatal(wrapped) {
		t.Error("an invalid record is not (only) permanent")
	}
	if isPermanent(kerr.MessageTooLarge) {
		t.Error("message too large is permanent: the batch must be split first")
	}
	if !isFatal(kerr.TopicAuthorizationFailed) || isPermanent(kerr.TopicAuthorizationFailed) {
		t.Error("authorization failure is not fatal")
	}
	if isPermanent(kerr.NotLeaderForPartition) || isFatal(kgo.ErrRecordTimeout) {
		t.Error("retriable errors classified as final")
	}
}
