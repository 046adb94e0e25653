package config

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// kafkaEnv is a Lookup over key/value pairs.
func kafkaEnv(kv ...string) Lookup {
	m := map[string]string{}
	for i := 0; i < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// testPKI is a throwaway CA with a server certificate for 127.0.0.1 and
// localhost and a client certificate, all written as PEM files into a temp dir.
type testPKI struct {
	Dir                   string
	CAFile                string
	ServerCert, ServerKey string
	ClientCert, ClientKey string
	CAPool                *x509.CertPool
	server                tls.Certificate
}

func newTestPKI(t *testing.T, cn string) *testPKI {
	t.Helper()
	dir := t.TempDir()
	p := &testPKI{Dir: dir, CAPool: x509.NewCertPool()}

	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	ca, err := x509.ParseCertificate(caDER)
	require.NoError(t, err)
	p.CAPool.AddCert(ca)
	p.CAFile = writePEM(t, dir, "ca.pem", "CERTIFICATE", caDER)

	leaf := func(name string, serial int64, usage x509.ExtKeyUsage) (certFile, keyFile string) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		require.NoError(t, err)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      pkix.Name{CommonName: name},
			NotBefore:    time.Now().Add(-time.Hour),
			NotAfter:     time.Now().Add(24 * time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{usage},
			DNSNames:     []string{"localhost", "broker.test"},
			IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		require.NoError(t, err)
		keyDER, err := x509.MarshalECPrivateKey(key)
		require.NoError(t, err)
		return writePEM(t, dir, name+".pem", "CERTIFICATE", der), writePEM(t, dir, name+"-key.pem", "EC PRIVATE KEY", keyDER)
	}
	p.ServerCert, p.ServerKey = leaf("server", 2, x509.ExtKeyUsageServerAuth)
	p.ClientCert, p.ClientKey = leaf("client", 3, x509.ExtKeyUsageClientAuth)
	p.server, err = tls.LoadX509KeyPair(p.ServerCert, p.ServerKey)
	require.NoError(t, err)
	return p
}

func writePEM(t *testing.T, dir, name, typ string, der []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600))
	return path
}

// ServerTLS is the listener configuration; mutual requires a client
// certificate signed by the CA.
func (p *testPKI) ServerTLS(mutual bool) *tls.Config {
	c := &tls.Config{Certificates: []tls.Certificate{p.server}, MinVersion: tls.VersionTLS12}
	if mutual {
		c.ClientAuth = tls.RequireAndVerifyClientCert
		c.ClientCAs = p.CAPool
	}
	return c
}

