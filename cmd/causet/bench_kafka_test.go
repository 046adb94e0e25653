package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/causet/projection-retry/bench"
	"github.com/causet/projection-retry/internal/testenv"
)

// `causet bench` against a broker that demands SASL/SCRAM over TLS, as the
// user causet-bench, whose ACLs allow the "bench-" topics and groups and
// nothing else: the bench's own clients and its bridges connect as the
// processes do (KAFKA_TLS, KAFKA_SASL_*). A quick run of the inline and
// in-place-retry phases; then another user's credentials, refused.
func TestBenchOverSecuredKafka(t *testing.T) {
	k := testenv.SecuredKafkaFromEnv(t, "causet-bench", "causet-ops")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Plaintext...))
	require.NoError(t, err)
	adm := kadm.NewClient(cl)
	defer adm.Close()
	res, err := adm.CreateACLs(ctx, kadm.NewACLs().Allow("User:causet-bench").Topics("bench-").Groups("bench-").
		ResourcePatternType(kadm.ACLPatternPrefixed).Operations(kadm.OpAll))
	require.NoError(t, err)
	for _, r := range res {
		require.NoError(t, r.Err, "ACL %s %s on %s", r.Principal, r.Operation, r.Name)
	}
	envAs := func(user string) []string {
		env := []string{"CAUSET_BENCH_PHASES=inline,peer"}
		for key, v := range k.As(user) {
			env = append(env, key+"="+v)
		}
		return env
	}

	out := t.TempDir()
	stdout, stderr, code := runBinary(t, envAs("causet-bench"), "bench", "--quick", "--out", out)
	require.Zero(t, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
	r, err := bench.ReadResult(out)
	require.NoError(t, err)
	require.Equal(t, "KAFKA_BROKERS "+k.Brokers, r.Machine.Kafka)
	require.NotEmpty(t, r.Inline)
	for _, x := range r.Inline {
		require.Positive(t, x.EventsPerSec, "inline at %.0f %% failing", x.FailPct)
	}
	require.NotEmpty(t, r.Peer)
	for _, x := range r.Peer {
		require.Positive(t, x.EventsPerSec, "the in-place-retry consumer at %.0f %% failing", x.FailPct)
	}
	t.Logf("over SASL_SSL: %s", strings.TrimSpace(stdout[strings.LastIndex(strings.TrimSpace(stdout), "\n")+1:]))

	// The operator's user may read the DLQ, not make the bench's topics.
	_, stderr, code = runBinary(t, envAs("causet-ops"), "bench", "--quick", "--out", t.TempDir())
	require.Equal(t, 1, code, stderr)
	require.Contains(t, stderr, "TOPIC_AUTHORIZATION_FAILED")
}
