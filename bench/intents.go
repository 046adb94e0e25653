package bench

// The intents phase: the write path. The runtime server (package intentapi, on
// the ledger) runs in this process on a loopback listener and is driven by
// IntentClients goroutines through package client; the same rows (the
// intent, its event, the entity's sequence) written directly with pgx at the
// same concurrency are its ceiling; then the outbox relay publishes the
// backlog both left to Kafka. No Temporal.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/causet/projection-retry/client"
	"github.com/causet/projection-retry/devstack"
	"github.com/causet/projection-retry/event"
	exampleintents "github.com/causet/projection-retry/examples/intents"
	exampleprojections "github.com/causet/projection-retry/examples/projections"
	"github.com/causet/projection-retry/intentapi"
	"github.com/causet/projection-retry/intents"
	"github.com/causet/projection-retry/internal/schema"
	"github.com/causet/projection-retry/ledger"
	"github.com/causet/projection-retry/relay"
)

const (
	intentFork = "bench"
	// followEvery: every followEvery-th intent of a client is a FollowArtist,
	// the others PlayTrack.
	followEvery = 4
	intentMix   = "3 PlayTrack : 1 FollowArtist (FollowArtist reads artist_followers); every intent accepted, 1 event each"
)

// FollowArtist's read of artist_followers as package intents issues it, for
// the stepwise diagnostic.
const stepReadSQL = `SELECT to_jsonb(t)::text FROM "artist_followers" AS t WHERE "user_id" = $1 AND "artist_id" = $2 LIMIT 2`

// intentSpec is one intent of a run: client c's j-th.
type intentSpec struct {
	id, typ, entity string
	payload         map[string]any
	// seq is the sequence number its event gets: every run uses entities of
	// its own, each written by one client only.
	seq int64
}

// spec returns client c's j-th intent of the run prefix. Client c owns the
// entities c, c+clients, c+2·clients, … (perClient of them) and cycles
// through them, so no two clients ever wait for one entity's sequence row
// and the ceiling knows each event's sequence number in advance.
func spec(prefix string, clients, perClient, c, j int) intentSpec {
	e := c + clients*(j%perClient)
	s := intentSpec{
		id:     fmt.Sprintf("%s-%02d-%06d", prefix, c, j),
		entity: fmt.Sprintf("u-%s-%05d", prefix, e),
		seq:    int64(j/perClient) + 1,
	}
	artist := fmt.Sprintf("a-%d", (c*31+j)%500)
	if j%followEvery == followEvery-1 {
		s.typ, s.payload = "FollowArtist", map[string]any{"artistId": artist}
	} else {
		s.typ, s.payload = "PlayTrack", map[string]any{"artistId": artist, "trackId": fmt.Sprintf("t-%d", j%50), "plays": int64(1 + j%5), "days": int64(1)}
	}
	return s
}

// writePath is the runtime server on its listener, its client, and the pool
// the ledger and the ceiling share.
type writePath struct {
	pool     *pgxpool.Pool
	client   *client.Client
	reg      *prometheus.Registry
	versions map[string]int    // deployed handler version by intent type
	emits    map[string]string // the event type each intent type emits
	stop     func() error
}

