package kafka

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
	"go.uber.org/zap/zaptest"

	"github.com/sluice-cdc/sluice/integration/harness"
	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/schema"
	"github.com/sluice-cdc/sluice/sinks/sinktest"
)

// Broker tests of the sink's TLS and SASL options against real listeners of
// the harness broker: SASL_PLAINTEXT with every mechanism, SSL, and
// SASL_SSL with SCRAM-SHA-512. Topics are created and read back over the
// same secured listener; the PLAINTEXT listener is not used.

// secUsers are the SASL users of the secured brokers.
var secUsers = map[string]string{"alice": "alice-secret", "bob": "bob-s3cret!"}

// secTable is the table the security tests write.
var secTable = &pipeline.Table{ID: pipeline.TableID{Database: "shop", Schema: "public", Table: "secured"},
	Columns: []pipeline.Column{{Name: "id", Type: pipeline.TypeInt64, Key: true}, {Name: "v", Type: pipeline.TypeString, Nullable: true}},
	KeyIdx:  []int{0}, Generation: 1}

// secTopic is the topic of secTable for server name server.
func secTopic(server string) string { return server + ".public.secured" }

// secBatch is n inserts into secTable tagged with tag.
func secBatch(n int, tag string) []pipeline.Record {
	out := make([]pipeline.Record, n)
	for i := range out {
		out[i] = pipeline.Record{Op: pipeline.OpInsert, Table: secTable, After: []any{int64(i), fmt.Sprintf("%s-%d", tag, i)},
			Version: pipeline.Version{0, 9, 0, uint64(i + 1)}, EventTime: time.UnixMilli(1_700_000_000_000 + int64(i))}
	}
	return out
}

// secServer is a topic prefix of its own for the running (sub)test.
func secServer(t *testing.T) string {
	n := []byte(strings.ToLower(t.Name()))
	for i, c := range n {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9') {
			n[i] = '_'
		}
	}
	return string(n)
}

// secOptions are the sink options for the secured listener of k, with
// topics created and delivery bounded.
func secOptions(k *harness.Kafka, server string) Options {
	o := Defaults(k.SecureBrokers(), server)
	o.CreateTopics = TopicOptions{Enabled: true, Partitions: 2, ReplicationFactor: 1}
	o.Producer.DeliveryTimeout = 20 * time.Second
	return o
}

