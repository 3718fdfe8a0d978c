package kafka

import (
	"errors"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-cdc/sluice/integration/harness"
	"github.com/sluice-cdc/sluice/pipeline"
)

// Error classes on kfake, which enforces a topic's max.message.bytes and
// ACLs like a broker: a batch refused as too large is TooLarge, a table's
// topic the principal may not write or that does not exist is a
// *pipeline.TableError of that table, and the other tables go on.

// tableOf is fakeTable under another name (topic srv.public.<name>).
func tableOf(name string) *pipeline.Table {
	t := *fakeTable
	t.ID.Table = name
	return &t
}

// recOf is change n of table t, key n, with value v.
func recOf(t *pipeline.Table, n int, v string) pipeline.Record {
	r := fakeRec(n, 1<<30)
	r.Table, r.After[1] = t, v
	return r
}

// createTopic creates topic on c with the given configs.
func createTopic(t *testing.T, c *kfake.Cluster, topic string, configs map[string]*string, opts ...kgo.Opt) {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreateTopic(t.Context(), 1, 1, configs, topic); err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
}

// wantTableError fails unless err is a *pipeline.TableError of table whose
// message holds every one of want.
func wantTableError(t *testing.T, err error, table pipeline.TableID, want ...string) {
	t.Helper()
	var te *pipeline.TableError
	if !errors.As(err, &te) || te.Table != table {
		t.Fatalf("err = %v (%T), want a *pipeline.TableError of %s", err, err, table)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Fatalf("err = %v, want it to say %q", err, w)
		}
	}
	t.Logf("refused: %v", err)
}

// writeTooLarge writes ten records of 300 bytes to fakeTable's topic,
// whose max.message.bytes is 4096: Write fails as TooLarge (never
// dead-letters them), the same records pass in halves, and a record too
// large on its own fails as TooLarge alone (the runtime then dead-letters
// it). It returns the records written.
func writeTooLarge(t *testing.T, s *Sink) []pipeline.Record {
	t.Helper()
	var recs []pipeline.Record
	for i := range 10 {
		recs = append(recs, recOf(fakeTable, i, strings.Repeat("v", 300)))
	}
	err := s.Write(t.Context(), recs)
	var be *pipeline.BatchError
	if !pipeline.IsTooLarge(err) || errors.As(err, &be) || pipeline.IsFatal(err) {
		t.Fatalf("err = %v (%T), want TooLarge", err, err)
	}
	t.Logf("too large: %v", err)
	for _, half := range [][]pipeline.Record{recs[:5], recs[5:]} {
		if err := s.Write(t.Context(), half); err != nil {
			t.Fatalf("half the batch: %v", err)
		}
	}
	if err := s.Write(t.Context(), []pipeline.Record{recOf(fakeTable, 10, strings.Repeat("v", 5000))}); !pipeline.IsTooLarge(err) {
		t.Fatalf("a record too large alone: err = %v, want TooLarge", err)
	}
	return recs
}

// MESSAGE_TOO_LARGE refuses a partition's whole record batch, records of
// many inputs (writeTooLarge), with and without exactly-once; each record
// lands once.
func TestKfakeTooLarge(t *testing.T) {
	for _, eos := range []bool{false, true} {
		t.Run(map[bool]string{false: "AtLeastOnce", true: "ExactlyOnce"}[eos], func(t *testing.T) {
			c := fakeCluster(t)
			createTopic(t, c, fakeTopic, map[string]*string{"max.message.bytes": kadm.StringPtr("4096")})
			s := fakeSink(t, c, func(o *Options) {
				o.Producer.Compression = "none"
				o.ExactlyOnce, o.Pipeline = eos, "p"
			})
			recs := writeTooLarge(t, s)
			got := fakeVersions(t, c.ListenAddrs(), fakeTopic, eos)
			for i := range recs {
				if n := got[recs[i].Version.String()]; n != 1 {
					t.Errorf("record %d landed %d times", i, n)
				}
			}
		})
	}
}

