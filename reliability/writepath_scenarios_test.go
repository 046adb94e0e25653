package reliability

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"net/http"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/causet/projection-retry/client"
	"github.com/causet/projection-retry/internal/testenv"
)

// wpCallers is how many goroutines call client.Submit at once.
const wpCallers = 64

// Scenario 11: the whole write path under load — runtime, relay, bridge and
// worker as processes, 20,000 intents (short: 5,000) from 64 concurrent
// callers — while the relay is killed with SIGKILL 10 times and restarted at
// once.
//
// The intents come in 10 waves, one every 6 s (short: 3 s), each submitted
// as fast as the callers go, and the relay is killed once per wave. Even
// kills fall at random, 0-1 s after the relay has published some of its
// wave; odd kills are aimed between produce and mark, a window of well under
// a millisecond otherwise: the test locks the unpublished rows (FOR UPDATE),
// the relay reads and produces them, Kafka acknowledges, and its mark waits
// on the locks; then the relay gets SIGKILL and its orphaned session is
// ended (pg_terminate_backend) before the locks go, as if the process had
// died before its UPDATE left. Its successor sends those records again: the
// re-sends the verdict must tell apart from duplicates.
func TestReliability11WritePathRelayKill9(t *testing.T) {
	p := gate(t)
	r := newResult(t, "writepath_relay_kill9/entity")
	n := pick(p, 5000, 20000)
	const kills = 10
	every := pick(p, 3*time.Second, 6*time.Second)
	w := newWritePath(t, stackOptions{partitions: 6})
	wk := w.worker(nil)
	b := w.bridge(nil)
	w.startRuntime()
	rl := w.relay()
	ins := w.gen.slice(0, n)
	cl := w.client(wpCallers)

	start := time.Now()
	var outs []wpOutcome
	submitted := make(chan struct{})
	go func() { defer close(submitted); outs = submitWaves(w.ctx, cl, ins, wpCallers, kills, every) }()

	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 11))
	var toPublish []time.Duration
	var backlogs []int
	whileSubmitting, aimedHits := 0, 0
	var held []int
	for k := 0; k < kills; k++ {
		time.Sleep(time.Until(start.Add(time.Duration(k) * every)))
		t0 := time.Now()
		var hold *markHold
		if k%2 == 0 {
			// At random: once this relay publishes some of wave k (it holds
			// the lock and marked a batch Kafka acknowledged), 0-1 s later.
			p0 := max(rl.metric("causet_relay_published_total"), 0)
			for time.Since(t0) < 2*time.Minute {
				if rl.metric("causet_relay_published_total") > p0 {
					break
				}
				if closed(submitted) && w.unpublished() == 0 {
					break // nothing left to publish: kill anyway
				}
				time.Sleep(10 * time.Millisecond)
			}
			toPublish = append(toPublish, time.Since(t0))
			time.Sleep(time.Duration(rng.Int64N(int64(time.Second))))
		} else {
			hold = w.holdMark(10 * time.Second)
		}
		require.False(t, rl.exited(), "relay exited by itself:\n%s", rl.logTail(30))
		if !closed(submitted) {
			whileSubmitting++
		}
		backlogs = append(backlogs, w.unpublished())
		rl.kill()
		if hold != nil {
			hold.release(w)
			aimedHits++
			held = append(held, hold.locked)
		}
		t.Logf("relay kill %d/%d at %s (backlog %d unpublished, %d events in the ledger)", k+1, kills,
			time.Since(start).Round(time.Millisecond), backlogs[len(backlogs)-1], w.tryCount(`SELECT count(*) FROM causet_events`))
		rl = w.relay()
	}
	<-submitted
	submitDur := time.Since(start)
	r.fig("kills", kills)
	r.fig("kills_while_submitting", whileSubmitting)
	r.fig("kills_between_produce_and_mark", aimedHits)
	r.fig("rows_held_at_aimed_kills", joinInts(held))
	r.fig("backlog_at_kills", joinInts(backlogs))
	sort.Slice(toPublish, func(i, j int) bool { return toPublish[i] < toPublish[j] })
	r.fig("wave_to_publish_max_s", durS(toPublish[len(toPublish)-1]))
	r.fig("callers", wpCallers)
	r.fig("submit_s", durS(submitDur))
	// Each wave's rate: its intents over the time from its start to its
	// last answer.
	var rates []int
	for j := 0; j < kills; j++ {
		from, to := j*n/kills, (j+1)*n/kills
		var last time.Time
		for _, o := range outs[from:to] {
			if o.end.After(last) {
				last = o.end
			}
		}
		rates = append(rates, int(float64(to-from)/last.Sub(start.Add(time.Duration(j)*every)).Seconds()))
	}
	r.fig("wave_intents_per_s", joinInts(rates))
	r.fig("slowest_submit_s", durS(slowest(outs)))
	r.fig("runtime_replayed", w.runtimeCount("replayed"))
	r.fig("runtime_unavailable", w.runtimeCount("unavailable"))
	r.intents(w.checkIntents(ins, outs))
	w.settle(r, 5*time.Minute)
	r.fig("bridge_duplicates_absorbed", b.metric(`causet_bridge_applied_total{result="duplicate"}`))
	r.fig("duration_s", durS(time.Since(start)))
	require.False(t, b.exited(), "bridge exited:\n%s", b.logTail(30))
	require.False(t, wk.exited(), "worker exited:\n%s", wk.logTail(30))
	require.False(t, w.rt.exited(), "runtime exited:\n%s", w.rt.logTail(30))
}

