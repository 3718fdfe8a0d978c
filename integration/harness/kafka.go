package harness

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// KafkaVersion is the Apache Kafka broker version the harness runs. Keep it
// in step with <kafka.version> in integration/kafka/pom.xml.
const KafkaVersion = "4.4.0"

// kafkaJarsTimeout bounds the one-time Maven fetch of the broker's jars.
const kafkaJarsTimeout = 10 * time.Minute

// KafkaOptions tunes a throwaway single-node Kafka (KRaft) broker.
type KafkaOptions struct {
	// AutoCreateTopics sets auto.create.topics.enable (default false).
	AutoCreateTopics bool
	// Partitions is num.partitions, for auto-created topics (default 1).
	Partitions int
	// Settings are extra or overriding server.properties entries.
	Settings map[string]string
	// JVMArgs replace the default heap and GC flags
	// (-Xmx512m -Xms256m -XX:+UseSerialGC).
	JVMArgs []string
	// StartTimeout bounds the start-up after storage formatting (default 90s).
	StartTimeout time.Duration
	// SASLUsers (user → password) add a secured listener (SecureBrokers)
	// with SASL mechanisms PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 for these
	// users: PLAIN from the listener's JAAS configuration, SCRAM
	// credentials written to the metadata log when the storage is
	// formatted. Names are letters, digits, '.', '_' and '-'; passwords
	// must not hold " \ , [ ] = or line breaks.
	SASLUsers map[string]string
	// TLS makes the secured listener (SecureBrokers) use TLS with a
	// certificate for 127.0.0.1 signed by a throwaway CA (CAFile):
	// SASL_SSL with SASLUsers, SSL without.
	TLS bool
	// Proxied adds a PLAINTEXT listener that clients reach only through a
	// harness Proxy (Kafka.Proxy, ProxiedBrokers): the broker advertises
	// the proxy's address on it, so a client bootstrapped there sends
	// every request through the proxy, which tests cut, slow down or
	// throttle. The PLAINTEXT listener stays direct.
	Proxied bool
}

// Kafka is a running throwaway Apache Kafka broker in combined
// broker+controller KRaft mode, PLAINTEXT on 127.0.0.1, with a secured
// listener too when KafkaOptions.SASLUsers or TLS ask for one
// (kafka_security.go).
type Kafka struct {
	Host           string
	Port           int // the broker (PLAINTEXT) listener
	ControllerPort int // the KRaft controller listener
	ClusterID      string
	Dir            string // config, data and logs
	JarDir         string
	proc           *process
	log            string
	// java and args start the broker (kafka.Kafka server.properties), for
	// Restart.
	java    string
	args    []string
	timeout time.Duration

	// SecurePort is the secured listener (SASL_PLAINTEXT, SASL_SSL or
	// SSL; see SecureBrokers), or 0 when there is none.
	SecurePort int
	// secureProtocol, saslUsers and caFile describe the secured listener.
	secureProtocol string
	saslUsers      map[string]string
	caFile         string
	// tlsKeyPEM and tlsChainPEM are the TLS listener's key and chain.
	tlsKeyPEM, tlsChainPEM string

	// Proxy fronts the proxied listener (KafkaOptions.Proxied), nil
	// without one; proxiedPort is that listener's own port.
	Proxy       *Proxy
	proxiedPort int
}

// ProxiedBrokers returns the bootstrap address of the proxied listener
// (KafkaOptions.Proxied): the proxy's.
func (k *Kafka) ProxiedBrokers() []string { return []string{k.Proxy.Addr()} }

// Brokers returns the bootstrap addresses ("127.0.0.1:port").
func (k *Kafka) Brokers() []string {
	return []string{k.Addr()}
}

// Addr returns the broker listener address "127.0.0.1:port".
func (k *Kafka) Addr() string { return k.Host + ":" + strconv.Itoa(k.Port) }

// Log returns the tail of the broker log.
func (k *Kafka) Log() string { return tail(k.log, 8000) }

// Client returns a franz-go client seeded with the broker; close it after use.
func (k *Kafka) Client(opts ...kgo.Opt) (*kgo.Client, error) {
	return kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(k.Brokers()...)}, opts...)...)
}

// CreateTopic creates topic with the given partitions (replication factor 1)
// and optional topic configs.
func (k *Kafka) CreateTopic(ctx context.Context, topic string, partitions int32, configs map[string]*string) error {
	cl, err := k.Client()
	if err != nil {
		return err
	}
	defer cl.Close()
	resp, err := kadm.NewClient(cl).CreateTopic(ctx, partitions, 1, configs, topic)
	if err != nil {
		return err
	}
	return resp.Err
}