// secNewSink builds a sink from o and opens it within 30s; it returns the
// sink (closed at cleanup) and Open's error.
func secNewSink(t *testing.T, o Options, reg schema.Registry) (*Sink, error) {
	t.Helper()
	s, err := New(o, reg, zaptest.NewLogger(t))
	if err != nil {
		t.Fatalf("new: %v", err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	return s, s.Open(ctx)
}

// secConsumerOpts are the client options for reading with the same
// security settings as o, built independently of the sink's code.
func secConsumerOpts(t *testing.T, o Options) []kgo.Opt {
	t.Helper()
	opts := []kgo.Opt{kgo.SeedBrokers(o.Brokers...), kgo.DialTimeout(5 * time.Second)}
	if o.TLS.Enabled {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12}
		if o.TLS.CAFile != "" {
			cfg.RootCAs = x509.NewCertPool()
			if !cfg.RootCAs.AppendCertsFromPEM(mustRead(t, o.TLS.CAFile)) {
				t.Fatalf("no certificate in %s", o.TLS.CAFile)
			}
		}
		opts = append(opts, kgo.DialTLSConfig(cfg))
	}
	if o.SASL.Mechanism != "" {
		opts = append(opts, secMechanism(t, o.SASL))
	}
	return opts
}

// secMechanism is the franz-go SASL option of a.
func secMechanism(t *testing.T, a SASLOptions) kgo.Opt {
	t.Helper()
	switch a.Mechanism {
	case "PLAIN":
		return kgo.SASL(plain.Auth{User: a.Username, Pass: a.Password}.AsMechanism())
	case "SCRAM-SHA-256":
		return kgo.SASL(scram.Auth{User: a.Username, Pass: a.Password}.AsSha256Mechanism())
	case "SCRAM-SHA-512":
		return kgo.SASL(scram.Auth{User: a.Username, Pass: a.Password}.AsSha512Mechanism())
	}
	t.Fatalf("unknown mechanism %q", a.Mechanism)
	return nil
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// writeAndReadBack writes a batch of n records through an open sink and
// reads them back over the same secured listener with a consumer of
// readOpts, checking every key, value and version.
func writeAndReadBack(t *testing.T, s *Sink, o Options, readOpts []kgo.Opt, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	batch := secBatch(n, o.ServerName)
	if err := s.Write(ctx, batch); err != nil {
		t.Fatalf("write: %v", err)
	}
	topic := secTopic(o.ServerName)
	cl, err := kgo.NewClient(append(readOpts, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var got []*kgo.Record
	for len(got) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("topic %s: read %d of %d records before the deadline", topic, len(got), n)
		}
		fs.EachError(func(tp string, p int32, err error) { t.Logf("fetch %s/%d: %v", tp, p, err) })
		got = append(got, fs.Records()...)
	}
	if len(got) != n {
		t.Fatalf("topic %s: %d records, want %d", topic, len(got), n)
	}
	codec, err := schema.NewCodec(secTable, schema.Options{ConnectorName: "postgresql", ServerName: o.ServerName, Unchanged: true})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int64]bool{}
	for _, m := range got {
		_, kp, err := schema.Unframe(m.Key)
		if err != nil {
			t.Fatal(err)
		}
		key, err := codec.DecodeKey(kp)
		if err != nil {
			t.Fatal(err)
		}
		id := key[0].(int64)
		if id < 0 || id >= int64(n) || seen[id] {
			t.Fatalf("unexpected or repeated key %d", id)
		}
		seen[id] = true
		_, vp, err := schema.Unframe(m.Value)
		if err != nil {
			t.Fatal(err)
		}
		env, err := codec.DecodeEnvelope(vp)
		if err != nil {
			t.Fatal(err)
		}
		want := batch[id]
		if env.Op != "c" || !sinktest.Equal(env.After, want.After) {
			t.Errorf("key %d: op %q after %v, want c %v", id, env.Op, env.After, want.After)
		}
		if v, _ := header(m, headerVersion); v != want.Version.String() {
			t.Errorf("key %d: version header %q, want %s", id, v, want.Version)
		}
	}
}

// TestKafkaSinkSASL: over SASL_PLAINTEXT every mechanism writes and reads
// back, and a wrong password is refused at Open with an authentication
// error.
func TestKafkaSinkSASL(t *testing.T) {
	harness.SkipShort(t, "starts a Kafka broker")
	k := harness.KafkaT(t, harness.KafkaOptions{SASLUsers: secUsers})
	if p := k.SecurityProtocol(); p != "SASL_PLAINTEXT" {
		t.Fatalf("secured listener is %s, want SASL_PLAINTEXT", p)
	}
	for _, mech := range []string{"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"} {
		t.Run(mech, func(t *testing.T) {
			reg, _ := registryFor(t)
			o := secOptions(k, secServer(t))
			o.SASL = SASLOptions{Mechanism: mech, Username: "bob", Password: secUsers["bob"]}
			s, err := secNewSink(t, o, reg)
			if err != nil {
				t.Fatalf("open: %v\n%s", err, k.Log())
			}
			writeAndReadBack(t, s, o, secConsumerOpts(t, o), 25)
		})
		t.Run(mech+"/WrongPassword", func(t *testing.T) {
			reg, _ := registryFor(t)
			o := secOptions(k, secServer(t))
			o.SASL = SASLOptions{Mechanism: mech, Username: "alice", Password: "not-" + secUsers["alice"]}
			_, err := secNewSink(t, o, reg)
			checkAuthFailed(t, err)
		})
	}
	t.Run("UnknownUser", func(t *testing.T) {
		reg, _ := registryFor(t)
		o := secOptions(k, secServer(t))
		o.SASL = SASLOptions{Mechanism: "SCRAM-SHA-256", Username: "mallory", Password: "whatever"}
		_, err := secNewSink(t, o, reg)
		checkAuthFailed(t, err)
	})
	t.Run("NoSASL", func(t *testing.T) {
		// A client that does not authenticate gets no answer from a SASL
		// listener: Open fails (bounded by its context) instead of
		// hanging.
		reg, _ := registryFor(t)
		o := secOptions(k, secServer(t))
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		s, err := New(o, reg, zaptest.NewLogger(t))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close(context.Background())
		if err := s.Open(ctx); err == nil {
			t.Fatal("open without SASL on a SASL listener succeeded")
		} else {
			t.Logf("open without SASL: %v", err)
		}
	})
}

// checkAuthFailed checks that Open was refused with SASL authentication
// failure: the broker's SASL_AUTHENTICATION_FAILED (a non-retriable Kafka
// error) with its message.
//
// The sink's Open returns it as a plain error, not pipeline.Fatal, so the
// runtime's openSink retries it (forever unless RetryMaxAttempts is set).
// Write would mark the same code Fatal (isFatal): that applies to a later
// connection of an open sink failing to authenticate (credentials rotated
// while it runs).
func checkAuthFailed(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		t.Fatal("open with bad credentials succeeded")
	}
	if !errors.Is(err, kerr.SaslAuthenticationFailed) {
		t.Fatalf("open: %v; want SASL_AUTHENTICATION_FAILED", err)
	}
	if !strings.Contains(strings.ToLower(err.Error()), "authentication failed") {
		t.Errorf("open error does not say authentication failed: %v", err)
	}
	if kerr.IsRetriable(err) {
		t.Errorf("open error is retriable for Kafka: %v", err)
	}
	if !isFatal(err) {
		t.Errorf("sink's isFatal does not classify %v as needing an operator", err)
	}
	if !pipeline.IsFatal(err) {
		t.Errorf("open error is not fatal, so the runtime would retry it forever: %v", err)
	}
}

