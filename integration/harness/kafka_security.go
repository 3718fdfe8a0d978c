package harness

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
)

// The secured listener of a broker started with KafkaOptions.SASLUsers or
// KafkaOptions.TLS. The PLAINTEXT broker listener (Brokers, Client,
// CreateTopic) and the controller listener stay as they are, so the
// harness's own readiness check and administration do not authenticate.
const secureListener = "SECURE"

// KafkaSASLMechanisms are the SASL mechanisms the secured listener enables.
var KafkaSASLMechanisms = []string{"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}

// SecureBrokers returns the bootstrap address of the secured listener
// (SASL_PLAINTEXT, SASL_SSL or SSL), or nil when the broker has none.
func (k *Kafka) SecureBrokers() []string {
	if k.SecurePort == 0 {
		return nil
	}
	return []string{k.Host + ":" + strconv.Itoa(k.SecurePort)}
}

// SecurityProtocol is the secured listener's protocol: "SASL_PLAINTEXT",
// "SASL_SSL", "SSL", or "" when the broker has no secured listener.
func (k *Kafka) SecurityProtocol() string { return k.secureProtocol }

// CAFile returns the path of the PEM certificate of the throwaway CA that
// signed the TLS listener's certificate (for 127.0.0.1 and localhost), or
// "" when the broker runs without TLS.
func (k *Kafka) CAFile() string { return k.caFile }

// SecureClient returns a franz-go client seeded with the secured listener,
// trusting CAFile when TLS is on and, when SASL users are configured,
// authenticating as user with the PLAIN mechanism. Close it after use.
func (k *Kafka) SecureClient(user, password string, opts ...kgo.Opt) (*kgo.Client, error) {
	if k.SecurePort == 0 {
		return nil, errors.New("kafka: no secured listener (set KafkaOptions.SASLUsers or TLS)")
	}
	base := []kgo.Opt{kgo.SeedBrokers(k.SecureBrokers()...)}
	if k.caFile != "" {
		cfg, err := k.clientTLS()
		if err != nil {
			return nil, err
		}
		base = append(base, kgo.DialTLSConfig(cfg))
	}
	if strings.HasPrefix(k.secureProtocol, "SASL_") {
		base = append(base, kgo.SASL(plain.Auth{User: user, Pass: password}.AsMechanism()))
	}
	return kgo.NewClient(append(base, opts...)...)
}

func (k *Kafka) clientTLS() (*tls.Config, error) {
	b, err := os.ReadFile(k.caFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("kafka: %s holds no certificate", k.caFile)
	}
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}

// secureProtocolFor is the protocol of the secured listener for opts.
func secureProtocolFor(opts KafkaOptions) string {
	switch {
	case len(opts.SASLUsers) > 0 && opts.TLS:
		return "SASL_SSL"
	case len(opts.SASLUsers) > 0:
		return "SASL_PLAINTEXT"
	case opts.TLS:
		return "SSL"
	}
	return ""
}

var saslUserName = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)

// checkSASLUsers refuses names and passwords that the JAAS configuration
// or the StorageTool's --add-scram syntax could not carry verbatim.
func checkSASLUsers(users map[string]string) error {
	for u, pw := range users {
		if !saslUserName.MatchString(u) {
			return fmt.Errorf("kafka: SASL user name %q: want letters, digits, '.', '_' or '-'", u)
		}
		if pw == "" || strings.ContainsAny(pw, "\"\\,[]=\r\n") {
			return fmt.Errorf("kafka: SASL password of %q: must be non-empty and hold none of \" \\ , [ ] = or line breaks", u)
		}
	}
	return nil
}

// sortedUsers returns the user names in order (deterministic configs).
func sortedUsers(users map[string]string) []string {
	names := make([]string, 0, len(users))
	for u := range users {
		names = append(names, u)
	}
	sort.Strings(names)
	return names
}