// Stop shuts the broker down (SIGTERM, controlled shutdown) and removes its
// directory.
func (k *Kafka) Stop() error {
	err := k.proc.stop(syscall.SIGTERM, 30*time.Second)
	if k.Proxy != nil {
		k.Proxy.Close()
	}
	os.RemoveAll(k.Dir)
	return err
}

// Kill stops the broker with SIGKILL and keeps its directory (crash tests;
// see Restart).
func (k *Kafka) Kill() { _ = k.proc.stop(syscall.SIGKILL, time.Second) }

// Restart starts the broker again on the same directory (no re-format: the
// logs and the KRaft metadata are kept) and the same ports and cluster id,
// after a Kill (crash recovery) or on a running broker (which is stopped
// cleanly first). It returns once the broker is listed as unfenced again.
func (k *Kafka) Restart(ctx context.Context) error {
	// A broker that had to be killed is stopped all the same.
	_ = k.proc.stop(syscall.SIGTERM, 30*time.Second)
	return k.start(ctx)
}

// KafkaT starts a broker for a test and stops it at cleanup. Missing Java or
// jars (and no Maven to fetch them) skip the test, except in CI where they
// fail it.
func KafkaT(t testing.TB, opts ...KafkaOptions) *Kafka {
	t.Helper()
	return serverT(t, opts, StartKafka)
}

// StartKafka formats a KRaft log dir and starts a single-node broker on
// random 127.0.0.1 ports. It returns once a client can fetch metadata that
// lists the broker. Stop it with Stop.
func StartKafka(ctx context.Context, opts KafkaOptions) (*Kafka, error) {
	if err := checkSASLUsers(opts.SASLUsers); err != nil {
		return nil, err
	}
	java, err := JavaBinary()
	if err != nil {
		return nil, err
	}
	jars, err := KafkaJarDir(ctx)
	if err != nil {
		return nil, err
	}
	dir, err := mkTemp("sluice-kafka-", os.Getuid(), os.Getgid())
	if err != nil {
		return nil, err
	}
	timeout := opts.StartTimeout
	if timeout <= 0 {
		timeout = 90 * time.Second
	}
	return retryPortClash(ctx, dir, func() (*Kafka, error) { return startKafkaOnce(ctx, java, jars, dir, opts, timeout) })
}

func startKafkaOnce(ctx context.Context, java, jars, dir string, opts KafkaOptions, timeout time.Duration) (_ *Kafka, err error) {
	nports := 2
	secureProto := secureProtocolFor(opts)
	if secureProto != "" {
		nports++
	}
	if opts.Proxied {
		nports++
	}
	ports, err := freePorts(nports)
	if err != nil {
		return nil, err
	}
	port, cport := ports[0], ports[1]
	clusterID, err := newKafkaClusterID()
	if err != nil {
		return nil, err
	}
	k := &Kafka{Host: "127.0.0.1", Port: port, ControllerPort: cport, ClusterID: clusterID,
		Dir: dir, JarDir: jars, log: filepath.Join(dir, "server.log")}
	if secureProto != "" {
		k.SecurePort, k.secureProtocol = ports[2], secureProto
		if len(opts.SASLUsers) > 0 {
			k.saslUsers = make(map[string]string, len(opts.SASLUsers))
			for u, pw := range opts.SASLUsers {
				k.saslUsers[u] = pw
			}
		}
		if opts.TLS {
			if k.caFile, k.tlsKeyPEM, k.tlsChainPEM, err = writeKafkaTLS(dir); err != nil {
				return nil, fmt.Errorf("kafka tls certificates: %w", err)
			}
		}
	}

	if opts.Proxied {
		k.proxiedPort = ports[nports-1]
		if k.Proxy, err = StartProxy(fmt.Sprintf("127.0.0.1:%d", k.proxiedPort)); err != nil {
			return nil, err
		}
		defer func() {
			if err != nil {
				k.Proxy.Close()
			}
		}()
	}

	data := filepath.Join(dir, "data")
	if err := os.RemoveAll(data); err != nil {
		return nil, err
	}
	props := filepath.Join(dir, "server.properties")
	if err := os.WriteFile(props, []byte(k.serverProperties(data, opts)), 0o600); err != nil {
		return nil, err
	}
	log4j := filepath.Join(dir, "log4j2.properties")
	if err := os.WriteFile(log4j, []byte(kafkaLog4j(k.log)), 0o644); err != nil {
		return nil, err
	}
	cp := filepath.Join(jars, "*")
	jvm := opts.JVMArgs
	if len(jvm) == 0 {
		jvm = []string{"-Xmx512m", "-Xms256m", "-XX:+UseSerialGC"}
	}
	common := append(append(append([]string{}, jvm...), TestJVMFlags()...),
		"-Djava.awt.headless=true",
		"-Dlog4j2.configurationFile="+log4j,
		"-cp", cp)

	// Format the log dir as a standalone (single-voter, dynamic) quorum.
	fctx, cancel := context.WithTimeout(ctx, timeout)
	format := exec.CommandContext(fctx, java, append(append(append([]string{}, common...),
		"kafka.tools.StorageTool", "format",
		"-t", clusterID, "-c", props, "--standalone"), scramFormatArgs(opts.SASLUsers)...)...)
	format.Dir = dir
	out, err := format.CombinedOutput()
	cancel()
	if err != nil {
		return nil, fmt.Errorf("kafka storage format: %v\n%s%s", err, out, tail(k.log, 4000))
	}

	k.java, k.timeout = java, timeout
	k.args = append(append([]string{}, common...), "kafka.Kafka", props)
	if err := k.start(ctx); err != nil {
		return nil, err
	}
	return k, nil
}