// Scenario 12: Kafka stops (kfake refuses every request by closing the
// connection) for 30 s (short: 15 s) while intents keep coming: every intent
// is answered 200 and its events wait in the ledger; once the broker is back
// each is published exactly once, in per-entity order.
func TestReliability12WritePathKafkaOutage(t *testing.T) {
	p := gate(t)
	r := newResult(t, "writepath_kafka_outage/entity")
	outage := pick(p, 15*time.Second, 30*time.Second)
	before, during := pick(p, 1000, 2000), pick(p, 2000, 5000)
	cluster := testenv.KafkaCluster(t)
	w := newWritePath(t, stackOptions{partitions: 6, brokers: cluster.ListenAddrs()})

	var down atomic.Bool
	var refused atomic.Int64
	cluster.Control(func(kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		if !down.Load() {
			return nil, nil, false
		}
		refused.Add(1)
		return nil, errors.New("broker stopped by reliability scenario 12"), true
	})

	wk := w.worker(nil)
	b := w.bridge(nil)
	w.startRuntime()
	rl := w.relay()
	cl := w.client(wpCallers)
	ins := w.gen.slice(0, before+during)
	outs := submitPaced(w.ctx, cl, ins[:before], wpCallers, 0)
	_, ok := w.waitPublished(time.Minute)
	require.True(t, ok, "the relay did not publish the first %d intents' events: %d unpublished\n%s", before, w.unpublished(), rl.logTail(20))

	down.Store(true)
	stoppedAt := time.Now()
	t.Logf("Kafka stopped")
	// A batch acknowledged just before the stop may still be marked.
	time.Sleep(2 * time.Second)
	publishedAtStop := w.tryCount(`SELECT count(*) FROM causet_events WHERE published_at IS NOT NULL`)
	outsB := submitPaced(w.ctx, cl, ins[before:], wpCallers, outage-4*time.Second)
	outs = append(outs, outsB...)
	r.fig("intents_during_outage", during)
	r.fig("slowest_submit_during_outage_s", durS(slowest(outsB)))
	time.Sleep(time.Until(stoppedAt.Add(outage)))
	publishedAtEnd := w.tryCount(`SELECT count(*) FROM causet_events WHERE published_at IS NOT NULL`)
	backlog := w.unpublished()
	lag := rl.metric("causet_relay_lag_events")
	failures := rl.metric("causet_relay_batch_failures_total")
	down.Store(false)
	backAt := time.Now()
	r.fig("outage_s", durS(backAt.Sub(stoppedAt)))
	r.fig("refused_kafka_requests", refused.Load())
	r.fig("published_during_outage", publishedAtEnd-publishedAtStop)
	r.fig("backlog_at_recovery", backlog)
	r.fig("relay_lag_events_metric", lag)
	r.fig("relay_batch_failures", failures)
	require.Positive(t, refused.Load(), "nothing reached the stopped broker")
	require.Equal(t, publishedAtStop, publishedAtEnd, "events marked published while Kafka refused every request")
	require.Positive(t, backlog, "the events of intents accepted during the outage wait in the ledger")

	r.intents(w.checkIntents(ins, outs))
	d, ok := w.waitPublished(3 * time.Minute)
	require.True(t, ok, "backlog not published after the broker came back: %d unpublished\n%s", w.unpublished(), rl.logTail(20))
	r.fig("published_after_recovery_s", durS(d))
	_, tc := w.settle(r, 5*time.Minute)
	r.fig("bridge_duplicates_absorbed", b.metric(`causet_bridge_applied_total{result="duplicate"}`))
	require.Zero(t, tc.resends, "every event published once")
	require.False(t, rl.exited(), "relay exited:\n%s", rl.logTail(30))
	require.False(t, b.exited(), "bridge exited:\n%s", b.logTail(30))
	require.False(t, wk.exited(), "worker exited:\n%s", wk.logTail(30))
}