// TestKafkaSinkTLS: over SSL the sink trusting the harness CA writes and
// reads back; a client without the CA is refused with a certificate error;
// InsecureSkipVerify connects without it.
func TestKafkaSinkTLS(t *testing.T) {
	harness.SkipShort(t, "starts a Kafka broker")
	k := harness.KafkaT(t, harness.KafkaOptions{TLS: true})
	if p := k.SecurityProtocol(); p != "SSL" || k.CAFile() == "" {
		t.Fatalf("secured listener is %s with CA %q, want SSL and a CA file", p, k.CAFile())
	}
	t.Run("CAFile", func(t *testing.T) {
		reg, _ := registryFor(t)
		o := secOptions(k, secServer(t))
		o.TLS = TLSOptions{Enabled: true, CAFile: k.CAFile()}
		s, err := secNewSink(t, o, reg)
		if err != nil {
			t.Fatalf("open: %v\n%s", err, k.Log())
		}
		writeAndReadBack(t, s, o, secConsumerOpts(t, o), 25)
	})
	t.Run("NoCA", func(t *testing.T) {
		reg, _ := registryFor(t)
		o := secOptions(k, secServer(t))
		o.TLS = TLSOptions{Enabled: true} // system roots only
		_, err := secNewSink(t, o, reg)
		checkCertRefused(t, err)
	})
	t.Run("InsecureSkipVerify", func(t *testing.T) {
		reg, _ := registryFor(t)
		o := secOptions(k, secServer(t))
		o.TLS = TLSOptions{Enabled: true, InsecureSkipVerify: true}
		s, err := secNewSink(t, o, reg)
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		ro := o
		ro.TLS.InsecureSkipVerify = false
		ro.TLS.CAFile = k.CAFile()
		writeAndReadBack(t, s, o, secConsumerOpts(t, ro), 5)
	})
	t.Run("PlaintextClient", func(t *testing.T) {
		// A client without TLS gets no Kafka answer from a TLS listener.
		reg, _ := registryFor(t)
		o := secOptions(k, secServer(t))
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		s, err := New(o, reg, zaptest.NewLogger(t))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close(context.Background())
		if err := s.Open(ctx); err == nil {
			t.Fatal("open without TLS on a TLS listener succeeded")
		}
	})
}