// startWritePath creates the ledger's tables and artist_followers (the read
// model FollowArtist reads), deploys the example intent handlers and serves
// the runtime on 127.0.0.1, as `causet runtime` does: its pool on
// DATABASE_URL (sized to the clients here), its INFO line per intent
// (written to io.Discard), its metrics on a registry of its own.
func (b *bench) startWritePath(ctx context.Context) (*writePath, error) {
	pc, err := pgxpool.ParseConfig(b.dbURL)
	if err != nil {
		return nil, fmt.Errorf("intents: DATABASE_URL: %w", err)
	}
	pc.MaxConns = int32(b.sizes.IntentConns)
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("intents: pool: %w", err)
	}
	w := &writePath{pool: pool, versions: map[string]int{}, emits: map[string]string{}, stop: func() error { pool.Close(); return nil }}
	ok := false
	defer func() {
		if !ok {
			_ = w.stop()
		}
	}()
	if _, err := schema.Up(ctx, pool, nil); err != nil {
		return nil, err
	}
	ddl, err := exampleprojections.DDL("artist_followers")
	if err != nil {
		return nil, err
	}
	if _, err := pool.Exec(ctx, ddl); err != nil {
		return nil, fmt.Errorf("intents: artist_followers: %w", err)
	}
	for _, name := range exampleintents.Names() {
		data, err := exampleintents.Document(name)
		if err != nil {
			return nil, err
		}
		doc, err := intents.Parse(data)
		if err != nil {
			return nil, fmt.Errorf("intents: example %s: %w", name, err)
		}
		if w.versions[doc.IntentType], err = intents.Deploy(ctx, pool, doc); err != nil {
			return nil, err
		}
	}
	runtimeLog := slog.New(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelInfo}))
	catalog, err := intents.NewCatalog(ctx, pool, runtimeLog)
	if err != nil {
		return nil, err
	}
	for _, t := range []string{"PlayTrack", "FollowArtist"} {
		h, err := catalog.Lookup(ctx, t)
		if err != nil {
			return nil, fmt.Errorf("intents: example handler %s: %w", t, err)
		}
		if ets := h.EventTypes(); len(ets) == 1 {
			w.emits[t] = ets[0]
		} else {
			return nil, fmt.Errorf("intents: example handler %s emits %v, the bench expects one event", t, ets)
		}
	}
	w.reg = prometheus.NewRegistry()
	srv, err := intentapi.New(intentapi.Options{
		Catalog: catalog, Ledger: ledger.New(pool, catalog, ledger.WithLogger(runtimeLog)),
		Logger: runtimeLog, Registerer: w.reg,
	})
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(sctx, ln) }()
	n := b.sizes.IntentClients
	tr := &http.Transport{MaxIdleConns: 2 * n, MaxIdleConnsPerHost: 2 * n, IdleConnTimeout: time.Minute, DisableCompression: true}
	w.client = client.New("http://"+ln.Addr().String(), client.WithHTTPClient(&http.Client{Transport: tr}))
	w.stop = func() error {
		cancel()
		err := <-served
		tr.CloseIdleConnections()
		pool.Close()
		return err
	}
	ok = true
	return w, nil
}

