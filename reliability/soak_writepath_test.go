package reliability

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/causet/projection-retry/client"
	"github.com/causet/projection-retry/event"
	"github.com/causet/projection-retry/internal/testenv"
)

// The soak's write path: `causet runtime` and `causet relay` run beside
// the bridges and workers, each on a test host of its own and among the
// nemesis's targets (kill -9, SIGSTOP, its links cut or slowed), while
// HTTP clients submit intents (the example intent handlers: follow,
// unfollow, play) at soakIntentRate. Most go through client.Submit as a
// user's service would; one in twenty through a client whose network
// loses every POST's answer on its way back (the runtime recorded it or
// not: the client asks GET /v1/intents/{id}, and submits again if it is not
// recorded); one in twenty answered intents is submitted again at once,
// and must get the same answer. An intent the faults left unanswered (the
// client gave up) is submitted again once they stop, as its user would,
// until it is answered. The direct producer's REL_EVENT stream shares the
// events topic. After the drain the write path's checks of scenarios 11-13
// hold: every intent answered SUCCESS or REJECTED and recorded once with
// that answer, every ledger event on the topic once in its entity's order
// (re-sends of the same bytes aside), and the example read models equal to
// what the ledger's events give.

// soakIntentRate is intents per second.
const soakIntentRate = 6

// writePathSlots adds the runtime and the relay to the nemesis's slots:
// the runtime serves on a fixed address of its host, so that clients reach
// it again after a restart.
func (so *soak) writePathSlots(w *writePath, nw *testenv.Network) {
	rh, lh := nw.Host("runtime"), nw.Host("relay")
	addr := fmt.Sprintf("%s:%d", rh.IP, testenv.FreePort(so.s.t))
	w.rtURL = "http://" + addr
	env := map[string]string{"CAUSET_RUNTIME_ADDR": addr, "CAUSET_RUNTIME_TOKENS": "scenarios write,read " + wpToken}
	so.slots = append(so.slots,
		&soakSlot{name: "runtime-1", host: rh, run: func() *proc { return so.s.startOn(rh, "runtime", env, "runtime") }},
		&soakSlot{name: "relay-1", host: lh, run: func() *proc { return so.s.startOn(lh, "relay", nil, "relay") }})
}

// soakClients is what the clients were told.
type soakClients struct {
	w    *writePath
	ins  []client.Intent
	outs []wpOutcome // each intent's answer: the last one, once answered
	// answerLost are the intents sent through the client that loses
	// answers; again those answered intents submitted again at once.
	answerLost, again map[int]bool
	done              chan struct{}

	mu sync.Mutex
	// againDiffer counts second answers that differ from the first.
	againDiffer int
	examples    []string
	// resubmitted counts intents submitted again after the faults.
	resubmitted int
}

// lostAnswers is a transport whose POST answers are lost on their way back
// to the client: the runtime has done the work (or not), the client sees a
// broken connection.
type lostAnswers struct{ http.RoundTripper }

func (l lostAnswers) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := l.RoundTripper.RoundTrip(req)
	if err != nil || req.Method != http.MethodPost {
		return resp, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return nil, errors.New("soak: the answer was lost on its way back")
}

// submitIntents starts the clients: soakIntentRate intents a second for d.
func (so *soak) submitIntents(w *writePath, seed uint64, d time.Duration) *soakClients {
	n := int(d.Seconds()) * soakIntentRate
	rng := rand.New(rand.NewPCG(seed, 0x696e74))
	sc := &soakClients{w: w, ins: w.gen.slice(0, n), answerLost: map[int]bool{}, again: map[int]bool{}, done: make(chan struct{})}
	for k := range n {
		switch rng.IntN(20) {
		case 0:
			sc.answerLost[k] = true
		case 1:
			sc.again[k] = true
		}
	}
	const callers = 16
	plain := w.client(callers)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	lossy := client.New(w.rtURL, client.WithHTTPClient(&http.Client{Transport: lostAnswers{tr}}), client.WithToken(wpToken))
	sc.outs = make([]wpOutcome, n)
	go func() {
		defer close(sc.done)
		start := time.Now()
		inParallel(n, callers, func(k int) {
			time.Sleep(time.Until(start.Add(time.Duration(int64(d) * int64(k) / int64(n)))))
			cl := plain
			if sc.answerLost[k] {
				cl = lossy
			}
			sc.outs[k] = sc.submit(cl, k)
			if sc.again[k] && sc.outs[k].err == nil {
				sc.compare(k, sc.submit(plain, k))
			}
		})
	}()
	return sc
}