// checkCertRefused checks that Open failed verifying the broker's
// certificate.
func checkCertRefused(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		t.Fatal("open without the CA succeeded")
	}
	var verr *tls.CertificateVerificationError
	var uerr x509.UnknownAuthorityError
	if !errors.As(err, &verr) && !errors.As(err, &uerr) {
		t.Fatalf("open: %v; want a certificate verification error", err)
	}
	if !strings.Contains(err.Error(), "certificate") {
		t.Errorf("open error does not mention the certificate: %v", err)
	}
	if !pipeline.IsFatal(err) {
		t.Errorf("open error is not fatal, so the runtime would retry it forever: %v", err)
	}
}

// TestKafkaSinkSASLSSL: SASL_SSL with SCRAM-SHA-512 writes and reads back;
// a wrong password and a missing CA are each refused.
func TestKafkaSinkSASLSSL(t *testing.T) {
	harness.SkipShort(t, "starts a Kafka broker")
	k := harness.KafkaT(t, harness.KafkaOptions{SASLUsers: secUsers, TLS: true})
	if p := k.SecurityProtocol(); p != "SASL_SSL" {
		t.Fatalf("secured listener is %s, want SASL_SSL", p)
	}
	scram := SASLOptions{Mechanism: "SCRAM-SHA-512", Username: "alice", Password: secUsers["alice"]}
	t.Run("SCRAM-SHA-512", func(t *testing.T) {
		reg, _ := registryFor(t)
		o := secOptions(k, secServer(t))
		o.TLS = TLSOptions{Enabled: true, CAFile: k.CAFile()}
		o.SASL = scram
		s, err := secNewSink(t, o, reg)
		if err != nil {
			t.Fatalf("open: %v\n%s", err, k.Log())
		}
		writeAndReadBack(t, s, o, secConsumerOpts(t, o), 40)
	})
	t.Run("WrongPassword", func(t *testing.T) {
		reg, _ := registryFor(t)
		o := secOptions(k, secServer(t))
		o.TLS = TLSOptions{Enabled: true, CAFile: k.CAFile()}
		o.SASL = scram
		o.SASL.Password = "wrong"
		_, err := secNewSink(t, o, reg)
		checkAuthFailed(t, err)
	})
	t.Run("NoCA", func(t *testing.T) {
		reg, _ := registryFor(t)
		o := secOptions(k, secServer(t))
		o.TLS = TLSOptions{Enabled: true}
		o.SASL = scram
		_, err := secNewSink(t, o, reg)
		checkCertRefused(t, err)
	})
	t.Run("ExactlyOnce", func(t *testing.T) {
		// Transactions (InitProducerID, AddPartitions, EndTxn and the
		// high-water mark topic) work over SASL_SSL as well.
		reg, _ := registryFor(t)
		o := secOptions(k, secServer(t))
		o.TLS = TLSOptions{Enabled: true, CAFile: k.CAFile()}
		o.SASL = scram
		o.ExactlyOnce, o.Pipeline = true, "p"
		s, err := New(o, reg, zaptest.NewLogger(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close(context.Background()) })
		secOpenRetrying(t, s)
		writeAndReadBack(t, s, o, append(secConsumerOpts(t, o), kgo.FetchIsolationLevel(kgo.ReadCommitted())), 10)
	})
}

// secOpenRetrying opens s as the runtime does, retrying errors not marked
// fatal (an exactly-once sink's Open reports a just-created offsets topic
// that the metadata does not list yet as such an error), for up to 30s.
func secOpenRetrying(t *testing.T, s *Sink) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for attempt := 1; ; attempt++ {
		err := s.Open(ctx)
		if err == nil {
			return
		}
		if pipeline.IsFatal(err) {
			t.Fatalf("open: %v", err)
		}
		t.Logf("open attempt %d: %v", attempt, err)
		select {
		case <-ctx.Done():
			t.Fatalf("open: no success before the deadline: %v", err)
		case <-time.After(100 * time.Millisecond): // retry backoff
		}
	}
}
