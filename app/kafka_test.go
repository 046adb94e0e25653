package app

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/internal/testenv"
)

// kafkaEnv is a Lookup over key/value pairs.
func kafkaEnv(kv ...string) config.Lookup {
	m := map[string]string{}
	for i := 0; i < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// kafkaRoundTrip produces one record to a fresh topic through a client built
// from KafkaConnOpts(sec, 0) and consumes it back.
func kafkaRoundTrip(t *testing.T, seeds []string, sec config.KafkaSecurity, topic string) error {
	t.Helper()
	opts, err := KafkaConnOpts(sec, 0)
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
func failingClient(t *testing.T, seeds []string, sec config.KafkaSecurity) (logs string, err error) {
	t.Helper()
	opts, err := KafkaConnOpts(sec, 0)
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
	pki := testenv.NewPKI(t, "broker CA")
	seeds := newKafkaCluster(t, kfake.TLS(pki.ServerTLS(false)))

	sec, err := config.LoadKafkaSecurity(kafkaEnv("KAFKA_TLS", "true", "KAFKA_TLS_CA_FILE", pki.CAFile))
	require.NoError(t, err)
	require.NoError(t, kafkaRoundTrip(t, seeds, sec, "tls.roundtrip"))

	t.Run("server name override", func(t *testing.T) {
		sec, err := config.LoadKafkaSecurity(kafkaEnv("KAFKA_TLS", "true", "KAFKA_TLS_CA_FILE", pki.CAFile, "KAFKA_TLS_SERVER_NAME", "broker.test"))
		require.NoError(t, err)
		require.NoError(t, kafkaRoundTrip(t, seeds, sec, "tls.servername"))
	})
	t.Run("server name not in the certificate fails", func(t *testing.T) {
		sec, err := config.LoadKafkaSecurity(kafkaEnv("KAFKA_TLS", "true", "KAFKA_TLS_CA_FILE", pki.CAFile, "KAFKA_TLS_SERVER_NAME", "other.test"))
		require.NoError(t, err)
		_, err = failingClient(t, seeds, sec)
		require.Error(t, err)
		require.Contains(t, err.Error(), "certificate")
	})
	t.Run("wrong CA fails", func(t *testing.T) {
		other := testenv.NewPKI(t, "other CA")
		sec, err := config.LoadKafkaSecurity(kafkaEnv("KAFKA_TLS", "true", "KAFKA_TLS_CA_FILE", other.CAFile))
		require.NoError(t, err)
		_, err = failingClient(t, seeds, sec)
		require.Error(t, err)
		require.Contains(t, err.Error(), "certificate signed by unknown authority")
	})
	t.Run("system roots do not trust a private CA", func(t *testing.T) {
		_, err := failingClient(t, seeds, config.KafkaSecurity{TLS: true})
		require.Error(t, err)
		require.Contains(t, err.Error(), "certificate")
	})
	t.Run("insecure skip verify connects to any certificate", func(t *testing.T) {
		sec, err := config.LoadKafkaSecurity(kafkaEnv("KAFKA_TLS", "true", "KAFKA_TLS_INSECURE_SKIP_VERIFY", "true"))
		require.NoError(t, err)
		require.NoError(t, kafkaRoundTrip(t, seeds, sec, "tls.insecure"))
	})
	t.Run("plaintext client cannot talk to a TLS broker", func(t *testing.T) {
		_, err := failingClient(t, seeds, config.KafkaSecurity{})
		require.Error(t, err)
	})
}

func TestKafkaMutualTLSRoundTrip(t *testing.T) {
	pki := testenv.NewPKI(t, "mtls CA")
	seeds := newKafkaCluster(t, kfake.TLS(pki.ServerTLS(true)))

	sec, err := config.LoadKafkaSecurity(kafkaEnv(
		"KAFKA_TLS", "true",
		"KAFKA_TLS_CA_FILE", pki.CAFile,
		"KAFKA_TLS_CERT_FILE", pki.ClientCert,
		"KAFKA_TLS_KEY_FILE", pki.ClientKey,
	))
	require.NoError(t, err)
	require.NoError(t, kafkaRoundTrip(t, seeds, sec, "mtls.roundtrip"))

	t.Run("without a client certificate fails", func(t *testing.T) {
		sec, err := config.LoadKafkaSecurity(kafkaEnv("KAFKA_TLS", "true", "KAFKA_TLS_CA_FILE", pki.CAFile))
		require.NoError(t, err)
		_, err = failingClient(t, seeds, sec)
		require.Error(t, err)
		t.Logf("no client certificate: %v", err)
	})
	t.Run("client certificate of another CA fails", func(t *testing.T) {
		other := testenv.NewPKI(t, "other CA")
		sec, err := config.LoadKafkaSecurity(kafkaEnv(
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
	pki := testenv.NewPKI(t, "sasl CA")
	users := []kfake.Opt{
		kfake.EnableSASL(),
		kfake.Superuser(config.SASLPlain, "alice", plainPW),
		kfake.Superuser(config.SASLScramSHA256, "bob", scram256),
		kfake.Superuser(config.SASLScramSHA512, "carol", scram512),
	}
	clusters := map[string][]string{
		"tls":       newKafkaCluster(t, append([]kfake.Opt{kfake.TLS(pki.ServerTLS(false))}, users...)...),
		"plaintext": newKafkaCluster(t, users...),
	}
	cases := []struct {
		transport, mechanism, user, pw string
	}{
		{"tls", config.SASLPlain, "alice", plainPW},
		{"tls", config.SASLScramSHA256, "bob", scram256},
		{"tls", config.SASLScramSHA512, "carol", scram512},
		{"plaintext", config.SASLScramSHA256, "bob", scram256},
		{"plaintext", config.SASLScramSHA512, "carol", scram512},
	}
	for _, c := range cases {
		t.Run(c.transport+"/"+c.mechanism, func(t *testing.T) {
			envFor := func(pw string) config.Lookup {
				kv := []string{"KAFKA_SASL_MECHANISM", c.mechanism, "KAFKA_SASL_USERNAME", c.user, "KAFKA_SASL_PASSWORD", pw}
				if c.transport == "tls" {
					kv = append(kv, "KAFKA_TLS", "true", "KAFKA_TLS_CA_FILE", pki.CAFile)
				}
				return kafkaEnv(kv...)
			}
			seeds := clusters[c.transport]
			sec, err := config.LoadKafkaSecurity(envFor(c.pw))
			require.NoError(t, err)
			require.NoError(t, kafkaRoundTrip(t, seeds, sec, "sasl."+strings.ToLower(c.mechanism)))

			bad, err := config.LoadKafkaSecurity(envFor(wrongPW))
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
		_, err := failingClient(t, clusters["plaintext"], config.KafkaSecurity{})
		require.Error(t, err)
		t.Logf("no SASL: %v", err)
	})
}
