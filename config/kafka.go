package config

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
)

// SASL mechanisms accepted in KAFKA_SASL_MECHANISM.
const (
	SASLPlain       = "PLAIN"
	SASLScramSHA256 = "SCRAM-SHA-256"
	SASLScramSHA512 = "SCRAM-SHA-512"
)

// redacted replaces a secret wherever a KafkaSecurity is printed or logged.
const redacted = "[REDACTED]"

// KafkaSecurity is how the Kafka clients (bridge consumer, DLQ producer,
// `causet dlq`, `causet produce`) authenticate to and encrypt traffic with the
// brokers. It is read from the environment by [LoadKafkaSecurity]:
//
//	variable                        default  meaning
//	KAFKA_TLS                       false    true: dial the brokers with TLS (1.2 or newer)
//	KAFKA_TLS_CA_FILE               —        PEM file of CA certificates that sign the brokers'
//	                                         certificates; unset: the system roots. Needs KAFKA_TLS=true
//	KAFKA_TLS_CERT_FILE             —        PEM client certificate for mutual TLS; needs
//	                                         KAFKA_TLS_KEY_FILE and KAFKA_TLS=true
//	KAFKA_TLS_KEY_FILE              —        PEM private key of KAFKA_TLS_CERT_FILE
//	KAFKA_TLS_SERVER_NAME           —        name to verify in the brokers' certificates; unset:
//	                                         the host of each broker address dialed
//	KAFKA_TLS_INSECURE_SKIP_VERIFY  false    true: do not verify the brokers' certificates at all.
//	                                         Discouraged: anyone on the path can read and change
//	                                         the traffic. For local experiments only
//	KAFKA_SASL_MECHANISM            —        PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512; unset: no SASL
//	KAFKA_SASL_USERNAME             —        SASL user; required with KAFKA_SASL_MECHANISM
//	KAFKA_SASL_PASSWORD             —        SASL password; required with KAFKA_SASL_MECHANISM.
//	                                         Taken verbatim (not trimmed); never printed or logged
//
// Booleans take true or false (also 1/0); an empty value is the default.
// Mechanism names are case-insensitive. PLAIN sends the password as it is: use it with KAFKA_TLS=true. Files are read
// when the configuration is loaded, so a missing or malformed file stops the
// program at start with its path in the error.
//
// The password never appears in String, GoString, LogValue, MarshalJSON or
// any error of this package.
type KafkaSecurity struct {
	// TLS dials the brokers with TLS.
	TLS bool
	// TLSCAFile is a PEM file of CA certificates. Optional, defaults to the
	// system roots.
	TLSCAFile string
	// TLSCertFile and TLSKeyFile are the client certificate and key for mutual
	// TLS. Optional, both or neither.
	TLSCertFile string
	TLSKeyFile  string
	// TLSServerName is the name verified in the brokers' certificates.
	// Optional, defaults to the host of the broker address dialed.
	TLSServerName string
	// TLSInsecureSkipVerify disables certificate verification. Discouraged.
	TLSInsecureSkipVerify bool
	// SASLMechanism is "" (no SASL), SASLPlain, SASLScramSHA256 or
	// SASLScramSHA512.
	SASLMechanism string
	// SASLUsername and SASLPassword are the SASL credentials, required when
	// SASLMechanism is set.
	SASLUsername string
	SASLPassword string
}

// KafkaSecurityFromEnv reads the process environment.
func KafkaSecurityFromEnv() (KafkaSecurity, error) { return LoadKafkaSecurity(os.LookupEnv) }

// LoadKafkaSecurity reads the KAFKA_TLS* and KAFKA_SASL_* variables through
// lookup and validates them, including that the named files exist and hold
// what they should. The error is one line naming the variable; it never holds
// the value of KAFKA_SASL_PASSWORD.
func LoadKafkaSecurity(lookup Lookup) (KafkaSecurity, error) {
	p := parser{lookup: lookup}
	k := KafkaSecurity{
		TLS:                   p.boolean("KAFKA_TLS", false),
		TLSCAFile:             p.str("KAFKA_TLS_CA_FILE", ""),
		TLSCertFile:           p.str("KAFKA_TLS_CERT_FILE", ""),
		TLSKeyFile:            p.str("KAFKA_TLS_KEY_FILE", ""),
		TLSServerName:         p.str("KAFKA_TLS_SERVER_NAME", ""),
		TLSInsecureSkipVerify: p.boolean("KAFKA_TLS_INSECURE_SKIP_VERIFY", false),
		SASLMechanism:         p.kafkaSASLMechanism("KAFKA_SASL_MECHANISM"),
		SASLUsername:          p.str("KAFKA_SASL_USERNAME", ""),
	}
	if pw, ok := lookup("KAFKA_SASL_PASSWORD"); ok {
		k.SASLPassword = pw // verbatim: a password may begin or end with a space
	}
	if p.err != nil {
		return KafkaSecurity{}, p.err
	}
	if err := k.Validate(); err != nil {
		return KafkaSecurity{}, err
	}
	return k, nil
}

