package testenv

import (
	"bufio"
	"os"
	"strings"
	"testing"
)

// SecuredKafka is the SASL_SSL listener of the real broker
// (scripts/kafka-broker.sh): TLS with a CA of its own, SCRAM-SHA-512 users,
// the StandardAuthorizer (a principal without an ACL is refused). The
// broker's PLAINTEXT listener, whose principal is a super user, is a test
// harness's: it creates topics and ACLs and reads what checks read.
type SecuredKafka struct {
	// Brokers is the SASL_SSL listener (KAFKA_BROKERS of a client).
	Brokers string
	// CAFile is the PEM of the CA that signed the broker's certificate.
	CAFile string
	// Plaintext is the same broker's PLAINTEXT listener: the harness's.
	Plaintext []string
	// Passwords are the SCRAM users' (causet-bridge, causet-worker,
	// causet-relay, causet-ops, causet-bench).
	Passwords map[string]string
}

// SecuredKafkaFromEnv reads the file KAFKA_SECURE_ENV names (written by
// `scripts/kafka-broker.sh start`), or skips the test; users are the ones
// the test needs passwords of.
func SecuredKafkaFromEnv(t testing.TB, users ...string) SecuredKafka {
	t.Helper()
	path := os.Getenv("KAFKA_SECURE_ENV")
	if path == "" {
		t.Skip("needs the real broker's SASL_SSL listener: `scripts/kafka-broker.sh start` prints KAFKA_SECURE_ENV; set it")
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("KAFKA_SECURE_ENV: %v", err)
	}
	defer f.Close()
	k := SecuredKafka{Passwords: map[string]string{}}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		key, value, ok := strings.Cut(sc.Text(), "=")
		if !ok {
			continue
		}
		switch {
		case key == "KAFKA_SECURE_BROKERS":
			k.Brokers = value
		case key == "KAFKA_SECURE_CA_FILE":
			k.CAFile = value
		case key == "KAFKA_PLAINTEXT_BROKERS":
			k.Plaintext = strings.Split(value, ",")
		case strings.HasPrefix(key, "KAFKA_SECURE_PASSWORD_"):
			k.Passwords["causet-"+strings.ToLower(strings.TrimPrefix(key, "KAFKA_SECURE_PASSWORD_"))] = value
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if k.Brokers == "" || len(k.Plaintext) == 0 {
		t.Fatalf("%s: no KAFKA_SECURE_BROKERS or KAFKA_PLAINTEXT_BROKERS", path)
	}
	if _, err := os.Stat(k.CAFile); err != nil {
		t.Fatalf("%s: the CA file: %v", path, err)
	}
	for _, u := range users {
		if k.Passwords[u] == "" {
			t.Fatalf("%s: no password for %s (a broker started by an older scripts/kafka-broker.sh?)", path, u)
		}
	}
	return k
}

// As is the environment of a causet process that connects as user (""
// connects over TLS without credentials).
func (k SecuredKafka) As(user string) map[string]string {
	env := map[string]string{"KAFKA_BROKERS": k.Brokers, "KAFKA_TLS": "true", "KAFKA_TLS_CA_FILE": k.CAFile}
	if user != "" {
		env["KAFKA_SASL_MECHANISM"] = "SCRAM-SHA-512"
		env["KAFKA_SASL_USERNAME"] = user
		env["KAFKA_SASL_PASSWORD"] = k.Passwords[user]
	}
	return env
}