// start runs the broker on the formatted directory and waits until the
// metadata lists it unfenced and names a controller.
func (k *Kafka) start(ctx context.Context) error {
	lf, err := os.OpenFile(k.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(k.java, k.args...)
	cmd.Dir = k.Dir
	cmd.Stdout, cmd.Stderr = lf, lf
	proc, err := startProcess(cmd)
	lf.Close()
	if err != nil {
		return fmt.Errorf("start kafka: %w", err)
	}
	k.proc = proc

	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Addr()), kgo.DialTimeout(time.Second),
		kgo.RetryBackoffFn(func(int) time.Duration { return 50 * time.Millisecond }))
	if err != nil {
		_ = proc.stop(syscall.SIGKILL, time.Second)
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	err = waitForCtx(ctx, "kafka", k.timeout, proc.exited, k.log, func() error {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		md, err := adm.BrokerMetadata(rctx)
		if err != nil {
			return err
		}
		// The metadata lists only unfenced brokers: once ours is there,
		// topics can be created and written.
		if len(md.Brokers) == 0 {
			return errors.New("metadata lists no unfenced broker yet")
		}
		if md.Controller < 0 {
			return errors.New("metadata names no controller yet")
		}
		if k.SecurePort != 0 {
			return k.probeSecure(ctx)
		}
		return nil
	})
	if err != nil {
		_ = proc.stop(syscall.SIGKILL, time.Second)
		return err
	}
	return nil
}