// Validate checks the combination of settings and reads the TLS files. Its
// error never holds the password.
func (k KafkaSecurity) Validate() error {
	if !k.TLS {
		for _, s := range []struct{ key, val string }{
			{"KAFKA_TLS_CA_FILE", k.TLSCAFile},
			{"KAFKA_TLS_CERT_FILE", k.TLSCertFile},
			{"KAFKA_TLS_KEY_FILE", k.TLSKeyFile},
			{"KAFKA_TLS_SERVER_NAME", k.TLSServerName},
		} {
			if s.val != "" {
				return fmt.Errorf("%s is set but KAFKA_TLS is not true: set KAFKA_TLS=true to dial the brokers with TLS", s.key)
			}
		}
		if k.TLSInsecureSkipVerify {
			return errors.New("KAFKA_TLS_INSECURE_SKIP_VERIFY is set but KAFKA_TLS is not true: set KAFKA_TLS=true to dial the brokers with TLS")
		}
	}
	switch k.SASLMechanism {
	case "":
		if k.SASLUsername != "" {
			return fmt.Errorf("KAFKA_SASL_USERNAME is set but KAFKA_SASL_MECHANISM is not: want one of %s", saslMechanisms)
		}
		if k.SASLPassword != "" {
			return fmt.Errorf("KAFKA_SASL_PASSWORD is set but KAFKA_SASL_MECHANISM is not: want one of %s", saslMechanisms)
		}
	case SASLPlain, SASLScramSHA256, SASLScramSHA512:
		if k.SASLUsername == "" {
			return fmt.Errorf("KAFKA_SASL_USERNAME is not set: KAFKA_SASL_MECHANISM=%s needs a user name", k.SASLMechanism)
		}
		if k.SASLPassword == "" {
			return fmt.Errorf("KAFKA_SASL_PASSWORD is not set: KAFKA_SASL_MECHANISM=%s needs a password", k.SASLMechanism)
		}
	default:
		return fmt.Errorf("KAFKA_SASL_MECHANISM=%q is invalid: want one of %s", k.SASLMechanism, saslMechanisms)
	}
	if k.TLS {
		if _, err := k.TLSConfig(); err != nil {
			return err
		}
	}
	return nil
}

var saslMechanisms = strings.Join([]string{SASLPlain, SASLScramSHA256, SASLScramSHA512}, ", ")