// drive runs clients goroutines, client c submitting its n/clients intents
// of prefix one after the other with submit, and returns the time from the
// start to the last answer and every intent's latency in milliseconds.
func drive(ctx context.Context, prefix string, n, clients, perClient int, submit func(context.Context, intentSpec) error) (time.Duration, []float64, error) {
	per := n / clients
	lat := make([][]float64, clients)
	errs := make([]error, clients)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	start := time.Now()
	for c := range clients {
		wg.Go(func() {
			lat[c] = make([]float64, 0, per)
			for j := range per {
				t0 := time.Now()
				if err := submit(ctx, spec(prefix, clients, perClient, c, j)); err != nil {
					errs[c] = err
					cancel()
					return
				}
				lat[c] = append(lat[c], float64(time.Since(t0).Microseconds())/1000)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	var all []float64
	for c := range clients {
		all = append(all, lat[c]...)
	}
	if err := errors.Join(errs...); err != nil {
		return 0, nil, err
	}
	return elapsed, all, nil
}

// viaRuntime submits s with the client (POST /v1/intents) and checks it was
// accepted with the one event expected.
func (w *writePath) viaRuntime(ctx context.Context, s intentSpec) error {
	res, err := w.client.Submit(ctx, client.Intent{IntentID: s.id, IntentType: s.typ, EntityID: s.entity, ForkID: intentFork, Payload: s.payload})
	switch {
	case err != nil:
		return fmt.Errorf("submit %s: %w", s.id, err)
	case res.Status != client.ResultSuccess:
		return fmt.Errorf("submit %s: %s (%s: %s), want %s", s.id, res.Status, res.Rule, res.Reason, client.ResultSuccess)
	case len(res.Events) != 1 || res.Events[0].Sequence != s.seq:
		return fmt.Errorf("submit %s: %d events (first sequence %d), want 1 with sequence %d", s.id, len(res.Events), firstSeq(res.Events), s.seq)
	}
	return nil
}

func firstSeq(envs []event.Envelope) int64 {
	if len(envs) == 0 {
		return 0
	}
	return envs[0].Sequence
}

// record returns RecordSQL's arguments for s, as the ledger passes them.
func (w *writePath) record(s intentSpec) ([]any, error) {
	payload, err := json.Marshal(s.payload)
	if err != nil {
		return nil, err
	}
	env := event.Envelope{EventID: s.id + ":1", EventType: w.emits[s.typ], EntityID: s.entity, ForkID: intentFork,
		IntentID: s.id, Sequence: 1, OccurredAt: time.Now().UTC(), Payload: payload}
	raw, err := json.Marshal(env)
	if err != nil {
		return nil, err
	}
	hash, err := ledger.RequestHash(intents.Intent{IntentType: s.typ, EntityID: s.entity, ForkID: intentFork, Payload: s.payload})
	if err != nil {
		return nil, err
	}
	return []any{s.id, s.typ, s.entity, intentFork, int64(1), []string{env.EventID}, []string{env.EventType}, []string{string(raw)}, w.versions[s.typ], hash}, nil
}

// checkRecorded checks RecordSQL's answer for s.
func checkRecorded(row pgx.Row, s intentSpec) error {
	var stored string
	var last int64
	if err := row.Scan(&stored, &last); err != nil {
		return err
	}
	if last != s.seq {
		return fmt.Errorf("entity %s: sequence %d, want %d", s.entity, last, s.seq)
	}
	return nil
}

// stepwise is a diagnostic between the runtime and the ceiling: the
// ledger's statements for s, one round trip each (BEGIN, intent lock,
// lookup, FollowArtist's read, the record statement, COMMIT), with no HTTP
// and no handler. The ledger sends the same statements in two round trips
// (three with the read).
func (w *writePath) stepwise(ctx context.Context, s intentSpec) error {
	args, err := w.record(s)
	if err != nil {
		return err
	}
	err = pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
		var now time.Time
		var locked bool
		if err := tx.QueryRow(ctx, ledger.LockSQL, ledger.IntentLockClass, s.id).Scan(&locked, &now); err != nil {
			return err
		}
		var status, rule, reason, resp string
		var version int
		var hash []byte
		if err := tx.QueryRow(ctx, ledger.LookupSQL, s.id).Scan(&status, &rule, &reason, &version, &resp, &hash); !errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("lookup: %v, want no rows", err)
		}
		if s.typ == "FollowArtist" {
			rs, err := tx.Query(ctx, stepReadSQL, s.entity, s.payload["artistId"])
			if err != nil {
				return err
			}
			if _, err := pgx.CollectRows(rs, pgx.RowTo[string]); err != nil {
				return err
			}
		}
		return checkRecorded(tx.QueryRow(ctx, ledger.RecordSQL, args...), s)
	})
	if err != nil {
		return fmt.Errorf("stepwise insert %s: %w", s.id, err)
	}
	return nil
}

// direct writes the rows the ledger writes for s — the ledger's record
// statement (the sequence upsert, the event, the intent row with its
// SUCCESS response) — in one transaction with pgx.BeginFunc (BEGIN, the
// statement, COMMIT: three round trips): no HTTP, no intent lock or lookup,
// no handler.
func (w *writePath) direct(ctx context.Context, s intentSpec) error {
	args, err := w.record(s)
	if err != nil {
		return err
	}
	err = pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error { return checkRecorded(tx.QueryRow(ctx, ledger.RecordSQL, args...), s) })
	if err != nil {
		return fmt.Errorf("direct insert %s: %w", s.id, err)
	}
	return nil
}

// pipelined is direct sent as one round trip (BEGIN, the statement and
// COMMIT in one pgx batch): the least a transaction of these rows costs.
func (w *writePath) pipelined(ctx context.Context, s intentSpec) error {
	args, err := w.record(s)
	if err != nil {
		return err
	}
	batch := &pgx.Batch{}
	batch.Queue("BEGIN")
	batch.Queue(ledger.RecordSQL, args...).QueryRow(func(row pgx.Row) error { return checkRecorded(row, s) })
	batch.Queue("COMMIT")
	conn, err := w.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	if err := conn.SendBatch(ctx, batch).Close(); err != nil {
		// A failed statement leaves the transaction open: roll it back
		// before the connection goes back to the pool.
		_, _ = conn.Exec(context.WithoutCancel(ctx), "ROLLBACK")
		return fmt.Errorf("pipelined insert %s: %w", s.id, err)
	}
	return nil
}

// counterOf keeps the collectors registered on it, so one counter can be
// read without collecting the others (the relay's lag gauges query the
// database at every collection).
type counterOf struct{ cs []prometheus.Collector }

func (g *counterOf) Register(c prometheus.Collector) error { g.cs = append(g.cs, c); return nil }
func (g *counterOf) MustRegister(cs ...prometheus.Collector) {
	g.cs = append(g.cs, cs...)
}
func (g *counterOf) Unregister(prometheus.Collector) bool { return true }