func (k *Kafka) serverProperties(data string, opts KafkaOptions) string {
	partitions := opts.Partitions
	if partitions <= 0 {
		partitions = 1
	}
	broker := fmt.Sprintf("127.0.0.1:%d", k.Port)
	controller := fmt.Sprintf("127.0.0.1:%d", k.ControllerPort)
	s := map[string]string{
		"process.roles":                       "broker,controller",
		"node.id":                             "1",
		"controller.quorum.bootstrap.servers": controller,
		"controller.listener.names":           "CONTROLLER",
		"listeners":                           "PLAINTEXT://" + broker + ",CONTROLLER://" + controller,
		"advertised.listeners":                "PLAINTEXT://" + broker + ",CONTROLLER://" + controller,
		"inter.broker.listener.name":          "PLAINTEXT",
		"listener.security.protocol.map":      "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
		"log.dirs":                            data,
		"num.partitions":                      strconv.Itoa(partitions),
		"default.replication.factor":          "1",
		"min.insync.replicas":                 "1",
		"auto.create.topics.enable":           strconv.FormatBool(opts.AutoCreateTopics),
		"group.initial.rebalance.delay.ms":    "0",
		// Internal topics: one replica, and few partitions so that the
		// first consumer group or transaction does not wait for 50.
		"offsets.topic.replication.factor":                 "1",
		"offsets.topic.num.partitions":                     "1",
		"transaction.state.log.replication.factor":         "1",
		"transaction.state.log.min.isr":                    "1",
		"transaction.state.log.num.partitions":             "1",
		"share.coordinator.state.topic.replication.factor": "1",
		"share.coordinator.state.topic.min.isr":            "1",
		// Small test machine: few threads, no long retention.
		"num.network.threads":               "2",
		"num.io.threads":                    "2",
		"num.recovery.threads.per.data.dir": "1",
		"log.retention.hours":               "24",
		"log.segment.bytes":                 strconv.Itoa(64 << 20),
	}
	for key, v := range k.secureSettings(opts) {
		s[key] = v
	}
	if k.Proxy != nil {
		s["listeners"] += fmt.Sprintf(",PROXIED://127.0.0.1:%d", k.proxiedPort)
		s["advertised.listeners"] += ",PROXIED://" + k.Proxy.Addr()
		s["listener.security.protocol.map"] += ",PROXIED:PLAINTEXT"
	}
	for key, v := range opts.Settings {
		s[key] = v
	}
	keys := make([]string, 0, len(s))
	for key := range s {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString("# Written by the sluice integration harness.\n")
	for _, key := range keys {
		fmt.Fprintf(&b, "%s=%s\n", key, escapeProperty(s[key]))
	}
	return b.String()
}

// freePorts returns n distinct ports that were free a moment ago.
func freePorts(n int) ([]int, error) {
	seen := map[int]bool{}
	out := make([]int, 0, n)
	for len(out) < n {
		p, err := FreePort()
		if err != nil {
			return nil, err
		}
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	return out, nil
}

// escapeProperty escapes a value for a Java .properties file.
func escapeProperty(v string) string {
	r := strings.NewReplacer(`\`, `\\`, "\n", `\n`, "\r", `\r`, "\t", `\t`)
	return r.Replace(v)
}

// kafkaLog4j is a log4j2 configuration that writes everything at INFO (and
// the chattiest loggers at WARN) to path.
func kafkaLog4j(path string) string {
	return `status = warn
name = sluice-kafka
appender.file.type = File
appender.file.name = file
appender.file.append = true
appender.file.fileName = ` + escapeProperty(path) + `
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
logger.statechange.name = state.change.logger
logger.statechange.level = WARN
logger.request.name = kafka.request.logger
logger.request.level = WARN
logger.authorizer.name = kafka.authorizer.logger
logger.authorizer.level = WARN
`
}

// newKafkaClusterID makes a random Kafka Uuid in its base64 form, as
// `kafka-storage random-uuid` does (never starting with '-').
func newKafkaClusterID() (string, error) {
	b := make([]byte, 16)
	for {
		if _, err := rand.Read(b); err != nil {
			return "", err
		}
		id := base64.RawURLEncoding.EncodeToString(b)
		if !strings.HasPrefix(id, "-") && !bytes.Equal(b, make([]byte, 16)) {
			return id, nil
		}
	}
}

// JavaBinary finds java: $JAVA_HOME/bin/java, then PATH.
func JavaBinary() (string, error) {
	if h := os.Getenv("JAVA_HOME"); h != "" {
		p := filepath.Join(h, "bin", "java")
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p, nil
		}
	}
	return lookBinary("Java 17+ runs the Kafka broker: apt-get install openjdk-17-jre-headless", "java")
}

// KafkaJarDir returns the directory holding the broker's jars: the one named
// by SLUICE_KAFKA_JARS, else the cache
// ${SLUICE_CACHE:-$HOME/.cache/sluice}/kafka-<KafkaVersion>, which is filled
// first by running scripts/kafka-jars.sh (Maven) from the module root when
// it is missing.
func KafkaJarDir(ctx context.Context) (string, error) {
	if d := os.Getenv("SLUICE_KAFKA_JARS"); d != "" {
		if !hasKafkaJar(d) {
			return "", fmt.Errorf("SLUICE_KAFKA_JARS=%s holds no kafka_2.13-*.jar", d)
		}
		return d, nil
	}
	cache, err := cacheRoot()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(cache, "kafka-"+KafkaVersion)
	if kafkaCacheComplete(dir) {
		return dir, nil
	}
	if err := runCacheScript(ctx, cache, "kafka-jars.sh", dir, "the Kafka jars", kafkaJarsTimeout); err != nil {
		return "", err
	}
	if !kafkaCacheComplete(dir) {
		return "", fmt.Errorf("scripts/kafka-jars.sh left no complete jar set in %s", dir)
	}
	return dir, nil
}

func kafkaCacheComplete(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, ".complete"))
	return err == nil && hasKafkaJar(dir)
}

func hasKafkaJar(dir string) bool {
	m, _ := filepath.Glob(filepath.Join(dir, "kafka_2.13-*.jar"))
	return len(m) > 0
}

// moduleRoot walks up from the working directory to the directory of go.mod.
// ModuleRoot is the directory of go.mod above the working directory.
func ModuleRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no go.mod above %s", wd)
		}
	}
}

func lastLine(s string) string {
	s = strings.TrimRight(s, "\n")
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

func tailBytes(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