// TLSConfig reads the TLS files into a client configuration.
func (k KafkaSecurity) TLSConfig() (*tls.Config, error) {
	tc := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		ServerName:         k.TLSServerName,
		InsecureSkipVerify: k.TLSInsecureSkipVerify, //nolint:gosec // opt-in, documented as discouraged
	}
	if k.TLSCAFile != "" {
		pem, err := os.ReadFile(k.TLSCAFile)
		if err != nil {
			return nil, fmt.Errorf("KAFKA_TLS_CA_FILE=%q is invalid: want a readable PEM file of CA certificates: %w", k.TLSCAFile, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("KAFKA_TLS_CA_FILE=%q is invalid: want a PEM file of CA certificates, found no certificate in it", k.TLSCAFile)
		}
		tc.RootCAs = pool
	}
	switch {
	case k.TLSCertFile != "" && k.TLSKeyFile == "":
		return nil, errors.New("KAFKA_TLS_CERT_FILE is set but KAFKA_TLS_KEY_FILE is not: mutual TLS needs both")
	case k.TLSCertFile == "" && k.TLSKeyFile != "":
		return nil, errors.New("KAFKA_TLS_KEY_FILE is set but KAFKA_TLS_CERT_FILE is not: mutual TLS needs both")
	case k.TLSCertFile != "":
		for _, f := range []struct{ key, path string }{{"KAFKA_TLS_CERT_FILE", k.TLSCertFile}, {"KAFKA_TLS_KEY_FILE", k.TLSKeyFile}} {
			if _, err := os.Stat(f.path); err != nil {
				return nil, fmt.Errorf("%s=%q is invalid: want a readable PEM file: %w", f.key, f.path, err)
			}
		}
		cert, err := tls.LoadX509KeyPair(k.TLSCertFile, k.TLSKeyFile)
		if err != nil {
			return nil, fmt.Errorf("KAFKA_TLS_CERT_FILE=%q and KAFKA_TLS_KEY_FILE=%q are invalid: want a PEM certificate and its PEM private key: %w", k.TLSCertFile, k.TLSKeyFile, err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// String describes the settings with the password redacted, so %v and %+v
// never print it.
func (k KafkaSecurity) String() string {
	return fmt.Sprintf("KafkaSecurity{TLS:%t TLSCAFile:%q TLSCertFile:%q TLSKeyFile:%q TLSServerName:%q TLSInsecureSkipVerify:%t SASLMechanism:%q SASLUsername:%q SASLPassword:%s}",
		k.TLS, k.TLSCAFile, k.TLSCertFile, k.TLSKeyFile, k.TLSServerName, k.TLSInsecureSkipVerify, k.SASLMechanism, k.SASLUsername, k.redactedPassword())
}

// GoString is String, so %#v does not print the password either.
func (k KafkaSecurity) GoString() string { return k.String() }

// LogValue implements slog.LogValuer with the password redacted.
func (k KafkaSecurity) LogValue() slog.Value {
	return slog.GroupValue(
		slog.Bool("tls", k.TLS),
		slog.String("tlsCAFile", k.TLSCAFile),
		slog.String("tlsCertFile", k.TLSCertFile),
		slog.String("tlsKeyFile", k.TLSKeyFile),
		slog.String("tlsServerName", k.TLSServerName),
		slog.Bool("tlsInsecureSkipVerify", k.TLSInsecureSkipVerify),
		slog.String("saslMechanism", k.SASLMechanism),
		slog.String("saslUsername", k.SASLUsername),
		slog.String("saslPassword", k.redactedPassword()),
	)
}

// MarshalJSON encodes the same fields as LogValue, with the password
// redacted, so a KafkaSecurity embedded in a JSON document cannot leak it.
func (k KafkaSecurity) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		TLS                   bool   `json:"tls"`
		TLSCAFile             string `json:"tlsCAFile,omitempty"`
		TLSCertFile           string `json:"tlsCertFile,omitempty"`
		TLSKeyFile            string `json:"tlsKeyFile,omitempty"`
		TLSServerName         string `json:"tlsServerName,omitempty"`
		TLSInsecureSkipVerify bool   `json:"tlsInsecureSkipVerify,omitempty"`
		SASLMechanism         string `json:"saslMechanism,omitempty"`
		SASLUsername          string `json:"saslUsername,omitempty"`
		SASLPassword          string `json:"saslPassword,omitempty"`
	}{k.TLS, k.TLSCAFile, k.TLSCertFile, k.TLSKeyFile, k.TLSServerName, k.TLSInsecureSkipVerify, k.SASLMechanism, k.SASLUsername, k.redactedPassword()})
}

// redactedPassword is "" when no password is set, else a fixed marker that
// says nothing about the password (not even its length).
func (k KafkaSecurity) redactedPassword() string {
	if k.SASLPassword == "" {
		return ""
	}
	return redacted
}

// boolean reads true/false (also 1/0, t/f); unset or empty is def. Every
// boolean setting uses it.
func (p *parser) boolean(key string, def bool) bool {
	v, ok := p.raw(key)
	if !ok || v == "" {
		return def
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		p.fail(key, v, "true or false")
		return def
	}
	return b
}

// kafkaSASLMechanism accepts the mechanism names in any case and returns them
// in upper case.
func (p *parser) kafkaSASLMechanism(key string) string {
	v, ok := p.raw(key)
	if !ok || v == "" {
		return ""
	}
	m := strings.ToUpper(v)
	switch m {
	case SASLPlain, SASLScramSHA256, SASLScramSHA512:
		return m
	}
	p.fail(key, v, "one of "+saslMechanisms)
	return ""
}