func TestLoadKafkaSecurity(t *testing.T) {
	pki := newTestPKI(t, "test CA")
	notPEM := filepath.Join(pki.Dir, "not.pem")
	require.NoError(t, os.WriteFile(notPEM, []byte("hello"), 0o600))
	missing := filepath.Join(pki.Dir, "missing.pem")
	const pw = "Pa55-w0rd!secret"

	tests := []struct {
		name    string
		env     []string
		want    KafkaSecurity
		opts    int    // number of kgo options Opts returns
		wantErr string // exact error
		errHas  string // substring of the error (paths, wrapped causes)
	}{
		{name: "defaults: plaintext, no SASL", env: nil, want: KafkaSecurity{}},
		{name: "empty values are unset", env: []string{"KAFKA_TLS", "", "KAFKA_SASL_MECHANISM", "", "KAFKA_SASL_USERNAME", ""}, want: KafkaSecurity{}},
		{name: "TLS with system roots", env: []string{"KAFKA_TLS", "true"}, want: KafkaSecurity{TLS: true}, opts: 1},
		{name: "TLS false", env: []string{"KAFKA_TLS", "false"}, want: KafkaSecurity{}},
		{name: "TLS with CA, server name", env: []string{"KAFKA_TLS", "1", "KAFKA_TLS_CA_FILE", pki.CAFile, "KAFKA_TLS_SERVER_NAME", "broker.test"},
			want: KafkaSecurity{TLS: true, TLSCAFile: pki.CAFile, TLSServerName: "broker.test"}, opts: 1},
		{name: "mTLS", env: []string{"KAFKA_TLS", "true", "KAFKA_TLS_CA_FILE", pki.CAFile, "KAFKA_TLS_CERT_FILE", pki.ClientCert, "KAFKA_TLS_KEY_FILE", pki.ClientKey},
			want: KafkaSecurity{TLS: true, TLSCAFile: pki.CAFile, TLSCertFile: pki.ClientCert, TLSKeyFile: pki.ClientKey}, opts: 1},
		{name: "insecure skip verify", env: []string{"KAFKA_TLS", "true", "KAFKA_TLS_INSECURE_SKIP_VERIFY", "true"},
			want: KafkaSecurity{TLS: true, TLSInsecureSkipVerify: true}, opts: 1},
		{name: "SASL PLAIN over TLS", env: []string{"KAFKA_TLS", "true", "KAFKA_SASL_MECHANISM", "PLAIN", "KAFKA_SASL_USERNAME", "alice", "KAFKA_SASL_PASSWORD", pw},
			want: KafkaSecurity{TLS: true, SASLMechanism: SASLPlain, SASLUsername: "alice", SASLPassword: pw}, opts: 2},
		{name: "SCRAM-SHA-256, lower case", env: []string{"KAFKA_SASL_MECHANISM", "scram-sha-256", "KAFKA_SASL_USERNAME", "bob", "KAFKA_SASL_PASSWORD", pw},
			want: KafkaSecurity{SASLMechanism: SASLScramSHA256, SASLUsername: "bob", SASLPassword: pw}, opts: 1},
		{name: "SCRAM-SHA-512", env: []string{"KAFKA_SASL_MECHANISM", "SCRAM-SHA-512", "KAFKA_SASL_USERNAME", "bob", "KAFKA_SASL_PASSWORD", pw},
			want: KafkaSecurity{SASLMechanism: SASLScramSHA512, SASLUsername: "bob", SASLPassword: pw}, opts: 1},
		{name: "password kept verbatim", env: []string{"KAFKA_SASL_MECHANISM", "PLAIN", "KAFKA_SASL_USERNAME", " bob ", "KAFKA_SASL_PASSWORD", " " + pw + " "},
			want: KafkaSecurity{SASLMechanism: SASLPlain, SASLUsername: "bob", SASLPassword: " " + pw + " "}, opts: 1},

		{name: "bad TLS bool", env: []string{"KAFKA_TLS", "yes"}, wantErr: `KAFKA_TLS="yes" is invalid: want true or false`},
		{name: "bad skip-verify bool", env: []string{"KAFKA_TLS", "true", "KAFKA_TLS_INSECURE_SKIP_VERIFY", "maybe"}, wantErr: `KAFKA_TLS_INSECURE_SKIP_VERIFY="maybe" is invalid: want true or false`},
		{name: "unknown mechanism", env: []string{"KAFKA_SASL_MECHANISM", "GSSAPI", "KAFKA_SASL_USERNAME", "bob", "KAFKA_SASL_PASSWORD", pw},
			wantErr: `KAFKA_SASL_MECHANISM="GSSAPI" is invalid: want one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512`},
		{name: "password without mechanism", env: []string{"KAFKA_SASL_PASSWORD", pw},
			wantErr: `KAFKA_SASL_PASSWORD is set but KAFKA_SASL_MECHANISM is not: want one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512`},
		{name: "user without mechanism", env: []string{"KAFKA_SASL_USERNAME", "bob"},
			wantErr: `KAFKA_SASL_USERNAME is set but KAFKA_SASL_MECHANISM is not: want one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512`},
		{name: "mechanism without user", env: []string{"KAFKA_SASL_MECHANISM", "PLAIN", "KAFKA_SASL_PASSWORD", pw},
			wantErr: `KAFKA_SASL_USERNAME is not set: KAFKA_SASL_MECHANISM=PLAIN needs a user name`},
		{name: "mechanism without password", env: []string{"KAFKA_SASL_MECHANISM", "SCRAM-SHA-512", "KAFKA_SASL_USERNAME", "bob"},
			wantErr: `KAFKA_SASL_PASSWORD is not set: KAFKA_SASL_MECHANISM=SCRAM-SHA-512 needs a password`},
		{name: "CA file without TLS", env: []string{"KAFKA_TLS_CA_FILE", pki.CAFile},
			wantErr: `KAFKA_TLS_CA_FILE is set but KAFKA_TLS is not true: set KAFKA_TLS=true to dial the brokers with TLS`},
		{name: "skip verify without TLS", env: []string{"KAFKA_TLS_INSECURE_SKIP_VERIFY", "true"},
			wantErr: `KAFKA_TLS_INSECURE_SKIP_VERIFY is set but KAFKA_TLS is not true: set KAFKA_TLS=true to dial the brokers with TLS`},
		{name: "missing CA file", env: []string{"KAFKA_TLS", "true", "KAFKA_TLS_CA_FILE", missing},
			errHas: fmt.Sprintf(`KAFKA_TLS_CA_FILE=%q is invalid: want a readable PEM file of CA certificates: open %s: no such file or directory`, missing, missing)},
		{name: "CA file not PEM", env: []string{"KAFKA_TLS", "true", "KAFKA_TLS_CA_FILE", notPEM},
			wantErr: fmt.Sprintf(`KAFKA_TLS_CA_FILE=%q is invalid: want a PEM file of CA certificates, found no certificate in it`, notPEM)},
		{name: "cert without key", env: []string{"KAFKA_TLS", "true", "KAFKA_TLS_CERT_FILE", pki.ClientCert},
			wantErr: `KAFKA_TLS_CERT_FILE is set but KAFKA_TLS_KEY_FILE is not: mutual TLS needs both`},
		{name: "key without cert", env: []string{"KAFKA_TLS", "true", "KAFKA_TLS_KEY_FILE", pki.ClientKey},
			wantErr: `KAFKA_TLS_KEY_FILE is set but KAFKA_TLS_CERT_FILE is not: mutual TLS needs both`},
		{name: "missing cert file", env: []string{"KAFKA_TLS", "true", "KAFKA_TLS_CERT_FILE", missing, "KAFKA_TLS_KEY_FILE", pki.ClientKey},
			errHas: fmt.Sprintf(`KAFKA_TLS_CERT_FILE=%q is invalid: want a readable PEM file: stat %s: no such file or directory`, missing, missing)},
		{name: "missing key file", env: []string{"KAFKA_TLS", "true", "KAFKA_TLS_CERT_FILE", pki.ClientCert, "KAFKA_TLS_KEY_FILE", missing},
			errHas: fmt.Sprintf(`KAFKA_TLS_KEY_FILE=%q is invalid`, missing)},
		{name: "key does not match cert", env: []string{"KAFKA_TLS", "true", "KAFKA_TLS_CERT_FILE", pki.ClientCert, "KAFKA_TLS_KEY_FILE", pki.ServerKey},
			errHas: fmt.Sprintf(`KAFKA_TLS_CERT_FILE=%q and KAFKA_TLS_KEY_FILE=%q are invalid: want a PEM certificate and its PEM private key`, pki.ClientCert, pki.ServerKey)},
		{name: "cert file is not PEM", env: []string{"KAFKA_TLS", "true", "KAFKA_TLS_CERT_FILE", notPEM, "KAFKA_TLS_KEY_FILE", pki.ClientKey},
			errHas: fmt.Sprintf(`KAFKA_TLS_CERT_FILE=%q and KAFKA_TLS_KEY_FILE=%q are invalid`, notPEM, pki.ClientKey)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Every case also carries the password somewhere it may be
			// echoed, unless the case is about the password itself.
			got, err := LoadKafkaSecurity(kafkaEnv(tt.env...))
			if tt.wantErr != "" || tt.errHas != "" {
				require.Error(t, err)
				if tt.wantErr != "" {
					require.EqualError(t, err, tt.wantErr)
				} else {
					require.Contains(t, err.Error(), tt.errHas)
				}
				require.NotContains(t, err.Error(), pw)
				require.NotContains(t, err.Error(), "\n", "one line")
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
			opts, err := got.Opts()
			require.NoError(t, err)
			require.Len(t, opts, tt.opts)
		})
	}
}