func (sc *soakClients) submit(cl *client.Client, k int) wpOutcome {
	t0 := time.Now()
	res, err := cl.Submit(sc.w.ctx, sc.ins[k])
	return wpOutcome{res: res, err: err, took: time.Since(t0), end: time.Now()}
}

// compare checks a second answer of intent k against its first; an answer
// that did not come is not a difference.
func (sc *soakClients) compare(k int, second wpOutcome) {
	first := sc.outs[k]
	if second.err != nil || (first.res.Status == second.res.Status && reflect.DeepEqual(eventIDs(first.res), eventIDs(second.res))) {
		return
	}
	sc.mu.Lock()
	defer sc.mu.Unlock()
	sc.againDiffer++
	if len(sc.examples) < 5 {
		sc.examples = append(sc.examples, fmt.Sprintf("%s: %s %v, then %s %v", sc.ins[k].IntentID,
			first.res.Status, eventIDs(first.res), second.res.Status, eventIDs(second.res)))
	}
}

func eventIDs(r client.Result) []string {
	var ids []string
	for _, e := range r.Events {
		ids = append(ids, e.EventID)
	}
	return ids
}

// answerAll waits for the clients, then submits every intent still
// unanswered again until it is answered (for at most within), as its
// user would once the faults are over.
func (sc *soakClients) answerAll(t *testing.T, so *soak, within time.Duration) {
	<-sc.done
	plain := sc.w.client(8)
	var left []int
	for k, o := range sc.outs {
		if o.err != nil {
			left = append(left, k)
		}
	}
	so.note("clients done: %d intents, %d unanswered (the client gave up), submitted again", len(sc.ins), len(left))
	sc.resubmitted = len(left)
	ctx, cancel := context.WithTimeout(sc.w.ctx, within)
	defer cancel()
	inParallel(len(left), 8, func(i int) {
		k := left[i]
		for ctx.Err() == nil {
			if o := sc.submit(plain, k); o.err == nil {
				sc.outs[k] = o
				return
			}
			time.Sleep(time.Second)
		}
	})
	require.NoError(t, ctx.Err(), "intents still unanswered %s after the faults", within)
}

// writePathHolds waits for the relay to publish every ledger event and the
// bridges to apply them, then checks intents, topic and read models.
func (so *soak) writePathHolds(t *testing.T, r *result, sc *soakClients) {
	w := sc.w
	d, ok := w.waitPublished(5 * time.Minute)
	require.True(t, ok, "the relay did not publish every ledger event: %d unpublished", w.unpublished())
	r.fig("publish_drain_s", durS(d))
	evs := w.ledgerEvents()
	d, ok = w.waitProjected(evs, 5*time.Minute)
	require.True(t, ok, "the bridges did not apply every intent's event: %s; applied followers %d, stats %d",
		w.progress(), w.projected("artist_followers"), w.projected("artist_stats"))
	r.fig("project_drain_s", durS(d))
	r.fig("intents_answer_lost_on_the_way", len(sc.answerLost))
	r.fig("intents_submitted_twice", len(sc.again))
	r.fig("intents_resubmitted_after_faults", sc.resubmitted)
	r.fig("intents_second_answer_differs", sc.againDiffer)
	require.Zero(t, sc.againDiffer, "an intent submitted again got another answer, e.g. %v", sc.examples)
	r.intents(w.checkIntents(sc.ins, sc.outs))
	r.topic(w.checkTopic(evs), len(evs))
	r.readModels(w.checkReadModels(evs))
}

// directEvent says which events the soak's direct producer wrote: those of
// relIR's source type.
func directEvent(env event.Envelope) bool { return env.EventType == "REL_EVENT" }