// Scenario 13: PostgreSQL stops for 30 s (short: 15 s): the runtime answers
// 503 and writes nothing; once it is back, the same intents re-submitted by
// the client succeed, each recorded once. A second group of intents is
// submitted during the outage by a client whose retries outlast it.
func TestReliability13WritePathPostgresOutage(t *testing.T) {
	p := gate(t)
	testenv.NeedStoppablePostgres(t)
	r := newResult(t, "writepath_postgres_outage/entity")
	outage := pick(p, 15*time.Second, 30*time.Second)
	before, refusedN, spanning := pick(p, 1000, 2000), pick(p, 300, 1000), pick(p, 200, 500)
	w := newWritePath(t, stackOptions{partitions: 6})
	wk := w.worker(nil)
	b := w.bridge(nil)
	w.startRuntime()
	rl := w.relay()
	cl := w.client(wpCallers)
	ins := w.gen.slice(0, before+refusedN+spanning)
	insA, insB, insC := ins[:before], ins[before:before+refusedN], ins[before+refusedN:]
	outsA := submitPaced(w.ctx, cl, insA, wpCallers, 0)
	_, ok := w.waitPublished(time.Minute)
	require.True(t, ok, "the first intents' events not published")
	intentsBefore := w.countSQL(`SELECT count(*) FROM causet_intents`)
	eventsBefore := w.countSQL(`SELECT count(*) FROM causet_events`)

	testenv.StopPostgres(t)
	stoppedAt := time.Now()
	t.Logf("PostgreSQL stopped")
	require.Eventually(t, func() bool { return httpStatus("http://"+w.rt.metrics+"/readyz") == http.StatusServiceUnavailable },
		30*time.Second, 100*time.Millisecond, "/readyz while PostgreSQL is down")

	// C: a client whose retries outlast the outage, started now.
	persistent := w.client(wpCallers, client.WithMaxTries(200), client.WithBackoff(250*time.Millisecond, 2, 2*time.Second))
	var outsC []wpOutcome
	spanned := make(chan struct{})
	go func() { defer close(spanned); outsC = submitPaced(w.ctx, persistent, insC, wpCallers, 0) }()

	// B: one POST each, no retry: every answer must be 503.
	codes, took := postOnce(w.rtURL, insB, wpCallers)
	status503 := 0
	other := map[int]int{}
	for _, c := range codes {
		if c == http.StatusServiceUnavailable {
			status503++
		} else {
			other[c]++
		}
	}
	statusGet := httpStatus(w.rtURL + "/v1/intents/" + insB[0].IntentID)
	// B again through client.Submit with its default tries: it gives up.
	gaveUp := 0
	for _, o := range submitPaced(w.ctx, cl, insB[:min(len(insB), wpCallers)], wpCallers, 0) {
		if errors.Is(o.err, client.ErrGaveUp) {
			gaveUp++
		}
	}
	r.fig("posts_during_outage", len(insB))
	r.fig("answered_503", status503)
	sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
	r.fig("answer_503_median_s", durS(took[len(took)/2]))
	r.fig("answer_503_max_s", durS(took[len(took)-1]))
	r.fig("get_status_during_outage", statusGet)
	r.fig("client_gave_up", gaveUp)
	require.Equal(t, len(insB), status503, "every POST during the outage answered 503 (others: %v)", other)
	require.Equal(t, http.StatusServiceUnavailable, statusGet, "GET /v1/intents/{id} during the outage")
	require.Equal(t, min(len(insB), wpCallers), gaveUp, "client.Submit gives up on a ledger that stays down")
	time.Sleep(time.Until(stoppedAt.Add(outage)))
	require.False(t, closed(spanned), "the spanning intents were answered while PostgreSQL was down")

	testenv.StartPostgres(t)
	restartedAt := time.Now()
	r.fig("outage_s", durS(restartedAt.Sub(stoppedAt)))
	// Nothing of B was written: look before anything re-submits it.
	var ids []string
	for _, in := range insB {
		ids = append(ids, in.IntentID)
	}
	var bRecorded int
	require.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(w.ctx, 2*time.Second)
		defer cancel()
		return w.pool.QueryRow(ctx, `SELECT count(*) FROM causet_intents WHERE intent_id = ANY($1)`, ids).Scan(&bRecorded) == nil
	}, time.Minute, 200*time.Millisecond)
	r.fig("refused_intents_recorded", bRecorded)
	require.Zero(t, bRecorded, "an intent answered 503 was recorded")
	writtenDuring := w.countSQL(`SELECT count(*) FROM causet_intents WHERE recorded_at BETWEEN $1 AND $2`, stoppedAt, restartedAt.Add(-time.Second))
	r.fig("written_during_outage", writtenDuring)
	require.Zero(t, writtenDuring)

	// B re-submitted by the client; C finishes on its own.
	resubmitAt := time.Now()
	outsB := submitPaced(w.ctx, cl, insB, wpCallers, 0)
	r.fig("resubmit_s", durS(time.Since(resubmitAt)))
	<-spanned
	r.fig("spanning_intents", len(insC))
	r.fig("spanning_slowest_s", durS(slowest(outsC)))
	r.fig("runtime_unavailable", w.runtimeCount("unavailable"))
	r.fig("runtime_replayed", w.runtimeCount("replayed"))
	outs := append(append(outsA, outsB...), outsC...)
	ic := w.checkIntents(ins, outs)
	r.intents(ic)
	require.Equal(t, intentsBefore+refusedN+spanning, w.countSQL(`SELECT count(*) FROM causet_intents`))
	r.fig("events_before_outage", eventsBefore)
	r.fig("relay_log_db_errors", rl.logCount("relay database error"))
	w.settle(r, 5*time.Minute)
	r.fig("bridge_duplicates_absorbed", b.metric(`causet_bridge_applied_total{result="duplicate"}`))
	require.False(t, rl.exited(), "relay exited:\n%s", rl.logTail(30))
	require.False(t, b.exited(), "bridge exited:\n%s", b.logTail(30))
	require.False(t, wk.exited(), "worker exited:\n%s", wk.logTail(30))
	require.False(t, w.rt.exited(), "runtime exited:\n%s", w.rt.logTail(30))
}

// postOnce POSTs each intent once, without retrying, and returns the HTTP
// status of each answer (-1: no answer) and how long it took.
func postOnce(base string, ins []client.Intent, callers int) ([]int, []time.Duration) {
	codes, took := make([]int, len(ins)), make([]time.Duration, len(ins))
	hc := &http.Client{Timeout: 60 * time.Second}
	inParallel(len(ins), callers, func(k int) {
		in := ins[k]
		body, _ := json.Marshal(map[string]any{"intentId": in.IntentID, "intentType": in.IntentType,
			"entityId": in.EntityID, "forkId": in.ForkID, "payload": in.Payload})
		t0 := time.Now()
		req, _ := http.NewRequest(http.MethodPost, base+"/v1/intents", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+wpToken)
		resp, err := hc.Do(req)
		took[k] = time.Since(t0)
		if err != nil {
			codes[k] = -1
			return
		}
		resp.Body.Close()
		codes[k] = resp.StatusCode
	})
	return codes, took
}
