package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestKafkaProduceConsume(t *testing.T) {
	SkipShort(t, "starts a JVM broker")
	start := time.Now()
	k := KafkaT(t, KafkaOptions{Proxied: true})
	t.Logf("kafka %s ready at %v in %s (cluster %s)", KafkaVersion, k.Brokers(), time.Since(start).Round(time.Millisecond), k.ClusterID)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	const topic = "sluice-harness-test"
	admCl, err := k.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer admCl.Close()
	adm := kadm.NewClient(admCl)
	resp, err := adm.CreateTopic(ctx, 3, 1, nil, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("create topic: %v\n%s", err, k.Log())
	}

	// Idempotent writes are franz-go's default; they need acks=all.
	prod, err := k.Client(
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
	)
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	const n = 100
	want := make(map[string]string, n)
	recs := make([]*kgo.Record, 0, n)
	for i := range n {
		key, val := fmt.Sprintf("k%03d", i), fmt.Sprintf("value-%d-%s", i, strings.Repeat("x", i))
		want[key] = val
		recs = append(recs, &kgo.Record{Key: []byte(key), Value: []byte(val), Partition: int32(i % 3)})
	}
	pstart := time.Now()
	if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v\n%s", err, k.Log())
	}
	t.Logf("produced %d records (acks=all, idempotent) in %s", n, time.Since(pstart).Round(time.Millisecond))

	cons, err := k.Client(
		kgo.ConsumeTopics(topic),
		kgo.ConsumerGroup("sluice-harness-group"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
	)
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	got := make(map[string]string, n)
	lastOffset := map[int32]int64{}
	cstart := time.Now()
	for len(got) < n {
		fs := cons.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %d of %d records before the deadline\n%s", len(got), n, k.Log())
		}
		if errs := fs.Errors(); len(errs) > 0 {
			t.Fatalf("fetch: %v", errs)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if prev, ok := lastOffset[r.Partition]; ok && r.Offset <= prev {
				t.Errorf("partition %d: offset %d after %d", r.Partition, r.Offset, prev)
			}
			lastOffset[r.Partition] = r.Offset
			var i int
			if _, err := fmt.Sscanf(string(r.Key), "k%d", &i); err != nil || want[string(r.Key)] == "" {
				t.Errorf("unexpected record %q", r.Key)
			} else if r.Partition != int32(i%3) {
				t.Errorf("record %q on partition %d, produced to %d", r.Key, r.Partition, i%3)
			}
			if _, dup := got[string(r.Key)]; dup {
				t.Errorf("duplicate record %q", r.Key)
			}
			got[string(r.Key)] = string(r.Value)
		})
	}
	t.Logf("consumed %d records in %s", len(got), time.Since(cstart).Round(time.Millisecond))
	for key, v := range want {
		if got[key] != v {
			t.Errorf("record %s: got %q, want %q", key, got[key], v)
		}
	}
	if err := cons.CommitUncommittedOffsets(ctx); err != nil {
		t.Errorf("commit offsets: %v", err)
	}

	// The high watermarks add up to what was produced.
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	ends.Each(func(o kadm.ListedOffset) { total += o.Offset })
	if total != n {
		t.Errorf("end offsets add up to %d, want %d", total, n)
	}

	cons.Close()
	checkProxiedListener(ctx, t, k, topic)
	sstart := time.Now()
	logTail := k.Log()
	if err := k.Stop(); err != nil {
		t.Errorf("stop: %v", err)
	}
	t.Logf("stopped in %s", time.Since(sstart).Round(time.Millisecond))
	if os.Getenv("SLUICE_KAFKA_DUMP_LOG") != "" {
		t.Log(logTail)
	}
}

func TestKafkaClusterID(t *testing.T) {
	for range 100 {
		id, err := newKafkaClusterID()
		if err != nil {
			t.Fatal(err)
		}
		if len(id) != 22 || strings.HasPrefix(id, "-") {
			t.Fatalf("bad cluster id %q", id)
		}
	}
}

func TestKafkaJarDirEnv(t *testing.T) {
	d := t.TempDir()
	t.Setenv("SLUICE_KAFKA_JARS", d)
	if _, err := KafkaJarDir(context.Background()); err == nil {
		t.Fatal("an empty SLUICE_KAFKA_JARS dir was accepted")
	}
	if err := os.WriteFile(filepath.Join(d, "kafka_2.13-"+KafkaVersion+".jar"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := KafkaJarDir(context.Background())
	if err != nil || got != d {
		t.Fatalf("KafkaJarDir = %q, %v; want %q", got, err, d)
	}
}

func TestKafkaServerProperties(t *testing.T) {
	k := &Kafka{Host: "127.0.0.1", Port: 1234, ControllerPort: 5678}
	p := k.serverProperties("/d", KafkaOptions{AutoCreateTopics: true, Settings: map[string]string{"num.partitions": "7"}})
	for _, want := range []string{
		"process.roles=broker,controller\n",
		"listeners=PLAINTEXT://127.0.0.1:1234,CONTROLLER://127.0.0.1:5678\n",
		"controller.quorum.bootstrap.servers=127.0.0.1:5678\n",
		"auto.create.topics.enable=true\n",
		"num.partitions=7\n",
		"offsets.topic.replication.factor=1\n",
		"log.dirs=/d\n",
	} {
		if !strings.Contains(p, want) {
			t.Errorf("server.properties lacks %q:\n%s", want, p)
		}
	}
}

// checkProxiedListener checks that a client bootstrapped on the proxied
// listener is told only the proxy's address and so goes through it: a
// produce fails while the proxy is cut and passes once it is restored.
func checkProxiedListener(ctx context.Context, t *testing.T, k *Kafka, topic string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.ProxiedBrokers()...), kgo.DefaultProduceTopic(topic),
		kgo.RequestTimeoutOverhead(time.Second), kgo.RetryTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	md, err := kadm.NewClient(cl).BrokerMetadata(ctx)
	if err != nil {
		t.Fatalf("metadata through the proxy: %v", err)
	}
	if len(md.Brokers) != 1 || fmt.Sprintf("%s:%d", md.Brokers[0].Host, md.Brokers[0].Port) != k.Proxy.Addr() {
		t.Fatalf("proxied listener advertises %v, want only the proxy %s", md.Brokers, k.Proxy.Addr())
	}
	k.Proxy.Cut()
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	err = cl.ProduceSync(cctx, &kgo.Record{Value: []byte("through a cut proxy")}).FirstErr()
	cancel()
	if err == nil {
		t.Fatal("a produce passed through a cut proxy")
	}
	k.Proxy.Restore()
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("through the proxy")}).FirstErr(); err != nil {
		t.Fatalf("produce through the restored proxy: %v", err)
	}
}