func TestKafkaSecurityRedactsPassword(t *testing.T) {
	const pw = "Sup3r-S3cret-Kafka"
	k := KafkaSecurity{TLS: true, SASLMechanism: SASLScramSHA512, SASLUsername: "svc-causet", SASLPassword: pw}

	outer := struct {
		Name  string
		Kafka KafkaSecurity
		Ptr   *KafkaSecurity
	}{"x", k, &k}
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x"} {
		for _, v := range []any{k, &k, outer} {
			s := fmt.Sprintf(verb, v)
			require.NotContains(t, s, pw, "verb %s", verb)
			require.NotContains(t, s, fmt.Sprintf("%x", pw), "verb %s", verb)
		}
	}
	require.Contains(t, k.String(), "svc-causet")
	require.Contains(t, k.String(), "SASLPassword:[REDACTED]")
	require.Contains(t, KafkaSecurity{}.String(), "SASLPassword:}")

	var buf bytes.Buffer
	for _, h := range []slog.Handler{slog.NewJSONHandler(&buf, nil), slog.NewTextHandler(&buf, nil)} {
		slog.New(h).Info("kafka", "security", k, "ptr", &k)
	}
	require.NotContains(t, buf.String(), pw)
	require.Contains(t, buf.String(), `"saslPassword":"[REDACTED]"`)
	require.Contains(t, buf.String(), `"saslUsername":"svc-causet"`)

	j, err := json.Marshal(outer)
	require.NoError(t, err)
	require.NotContains(t, string(j), pw)
	require.Contains(t, string(j), `"saslPassword":"[REDACTED]"`)
}