// A principal that may write one table's topic and not another's: the
// other table is refused (TOPIC_AUTHORIZATION_FAILED, also when the sink
// may not create the topic), the first goes on. With and without
// exactly-once.
func TestKfakeTopicAuthorizationRefusesTable(t *testing.T) {
	allow := func(rt kmsg.ACLResourceType, name string, op kmsg.ACLOperation) kfake.ACL {
		return kfake.ACL{Resource: rt, Name: name, Pattern: kmsg.ACLResourcePatternTypeLiteral, Operation: op, Allow: true}
	}
	for _, eos := range []bool{false, true} {
		t.Run(map[bool]string{false: "AtLeastOnce", true: "ExactlyOnce"}[eos], func(t *testing.T) {
			c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.EnableSASL(), kfake.EnableACLs(),
				kfake.Superuser("PLAIN", "admin", "admin"),
				kfake.User("PLAIN", "sluice", "secret",
					allow(kmsg.ACLResourceTypeCluster, "kafka-cluster", kmsg.ACLOperationIdempotentWrite),
					allow(kmsg.ACLResourceTypeTopic, fakeTopic, kmsg.ACLOperationAll),
					allow(kmsg.ACLResourceTypeTopic, "srv.sluice.offsets", kmsg.ACLOperationAll),
					allow(kmsg.ACLResourceTypeTransactionalId, "sluice-p-kafka", kmsg.ACLOperationAll)))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			s := fakeSink(t, c, func(o *Options) {
				o.SASL = SASLOptions{Mechanism: "PLAIN", Username: "sluice", Password: "secret"}
				o.ExactlyOnce, o.Pipeline = eos, "p"
			})
			secret := tableOf("secret")
			err = s.Write(t.Context(), []pipeline.Record{recOf(fakeTable, 0, "a"), recOf(secret, 1, "b")})
			wantTableError(t, err, secret.ID, "srv.public.secret", "WRITE", kerr.TopicAuthorizationFailed.Message)
			if err := s.Write(t.Context(), []pipeline.Record{recOf(fakeTable, 2, "c")}); err != nil {
				t.Fatalf("the authorized table after the refusal: %v", err)
			}
		})
	}
}

// A table's topic that does not exist while create_topics is off is
// refused with the fix, whether the sink finds it missing before producing
// (it describes the topic) or only when producing (it may not describe
// it); a table whose topic exists goes on.
func TestKfakeMissingTopicRefusesTable(t *testing.T) {
	c := fakeCluster(t)
	createTopic(t, c, fakeTopic, nil)
	s := fakeSink(t, c, func(o *Options) { o.CreateTopics.Enabled = false })
	missing := tableOf("missing")
	batch := []pipeline.Record{recOf(fakeTable, 0, "a"), recOf(missing, 1, "b")}
	wantTableError(t, s.Write(t.Context(), batch), missing.ID, "srv.public.missing", "create_topics")

	c.ControlKey(int16(kmsg.DescribeConfigs), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		dr := req.(*kmsg.DescribeConfigsRequest)
		resp := dr.ResponseKind().(*kmsg.DescribeConfigsResponse)
		for _, r := range dr.Resources {
			rr := kmsg.NewDescribeConfigsResponseResource()
			rr.ResourceType, rr.ResourceName, rr.ErrorCode = r.ResourceType, r.ResourceName, kerr.TopicAuthorizationFailed.Code
			resp.Resources = append(resp.Resources, rr)
		}
		return resp, nil, true
	})
	wantTableError(t, s.Write(t.Context(), batch), missing.ID, "srv.public.missing", "create_topics", kerr.UnknownTopicOrPartition.Message)
	if err := s.Write(t.Context(), []pipeline.Record{recOf(fakeTable, 2, "c")}); err != nil {
		t.Fatalf("the table whose topic exists: %v", err)
	}
}

// testBrokerRefusals runs writeTooLarge and a missing topic with
// create_topics off against the real broker.
func testBrokerRefusals(t *testing.T, k *harness.Kafka) {
	reg, _ := registryFor(t)
	cl, err := k.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	topic := "refusals.public.items"
	if _, err := kadm.NewClient(cl).CreateTopic(t.Context(), 1, 1, map[string]*string{"max.message.bytes": kadm.StringPtr("4096")}, topic); err != nil {
		t.Fatal(err)
	}
	s := openSink(t, k, reg, func(o *Options) { o.ServerName, o.Producer.Compression = "refusals", "none" })
	writeTooLarge(t, s)
	s = openSink(t, k, reg, func(o *Options) { o.ServerName, o.CreateTopics.Enabled = "refusals", false })
	missing := tableOf("missing")
	err = s.Write(t.Context(), []pipeline.Record{recOf(fakeTable, 20, "a"), recOf(missing, 21, "b")})
	wantTableError(t, err, missing.ID, "refusals.public.missing", "create_topics")
	if err := s.Write(t.Context(), []pipeline.Record{recOf(fakeTable, 22, "c")}); err != nil {
		t.Fatalf("the table whose topic exists: %v", err)
	}
}