// secureSettings are the server.properties entries of the secured
// listener, added to (and overriding) the PLAINTEXT-only defaults.
func (k *Kafka) secureSettings(opts KafkaOptions) map[string]string {
	if k.SecurePort == 0 {
		return nil
	}
	broker := fmt.Sprintf("127.0.0.1:%d", k.Port)
	controller := fmt.Sprintf("127.0.0.1:%d", k.ControllerPort)
	secure := fmt.Sprintf("127.0.0.1:%d", k.SecurePort)
	s := map[string]string{
		"listeners":            "PLAINTEXT://" + broker + ",CONTROLLER://" + controller + "," + secureListener + "://" + secure,
		"advertised.listeners": "PLAINTEXT://" + broker + ",CONTROLLER://" + controller + "," + secureListener + "://" + secure,
		"listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT," +
			secureListener + ":" + k.secureProtocol,
	}
	ln := "listener.name." + strings.ToLower(secureListener) + "."
	if len(opts.SASLUsers) > 0 {
		s[ln+"sasl.enabled.mechanisms"] = strings.Join(KafkaSASLMechanisms, ",")
		var plainJAAS strings.Builder
		plainJAAS.WriteString("org.apache.kafka.common.security.plain.PlainLoginModule required")
		for _, u := range sortedUsers(opts.SASLUsers) {
			fmt.Fprintf(&plainJAAS, " user_%s=\"%s\"", u, opts.SASLUsers[u])
		}
		plainJAAS.WriteString(";")
		s[ln+"plain.sasl.jaas.config"] = plainJAAS.String()
		// The SCRAM credentials themselves are in the metadata log
		// (StorageTool format --add-scram); the login module only has to
		// be named for the listener.
		for _, m := range []string{"scram-sha-256", "scram-sha-512"} {
			s[ln+m+".sasl.jaas.config"] = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
		}
	}
	if opts.TLS {
		s[ln+"ssl.keystore.type"] = "PEM"
		s[ln+"ssl.keystore.key"] = k.tlsKeyPEM
		s[ln+"ssl.keystore.certificate.chain"] = k.tlsChainPEM
		s[ln+"ssl.client.auth"] = "none"
	}
	return s
}

// scramFormatArgs are the StorageTool format arguments that add every
// SASL user's SCRAM-SHA-256 and SCRAM-SHA-512 credentials to the metadata
// log.
func scramFormatArgs(users map[string]string) []string {
	var args []string
	for _, u := range sortedUsers(users) {
		for _, m := range []string{"SCRAM-SHA-256", "SCRAM-SHA-512"} {
			args = append(args, "--add-scram", fmt.Sprintf(`%s=[name=%s,password="%s"]`, m, u, users[u]))
		}
	}
	return args
}

// writeKafkaTLS makes a throwaway CA (written to dir/ca.pem) and a server
// certificate it signs for 127.0.0.1, ::1 and localhost; it returns the
// CA file and the server's PKCS#8 key and certificate chain in PEM, as
// ssl.keystore.type=PEM takes them inline.
func writeKafkaTLS(dir string) (caFile, keyPEM, chainPEM string, err error) {
	now := time.Now()
	serial := func() (*big.Int, error) { return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126)) }

	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", "", err
	}
	caSerial, err := serial()
	if err != nil {
		return "", "", "", err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          caSerial,
		Subject:               pkix.Name{CommonName: "sluice harness throwaway CA", Organization: []string{"sluice tests"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(7 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return "", "", "", err
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return "", "", "", err
	}

	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", "", err
	}
	srvSerial, err := serial()
	if err != nil {
		return "", "", "", err
	}
	srvTmpl := &x509.Certificate{
		SerialNumber: srvSerial,
		Subject:      pkix.Name{CommonName: "127.0.0.1", Organization: []string{"sluice tests"}},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(7 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		DNSNames:     []string{"localhost"},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, caCert, &srvKey.PublicKey, caKey)
	if err != nil {
		return "", "", "", err
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(srvKey)
	if err != nil {
		return "", "", "", err
	}
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	caFile = filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(caFile, caPEM, 0o644); err != nil {
		return "", "", "", err
	}
	keyPEM = string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8}))
	chainPEM = string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srvDER})) + string(caPEM)
	return caFile, keyPEM, chainPEM, nil
}

// probeSecure checks that the secured listener serves metadata: over TLS
// with the CA and, with SASL users, authenticated as the first of them
// (PLAIN, whose credentials need no metadata). SCRAM credentials come from
// the metadata log, which an unfenced broker has replayed.
func (k *Kafka) probeSecure(ctx context.Context) error {
	var user, pw string
	if len(k.saslUsers) > 0 {
		user = sortedUsers(k.saslUsers)[0]
		pw = k.saslUsers[user]
	}
	cl, err := k.SecureClient(user, pw, kgo.DialTimeout(time.Second))
	if err != nil {
		return err
	}
	defer cl.Close()
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	md, err := kadm.NewClient(cl).BrokerMetadata(rctx)
	if err != nil {
		return fmt.Errorf("secured listener: %w", err)
	}
	if len(md.Brokers) == 0 {
		return errors.New("secured listener: metadata lists no broker yet")
	}
	return nil
}