// kafkaRoundTrip produces one record to a fresh topic through a client built
// from sec.Opts() and consumes it back.
func kafkaRoundTrip(t *testing.T, seeds []string, sec KafkaSecurity, topic string) error {
	t.Helper()
	opts, err := sec.Opts()
	require.NoError(t, err)
	cl, err := kgo.NewClient(append(opts,
		kgo.SeedBrokers(seeds...),
		kgo.DefaultProduceTopic(topic),
		kgo.AllowAutoTopicCreation(),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.RetryTimeout(5*time.Second),
	)...)
	require.NoError(t, err)
	defer cl.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	value := fmt.Sprintf("hello over %s", sec.SASLMechanism)
	if err := cl.ProduceSync(ctx, &kgo.Record{Key: []byte("k"), Value: []byte(value)}).FirstErr(); err != nil {
		return fmt.Errorf("produce: %w", err)
	}
	for {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("consume: %w", err)
		}
		var got []string
		fs.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
		for _, e := range fs.Errors() {
			return fmt.Errorf("consume: %w", e.Err)
		}
		if len(got) > 0 {
			require.Equal(t, []string{value}, got)
			return nil
		}
	}
}

// failingClient returns the error of a Ping through a client built from sec,
// with everything the client logged at debug level.
func failingClient(t *testing.T, seeds []string, sec KafkaSecurity) (logs string, err error) {
	t.Helper()
	opts, err := sec.Opts()
	require.NoError(t, err)
	var buf bytes.Buffer
	lw := &lockedWriter{w: &buf}
	cl, err := kgo.NewClient(append(opts,
		kgo.SeedBrokers(seeds...),
		kgo.WithLogger(kgo.BasicLogger(lw, kgo.LogLevelDebug, nil)),
	)...)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = cl.Ping(ctx)
	if err == nil {
		// Ping may succeed on a connection that does not authenticate;
		// a produce must not.
		err = cl.ProduceSync(ctx, &kgo.Record{Topic: "causet.security", Value: []byte("x")}).FirstErr()
	}
	cl.Close()
	lw.mu.Lock()
	defer lw.mu.Unlock()
	return buf.String(), err
}

type lockedWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func newKafkaCluster(t *testing.T, opts ...kfake.Opt) []string {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(1)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c.ListenAddrs()
}

func TestKafkaTLSRoundTrip(t *testing.T) {
	pki := newTestPKI(t, "broker CA")
	seeds := newKafkaCluster(t, kfake.TLS(pki.ServerTLS(false)))

	sec, err := LoadKafkaSecurity(kafkaEnv("KAFKA_TLS", "true", "KAFKA_TLS_CA_FILE", pki.CAFile))
	require.NoError(t, err)
	require.NoError(t, kafkaRoundTrip(t, seeds, sec, "tls.roundtrip"))

	t.Run("server name override", func(t *testing.T) {
		sec, err := LoadKafkaSecurity(kafkaEnv("KAFKA_TLS", "true", "KAFKA_TLS_CA_FILE", pki.CAFile, "KAFKA_TLS_SERVER_NAME", "broker.test"))
		require.NoError(t, err)
		require.NoError(t, kafkaRoundTrip(t, seeds, sec, "tls.servername"))
	})
	t.Run("server name not in the certificate fails", func(t *testing.T) {
		sec, err := LoadKafkaSecurity(kafkaEnv("KAFKA_TLS", "true", "KAFKA_TLS_CA_FILE", pki.CAFile, "KAFKA_TLS_SERVER_NAME", "other.test"))
		require.NoError(t, err)
		_, err = failingClient(t, seeds, sec)
		require.Error(t, err)
		require.Contains(t, err.Error(), "certificate")
	})
	t.Run("wrong CA fails", func(t *testing.T) {
		other := newTestPKI(t, "other CA")
		sec, err := LoadKafkaSecurity(kafkaEnv("KAFKA_TLS", "true", "KAFKA_TLS_CA_FILE", other.CAFile))
		require.NoError(t, err)
		_, err = failingClient(t, seeds, sec)
		require.Error(t, err)
		require.Contains(t, err.Error(), "certificate signed by unknown authority")
	})
	t.Run("system roots do not trust a private CA", func(t *testing.T) {
		_, err := failingClient(t, seeds, KafkaSecurity{TLS: true})
		require.Error(t, err)
		require.Contains(t, err.Error(), "certificate")
	})
	t.Run("insecure skip verify connects to any certificate", func(t *testing.T) {
		sec, err := LoadKafkaSecurity(kafkaEnv("KAFKA_TLS", "true", "KAFKA_TLS_INSECURE_SKIP_VERIFY", "true"))
		require.NoError(t, err)
		require.NoError(t, kafkaRoundTrip(t, seeds, sec, "tls.insecure"))
	})
	t.Run("plaintext client cannot talk to a TLS broker", func(t *testing.T) {
		_, err := failingClient(t, seeds, KafkaSecurity{})
		require.Error(t, err)
	})
}

