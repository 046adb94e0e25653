package reliability

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/internal/testenv"
)

// securedKafka is the real broker's SASL_SSL listener (testenv.SecuredKafka):
// every causet process talks to it as a user of its own; the harness uses
// the PLAINTEXT listener, whose principal is a super user, to create the
// topics and ACLs, produce the upstream events and read what the checks read.
type securedKafka struct{ testenv.SecuredKafka }

// The users the broker script creates, one per kind of causet process.
const (
	kafkaUserBridge = "causet-bridge"
	kafkaUserWorker = "causet-worker"
	kafkaUserRelay  = "causet-relay"
	kafkaUserOps    = "causet-ops" // an operator's causet dlq / projections commands
)

// securedKafkaFromEnv reads KAFKA_SECURE_ENV, or skips the test.
func securedKafkaFromEnv(t *testing.T) securedKafka {
	t.Helper()
	return securedKafka{testenv.SecuredKafkaFromEnv(t, kafkaUserBridge, kafkaUserWorker, kafkaUserRelay, kafkaUserOps)}
}

// grant creates, over the harness's listener, the ACLs each user needs on
// the stack's topics and group, and nothing more:
//
//	causet-bridge  events: Read, Describe; group: Read; DLQ: Write, Describe
//	causet-worker  DLQ: Read, Write, Describe (it publishes dead letters and
//	               a rollout's replay reads them)
//	causet-relay   events: Write, Describe
//	causet-ops     DLQ: Read, Describe
//
// Idempotent producers need no cluster ACL: Write on a topic suffices.
func (k securedKafka) grant(t *testing.T, s *stack) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(s.brokers...))
	require.NoError(t, err)
	adm := kadm.NewClient(cl)
	defer adm.Close()
	user := func(u string) string { return "User:" + u }
	grants := []*kadm.ACLBuilder{
		kadm.NewACLs().Allow(user(kafkaUserBridge)).Topics(s.topic).Operations(kadm.OpRead, kadm.OpDescribe),
		kadm.NewACLs().Allow(user(kafkaUserBridge)).Groups(s.group).Operations(kadm.OpRead),
		kadm.NewACLs().Allow(user(kafkaUserBridge)).Topics(s.dlqTopic).Operations(kadm.OpWrite, kadm.OpDescribe),
		kadm.NewACLs().Allow(user(kafkaUserWorker)).Topics(s.dlqTopic).Operations(kadm.OpRead, kadm.OpWrite, kadm.OpDescribe),
		kadm.NewACLs().Allow(user(kafkaUserRelay)).Topics(s.topic).Operations(kadm.OpWrite, kadm.OpDescribe),
		kadm.NewACLs().Allow(user(kafkaUserOps)).Topics(s.dlqTopic).Operations(kadm.OpRead, kadm.OpDescribe),
	}
	for _, g := range grants {
		res, err := adm.CreateACLs(s.ctx, g)
		require.NoError(t, err)
		for _, r := range res {
			require.NoError(t, r.Err, "ACL %s %s on %s", r.Principal, r.Operation, r.Name)
		}
	}
}

// causetAs runs `causet <args...>` to its end with the stack's environment
// and extra, and returns its stdout, its stderr and its exit code.
func (s *stack) causetAs(extra map[string]string, args ...string) (stdout, stderr string, code int) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(s.ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.bin, args...)
	cmd.Env = s.procEnv(extra)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		var exit *exec.ExitError
		require.ErrorAs(s.t, err, &exit, "causet %s", strings.Join(args, " "))
		code = exit.ExitCode()
	}
	return out.String(), errOut.String(), code
}

