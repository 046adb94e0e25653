package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/causet/projection-retry/internal/testenv"
)

// kafkaEnv is a Lookup over key/value pairs.
func kafkaEnv(kv ...string) Lookup {
	m := map[string]string{}
	for i := 0; i < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestLoadKafkaSecurity(t *testing.T) {
	pki := testenv.NewPKI(t, "test CA")
	notPEM := filepath.Join(pki.Dir, "not.pem")
	require.NoError(t, os.WriteFile(notPEM, []byte("hello"), 0o600))
	missing := filepath.Join(pki.Dir, "missing.pem")
	const pw = "Pa55-w0rd!secret"

	tests := []struct {
		name    string
		env     []string
		want    KafkaSecurity
		wantErr string // exact error
		errHas  string // substring of the error (paths, wrapped causes)
	}{
		{name: "defaults: plaintext, no SASL", env: nil, want: KafkaSecurity{}},
		{name: "empty values are unset", env: []string{"KAFKA_TLS", "", "KAFKA_SASL_MECHANISM", "", "KAFKA_SASL_USERNAME", ""}, want: KafkaSecurity{}},
		{name: "TLS with system roots", env: []string{"KAFKA_TLS", "true"}, want: KafkaSecurity{TLS: true}},
		{name: "TLS false", env: []string{"KAFKA_TLS", "false"}, want: KafkaSecurity{}},
		{name: "TLS with CA, server name", env: []string{"KAFKA_TLS", "1", "KAFKA_TLS_CA_FILE", pki.CAFile, "KAFKA_TLS_SERVER_NAME", "broker.test"},
			want: KafkaSecurity{TLS: true, TLSCAFile: pki.CAFile, TLSServerName: "broker.test"}},
		{name: "mTLS", env: []string{"KAFKA_TLS", "true", "KAFKA_TLS_CA_FILE", pki.CAFile, "KAFKA_TLS_CERT_FILE", pki.ClientCert, "KAFKA_TLS_KEY_FILE", pki.ClientKey},
			want: KafkaSecurity{TLS: true, TLSCAFile: pki.CAFile, TLSCertFile: pki.ClientCert, TLSKeyFile: pki.ClientKey}},
		{name: "insecure skip verify", env: []string{"KAFKA_TLS", "true", "KAFKA_TLS_INSECURE_SKIP_VERIFY", "true"},
			want: KafkaSecurity{TLS: true, TLSInsecureSkipVerify: true}},
		{name: "SASL PLAIN over TLS", env: []string{"KAFKA_TLS", "true", "KAFKA_SASL_MECHANISM", "PLAIN", "KAFKA_SASL_USERNAME", "alice", "KAFKA_SASL_PASSWORD", pw},
			want: KafkaSecurity{TLS: true, SASLMechanism: SASLPlain, SASLUsername: "alice", SASLPassword: pw}},
		{name: "SCRAM-SHA-256, lower case", env: []string{"KAFKA_SASL_MECHANISM", "scram-sha-256", "KAFKA_SASL_USERNAME", "bob", "KAFKA_SASL_PASSWORD", pw},
			want: KafkaSecurity{SASLMechanism: SASLScramSHA256, SASLUsername: "bob", SASLPassword: pw}},
		{name: "SCRAM-SHA-512", env: []string{"KAFKA_SASL_MECHANISM", "SCRAM-SHA-512", "KAFKA_SASL_USERNAME", "bob", "KAFKA_SASL_PASSWORD", pw},
			want: KafkaSecurity{SASLMechanism: SASLScramSHA512, SASLUsername: "bob", SASLPassword: pw}},
		{name: "password kept verbatim", env: []string{"KAFKA_SASL_MECHANISM", "PLAIN", "KAFKA_SASL_USERNAME", " bob ", "KAFKA_SASL_PASSWORD", " " + pw + " "},
			want: KafkaSecurity{SASLMechanism: SASLPlain, SASLUsername: "bob", SASLPassword: " " + pw + " "}},

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
			if got.TLS {
				tc, err := got.TLSConfig()
				require.NoError(t, err)
				require.Equal(t, got.TLSServerName, tc.ServerName)
			}
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