func TestKafkaMutualTLSRoundTrip(t *testing.T) {
	pki := newTestPKI(t, "mtls CA")
	seeds := newKafkaCluster(t, kfake.TLS(pki.ServerTLS(true)))

	sec, err := LoadKafkaSecurity(kafkaEnv(
		"KAFKA_TLS", "true",
		"KAFKA_TLS_CA_FILE", pki.CAFile,
		"KAFKA_TLS_CERT_FILE", pki.ClientCert,
		"KAFKA_TLS_KEY_FILE", pki.ClientKey,
	))
	require.NoError(t, err)
	require.NoError(t, kafkaRoundTrip(t, seeds, sec, "mtls.roundtrip"))

	t.Run("without a client certificate fails", func(t *testing.T) {
		sec, err := LoadKafkaSecurity(kafkaEnv("KAFKA_TLS", "true", "KAFKA_TLS_CA_FILE", pki.CAFile))
		require.NoError(t, err)
		_, err = failingClient(t, seeds, sec)
		require.Error(t, err)
		t.Logf("no client certificate: %v", err)
	})
	t.Run("client certificate of another CA fails", func(t *testing.T) {
		other := newTestPKI(t, "other CA")
		sec, err := LoadKafkaSecurity(kafkaEnv(
			"KAFKA_TLS", "true",
			"KAFKA_TLS_CA_FILE", pki.CAFile,
			"KAFKA_TLS_CERT_FILE", other.ClientCert,
			"KAFKA_TLS_KEY_FILE", other.ClientKey,
		))
		require.NoError(t, err)
		_, err = failingClient(t, seeds, sec)
		require.Error(t, err)
	})
}

func TestKafkaSASLRoundTrip(t *testing.T) {
	const (
		plainPW  = "Plain-Pa55word-42"
		scram256 = "Scram256-Pa55word-42"
		scram512 = "Scram512-Pa55word-42"
		wrongPW  = "Wr0ng-Pa55word-Guess"
	)
	pki := newTestPKI(t, "sasl CA")
	users := []kfake.Opt{
		kfake.EnableSASL(),
		kfake.Superuser(SASLPlain, "alice", plainPW),
		kfake.Superuser(SASLScramSHA256, "bob", scram256),
		kfake.Superuser(SASLScramSHA512, "carol", scram512),
	}
	clusters := map[string][]string{
		"tls":       newKafkaCluster(t, append([]kfake.Opt{kfake.TLS(pki.ServerTLS(false))}, users...)...),
		"plaintext": newKafkaCluster(t, users...),
	}
	cases := []struct {
		transport, mechanism, user, pw string
	}{
		{"tls", SASLPlain, "alice", plainPW},
		{"tls", SASLScramSHA256, "bob", scram256},
		{"tls", SASLScramSHA512, "carol", scram512},
		{"plaintext", SASLScramSHA256, "bob", scram256},
		{"plaintext", SASLScramSHA512, "carol", scram512},
	}
	for _, c := range cases {
		t.Run(c.transport+"/"+c.mechanism, func(t *testing.T) {
			envFor := func(pw string) Lookup {
				kv := []string{"KAFKA_SASL_MECHANISM", c.mechanism, "KAFKA_SASL_USERNAME", c.user, "KAFKA_SASL_PASSWORD", pw}
				if c.transport == "tls" {
					kv = append(kv, "KAFKA_TLS", "true", "KAFKA_TLS_CA_FILE", pki.CAFile)
				}
				return kafkaEnv(kv...)
			}
			seeds := clusters[c.transport]
			sec, err := LoadKafkaSecurity(envFor(c.pw))
			require.NoError(t, err)
			require.NoError(t, kafkaRoundTrip(t, seeds, sec, "sasl."+strings.ToLower(c.mechanism)))

			bad, err := LoadKafkaSecurity(envFor(wrongPW))
			require.NoError(t, err)
			logs, err := failingClient(t, seeds, bad)
			require.Error(t, err, "a wrong password must not authenticate")
			t.Logf("wrong password: %v", err)
			require.NotContains(t, err.Error(), wrongPW)
			require.NotContains(t, err.Error(), c.pw)
			require.NotContains(t, logs, wrongPW, "franz-go debug logs")
			require.NotContains(t, fmt.Sprintf("%+v", bad), wrongPW)
		})
	}
	t.Run("no SASL against a SASL broker fails", func(t *testing.T) {
		_, err := failingClient(t, clusters["plaintext"], KafkaSecurity{})
		require.Error(t, err)
		t.Logf("no SASL: %v", err)
	})
}