// counter returns the registered counter named name.
func (g *counterOf) counter(name string) (func() float64, error) {
	for _, c := range g.cs {
		if ctr, ok := c.(prometheus.Counter); ok && strings.Contains(ctr.Desc().String(), `"`+name+`"`) {
			return func() float64 {
				var m dto.Metric
				if ctr.Write(&m) != nil {
					return 0
				}
				return m.GetCounter().GetValue()
			}, nil
		}
	}
	return nil, fmt.Errorf("no counter %s registered", name)
}

// drainRelay runs a relay (relay.LoadSettings: CAUSET_RELAY_BATCH and
// CAUSET_RELAY_POLL_INTERVAL, defaults otherwise) over the unpublished
// events until it has published as many as there were when it started, and
// returns that count, the time from Run to the last one marked published,
// and the CPU used.
func (b *bench) drainRelay(ctx context.Context, pool *pgxpool.Pool, topic string) (int, time.Duration, CPUUse, int, error) {
	var backlog int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM causet_events WHERE published_at IS NULL`).Scan(&backlog); err != nil {
		return 0, 0, CPUUse{}, 0, err
	}
	settings, err := relay.LoadSettings(os.LookupEnv)
	if err != nil {
		return 0, 0, CPUUse{}, 0, err
	}
	reg := &counterOf{}
	r, err := relay.New(relay.Options{Pool: pool, Brokers: b.brokers, KafkaOptions: b.kafkaOpts, Topic: topic, Batch: settings.Batch,
		PollInterval: settings.PollInterval, Logger: b.log.With("component", "relay"), Registerer: reg})
	if err != nil {
		return 0, 0, CPUUse{}, 0, err
	}
	published, err := reg.counter("causet_relay_published_total")
	if err != nil {
		return 0, 0, CPUUse{}, 0, err
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	s0 := b.sample(0)
	start := time.Now()
	go func() { done <- r.Run(rctx) }()
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(10 * time.Minute)
	for published() < float64(backlog) {
		select {
		case <-tick.C:
		case err := <-done:
			return 0, 0, CPUUse{}, 0, fmt.Errorf("relay stopped after %.0f of %d events: %v", published(), backlog, err)
		case <-deadline:
			cancel()
			<-done
			return 0, 0, CPUUse{}, 0, fmt.Errorf("relay: %.0f of %d events published in 10 minutes", published(), backlog)
		}
	}
	elapsed := time.Since(start)
	cpu := s0.use(b.sample(0))
	cancel()
	if err := <-done; err != nil {
		return 0, 0, CPUUse{}, 0, err
	}
	return backlog, elapsed, cpu, settings.Batch, nil
}

// intentsPhase measures the write path: per repetition the runtime and the
// ceiling (alternating which goes first), each Intents intents from
// IntentClients clients, then the relay over the backlog the two left.
func (b *bench) intentsPhase(ctx context.Context) error {
	w, err := b.startWritePath(ctx)
	if err != nil {
		return err
	}
	defer func() {
		if err := w.stop(); err != nil {
			b.log.Warn("stop runtime server", "error", err.Error())
		}
	}()
	topic := "bench-" + b.runID + "-intents"
	if err := devstack.EnsureTopicsWith(ctx, b.kafka(), int32(b.sizes.Partitions), topic); err != nil {
		return err
	}
	sz := b.sizes
	perClient := max(sz.IntentEntities/sz.IntentClients, 1)
	run := IntentsRun{Intents: sz.Intents - sz.Intents%sz.IntentClients, Clients: sz.IntentClients, Entities: perClient * sz.IntentClients,
		PoolConns: sz.IntentConns, Mix: intentMix}

	// One measurement: n intents from the clients with submit, into m.
	type measurement struct {
		kind, name string
		submit     func(context.Context, intentSpec) error
		m          *intentMeasure
	}
	var rt, direct, piped, steps intentMeasure
	ms := []measurement{
		{"i", "runtime", w.viaRuntime, &rt},
		{"d", "direct pgx, one transaction (pgx.BeginFunc) per intent", w.direct, &direct},
		{"p", "direct pgx, BEGIN, statement and COMMIT pipelined in one round trip", w.pipelined, &piped},
		{"s", "direct pgx, the ledger's statements one round trip each", w.stepwise, &steps},
	}
	// Warm-up, not measured: the clients' HTTP connections, the pool's
	// connections and prepared statements, the handlers' first evaluations.
	for _, x := range ms {
		if _, _, err := drive(ctx, b.runID+"-w"+x.kind, 4*sz.IntentClients, sz.IntentClients, 4, x.submit); err != nil {
			return fmt.Errorf("warm-up, %s: %w", x.name, err)
		}
	}
	for rep := range sz.Reps {
		// Rotate the order, so none always runs first (or on a fuller table).
		for k := range ms {
			x := ms[(k+rep)%len(ms)]
			s0 := b.sample(0)
			elapsed, lat, err := drive(ctx, fmt.Sprintf("%s-%s%d", b.runID, x.kind, rep), run.Intents, sz.IntentClients, perClient, x.submit)
			if err != nil {
				return fmt.Errorf("%s: %w", x.name, err)
			}
			cpu := s0.use(b.sample(0))
			sort.Float64s(lat)
			rate, p50, p99 := float64(len(lat))/elapsed.Seconds(), percentile(lat, 0.50), percentile(lat, 0.99)
			x.m.rates, x.m.p50, x.m.p99, x.m.cpu = append(x.m.rates, rate), append(x.m.p50, p50), append(x.m.p99, p99), append(x.m.cpu, cpu)
			b.progress("  intents rep %d, %s: %.0f intents/s, p50 %.1f ms, p99 %.1f ms; cores used: machine %.2f, postgres %.2f, bench %.2f",
				rep+1, x.name, rate, p50, p99, cpu.MachineBusy, cpu.Postgres, cpu.Bench)
		}
		n, elapsed, cpu, batch, err := b.drainRelay(ctx, w.pool, topic)
		if err != nil {
			return err
		}
		eps := float64(n) / elapsed.Seconds()
		run.RelayEvents, run.RelayBatch = n, batch
		run.RelayEventsPerSecReps, run.RelayCPUReps = append(run.RelayEventsPerSecReps, eps), append(run.RelayCPUReps, cpu)
		b.progress("  intents rep %d, relay: published %d events at %.0f events/s; cores used: machine %.2f, postgres %.2f, bench (relay, kfake) %.2f",
			rep+1, n, eps, cpu.MachineBusy, cpu.Postgres, cpu.Bench)
	}
	run.IntentsPerSecReps, run.CPUReps, run.P50MsReps, run.P99MsReps = rt.rates, rt.cpu, rt.p50, rt.p99
	run.IntentsPerSec, run.P50Ms, run.P99Ms = median(rt.rates), median(rt.p50), median(rt.p99)
	run.LedgerPerSecReps, run.LedgerCPUReps = direct.rates, direct.cpu
	run.LedgerPerSec, run.LedgerP50Ms, run.LedgerP99Ms = median(direct.rates), median(direct.p50), median(direct.p99)
	run.PipelinedPerSecReps, run.PipelinedCPUReps = piped.rates, piped.cpu
	run.PipelinedPerSec, run.PipelinedP50Ms, run.PipelinedP99Ms = median(piped.rates), median(piped.p50), median(piped.p99)
	run.StepwisePerSecReps, run.StepwiseCPUReps = steps.rates, steps.cpu
	run.StepwisePerSec, run.StepwiseP50Ms, run.StepwiseP99Ms = median(steps.rates), median(steps.p50), median(steps.p99)
	run.RelayEventsPerSec = median(run.RelayEventsPerSecReps)
	run.NotSuccess = notSuccess(w.reg)
	b.res.Intents = run
	b.progress("intents: runtime %.0f intents/s (p50 %.1f ms, p99 %.1f ms) against %.0f/s direct with pgx (%.0f/s statement by statement), %d clients; relay %.0f events/s",
		run.IntentsPerSec, run.P50Ms, run.P99Ms, run.LedgerPerSec, run.StepwisePerSec, run.Clients, run.RelayEventsPerSec)
	return nil
}

// intentMeasure collects one measurement's repetitions.
type intentMeasure struct {
	rates, p50, p99 []float64
	cpu             []CPUUse
}

// percentile of sorted xs (nearest rank; 0 when empty).
func percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// notSuccess is what the runtime answered other than success, by status
// (e.g. unavailable: 503s the client re-submitted), from its metrics.
func notSuccess(reg *prometheus.Registry) map[string]float64 {
	mfs, err := reg.Gather()
	if err != nil {
		return nil
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "causet_runtime_intents_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "status" && l.GetValue() != "success" && m.GetCounter().GetValue() > 0 {
					out[l.GetValue()] = m.GetCounter().GetValue()
				}
			}
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}