// Scenario 24: Kafka as companies run it. The broker's SASL_SSL listener
// (SCRAM-SHA-512 over TLS, a CA made at its start, ACLs per user) carries
// every causet process's Kafka traffic: the bridge and the worker under
// CAUSET_DLQ_HOLD_ENTITY while every 25th upstream event fails (division by
// zero) and is dead-lettered, its entity's next events parked behind it;
// the write path (runtime, relay) with intents submitted meanwhile; then
// an operator, as causet-ops, tails the dead letters, checks the fix and
// rolls it out, which replays them. Every upstream event ends applied
// exactly once, each entity in order; every intent's events are published
// and projected. A client without credentials, and the relay's user
// reading the DLQ, are refused by the broker, each in one line.
func TestReliability24SecuredKafka(t *testing.T) {
	p := gate(t)
	k := securedKafkaFromEnv(t)
	t.Parallel() // beside scenarios 17-22 and 26: nothing shared is stopped
	r := newResult(t, "secured_kafka/entity")
	o := stackOptions{partitions: 3, brokers: k.Plaintext}
	if c, ok := temporalClusterFromEnv(t); ok {
		// Beside the production-shaped Temporal when it runs (CI).
		o.temporal, o.namespace = c.address, c.namespace
	}
	w := newWritePath(t, o)
	w.direct = directEvent
	s := w.stack
	s.env = map[string]string{"CAUSET_DLQ_HOLD_ENTITY": "true"}
	for key, v := range shortSchedule {
		s.env[key] = v
	}
	k.grant(t, s)

	// Refused, each in one line, before anything runs.
	for _, tc := range []struct {
		name, user string
		want       *regexp.Regexp
	}{
		{"no credentials", "", regexp.MustCompile(`SASL`)},
		{"the relay's user reading the DLQ", kafkaUserRelay, regexp.MustCompile(`TOPIC_AUTHORIZATION_FAILED`)},
	} {
		out, stderr, code := s.causetAs(k.As(tc.user), "dlq", "tail", "--no-state")
		require.Equal(t, 1, code, "%s: stdout %q stderr %q", tc.name, out, stderr)
		line := strings.TrimSpace(stderr)
		require.NotContains(t, line, "\n", "%s: one line", tc.name)
		require.Regexp(t, tc.want, line, tc.name)
		t.Logf("refused, %s: %s", tc.name, line)
	}

	wk := s.worker(k.As(kafkaUserWorker))
	b := s.bridge(k.As(kafkaUserBridge))
	w.startRuntime()
	rl := w.start("relay", k.As(kafkaUserRelay), "relay")

	start := time.Now()
	n := pick(p, 500, 2000)
	ins := w.gen.slice(0, pick(p, 300, 1000))
	var outs []wpOutcome
	submitted := make(chan struct{})
	go func() {
		defer close(submitted)
		outs = submitPaced(w.ctx, w.client(wpCallers), ins, wpCallers, 10*time.Second)
	}()
	var events eventLog
	s.produceRange(0, n, mix{every: 25, follow: 2}, &events)
	<-submitted

	failing, wantParked := heldBehindDeadLetters(events.all())
	// `causet produce`, as the relay's user (Write on the events topic):
	// events of keys of their own, from a file.
	var lines []string
	for i := range 10 {
		e := evt{id: fmt.Sprintf("%s-produce-%d", s.prefix, i), entity: fmt.Sprintf("produce-%d", i), seq: 1}
		lines = append(lines, string(s.record(e).Value))
		events.add(e)
	}
	file := filepath.Join(s.dir, "events.jsonl")
	require.NoError(t, os.WriteFile(file, []byte(strings.Join(lines, "\n")+"\n"), 0o644))
	out, stderr, code := s.causetAs(k.As(kafkaUserRelay), "produce", file)
	require.Zero(t, code, "causet produce as %s: %s%s", kafkaUserRelay, out, stderr)
	t.Logf("causet produce over SASL_SSL: %s", strings.TrimSpace(out+stderr))
	r.fig("events", n)
	r.fig("intents", len(ins))
	r.fig("dead_letters", failing)
	require.EqualValues(t, failing, s.waitDLQCount(int64(failing), 3*time.Minute),
		"every failing event dead-lettered: %s\nbridge:\n%s\nworker:\n%s", s.progress(), b.logTail(20), wk.logTail(20))
	require.Eventually(t, func() bool {
		return s.countSQL(`SELECT count(*)::int FROM causet_parked_events WHERE topic = $1`, s.topic) == wantParked
	}, time.Minute, 200*time.Millisecond, "each dead letter holds its entity's later events")
	r.fig("parked_behind_dead_letters", wantParked)

	// The write path: published by the relay, projected by the bridge.
	d, ok := w.waitPublished(3 * time.Minute)
	require.True(t, ok, "the relay did not publish every ledger event: %d unpublished\nrelay:\n%s", w.unpublished(), rl.logTail(20))
	r.fig("publish_drain_s", durS(d))
	evs := w.ledgerEvents()
	d, ok = w.waitProjected(evs, 3*time.Minute)
	require.True(t, ok, "the bridge did not apply every intent's event: %s", w.progress())
	r.fig("project_drain_s", durS(d))
	r.intents(w.checkIntents(ins, outs))
	r.topic(w.checkTopic(evs), len(evs))
	r.readModels(w.checkReadModels(evs))

	// The operator, as causet-ops: the dead letters, the fix's check, its rollout.
	tail, stderr, code := s.causetAs(k.As(kafkaUserOps), "dlq", "tail", "--no-state", "--projection", relProjection)
	require.Zero(t, code, stderr)
	require.Equal(t, failing+1, len(strings.Split(strings.TrimSpace(tail), "\n")), "a header and one line per dead letter:\n%s", tail)
	file = filepath.Join(s.dir, "rel_effects.fixed.yaml")
	require.NoError(t, os.WriteFile(file, []byte(fixedRelIR), 0o644))
	check, stderr, code := s.causetAs(k.As(kafkaUserOps), "projections", "check", file)
	require.Zero(t, code, stderr)
	require.Contains(t, check, fmt.Sprintf("would_apply %d, still_fails 0, out_of_order 0", failing+wantParked))
	out, stderr, code = s.causetAs(k.As(kafkaUserOps), "projections", "rollout", file, "--rate", "10", "--no-wait", "--reason", "guard d = 0")
	require.Zero(t, code, "%s%s", out, stderr)
	idm := regexp.MustCompile(`rollout (projection-rollout:` + relProjection + `:2:[0-9a-f]{12}) \(run`).FindStringSubmatch(out)
	require.NotNil(t, idm, "the command names the rollout's ID:\n%s", out)
	// The ID is the projection, version and document: a namespace that
	// outlives its database (a cluster kept across runs of this test) has
	// the rollout of an earlier run, which the command finds, done.
	desc, err := s.temporal.Client.DescribeWorkflow(s.ctx, idm[1], "")
	require.NoError(t, err)
	require.False(t, desc.WorkflowStartTime.Before(start),
		"%s is an earlier run's rollout (started %s): this namespace outlived that run's database; start the Temporal cluster afresh",
		idm[1], desc.WorkflowStartTime)
	var final contract.RolloutProgress
	require.NoError(t, s.temporal.Client.GetWorkflow(s.ctx, idm[1], "").Get(s.ctx, &final), "worker log:\n%s", wk.logTail(30))
	r.fig("rollout_state", final.State)
	require.Equal(t, contract.RolloutDone, final.State, final.Reason)
	require.Equal(t, failing+wantParked, final.Affected)
	require.Equal(t, final.Affected, final.Applied)
	require.Equal(t, failing, final.Replayed)

	// Records no event can be read from: the bridge dead-letters them itself.
	before := s.waitDLQCount(0, time.Second) // the end offsets now
	res := s.producer.ProduceSync(s.ctx, &kgo.Record{Partition: 0, Key: []byte("poison"), Value: []byte("{not json")},
		&kgo.Record{Partition: 1, Key: []byte("poison"), Value: []byte(`{"eventId":"x"}`)})
	require.NoError(t, res.FirstErr())
	require.EqualValues(t, before+2, s.waitDLQCount(before+2, time.Minute), "the bridge dead-letters what it cannot read:\n%s", b.logTail(20))
	invalid := 0
	for _, d := range s.readDLQ() {
		if d.rec.ErrorKind == string(contract.KindInvalidEvent) {
			invalid++
		}
	}
	require.Equal(t, 2, invalid)

	// Every upstream event exactly once, each entity in order.
	require.Len(t, events.all(), n+10)
	s.requireAppliedOnceInOrder(r, events.all())
	r.fig("duration_s", durS(time.Since(start)))
	for _, pr := range []*proc{b, wk, rl, w.rt} {
		require.False(t, pr.exited(), "%s exited:\n%s", pr.name, pr.logTail(30))
	}
}
