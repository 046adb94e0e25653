package bench

// The throughput phases: the PostgreSQL ceiling, the bridge in inline mode
// (with its paced latency phase), workflow mode and the peer.

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/causet/projection-retry/projection"
)

const ceilingUpsert = `INSERT INTO bench_ceiling (event_id, entity_id, produced_at, v) VALUES ($1, $2, $3, $4)
ON CONFLICT (event_id) DO UPDATE SET entity_id = excluded.entity_id, produced_at = excluded.produced_at, v = excluded.v`

const ledgerInsert = `INSERT INTO bench_ledger (key, bucket, projection, ir_version) VALUES ($1, $2, $3, 1) ON CONFLICT DO NOTHING`

// ---- 1. ceiling ----

func (b *bench) ceiling(ctx context.Context) error {
	n := b.sizes.Ceiling
	at := time.Now()
	bucket := projection.DedupeHour(at)
	run := func(conns int, prefix string, ledger bool) (float64, error) {
		start := time.Now()
		per := n / conns
		errc := make(chan error, conns)
		for c := range conns {
			go func() {
				for i := 0; i < per; i += 500 {
					batch := &pgx.Batch{}
					for j := i; j < min(i+500, per); j++ {
						k := c*per + j
						id := fmt.Sprintf("%s-%07d", prefix, k)
						if ledger {
							batch.Queue(ledgerInsert, projection.DedupeKey(benchProjection, benchFork, id), bucket, benchProjection)
						}
						batch.Queue(ceilingUpsert, id, fmt.Sprintf("e-%d", k%1000), at, int64(k+1))
					}
					err := pgx.BeginFunc(ctx, b.svc.Pool, func(tx pgx.Tx) error { return tx.SendBatch(ctx, batch).Close() })
					if err != nil {
						errc <- err
						return
					}
				}
				errc <- nil
			}()
		}
		for range conns {
			if err := <-errc; err != nil {
				return 0, fmt.Errorf("ceiling upsert: %w", err)
			}
		}
		return float64(per*conns) / time.Since(start).Seconds(), nil
	}
	var one, par, led []float64
	for rep := range b.sizes.Reps {
		x, err := run(1, fmt.Sprintf("c1r%d", rep), false)
		if err != nil {
			return err
		}
		y, err := run(b.sizes.Partitions, fmt.Sprintf("cpr%d", rep), false)
		if err != nil {
			return err
		}
		z, err := run(b.sizes.Partitions, fmt.Sprintf("clr%d", rep), true)
		if err != nil {
			return err
		}
		one, par, led = append(one, x), append(par, y), append(led, z)
	}
	c := Ceiling{Rows: n, RowsPerSecOneConn: median(one), RowsPerSecParallel: median(par), WithLedgerPerSec: median(led)}
	c.RowsPerSec = max(c.RowsPerSecOneConn, c.RowsPerSecParallel)
	b.res.Ceiling = c
	b.progress("ceiling: pgx batched upsert %.0f rows/s (1 conn), %.0f rows/s (%d conns); with a dedupe-ledger row per event %.0f events/s (median of %d)",
		c.RowsPerSecOneConn, c.RowsPerSecParallel, b.sizes.Partitions, c.WithLedgerPerSec, b.sizes.Reps)
	return nil
}

// ---- 2. inline ----

func (b *bench) inlineRuns(ctx context.Context) error {
	for i, pctv := range b.sizes.FailRates {
		run, err := b.inline(ctx, pctv, b.sizes.Inline[i])
		if err != nil {
			return err
		}
		b.res.Inline = append(b.res.Inline, run)
		b.progress("inline %g%% failing: %.0f events/s, p50 %.1f ms, p99 %.1f ms (paced at %.0f/s), bridge peak RSS %.0f MB",
			pctv, run.EventsPerSec, run.P50Ms, run.P99Ms, run.LatencyRate, run.PeakRSSMB)
	}
	return nil
}

func (b *bench) inline(ctx context.Context, failPct float64, n int) (InlineRun, error) {
	return b.inlineOn(ctx, fmt.Sprintf("inline%g", failPct), fmt.Sprintf("inline %g%%", failPct), benchDB{pool: b.svc.Pool}, failPct, n)
}

// benchDB is the database an inline run writes to: the pool its rows are
// read back from, and what the bridge child's environment adds (its
// DATABASE_URL; none for the bench's own database).
type benchDB struct {
	pool *pgxpool.Pool
	env  map[string]string
}

// inlineOn is an inline run in db; its bridges, topics and logs are named
// after stem, its progress lines after label.
func (b *bench) inlineOn(ctx context.Context, stem, label string, db benchDB, failPct float64, n int) (InlineRun, error) {
	run := InlineRun{FailPct: failPct, Events: n}
	reps := b.sizes.Reps
	if failPct > 1 {
		reps = 1 // hand-off bound: minutes per repetition, little noise
	}
	for rep := range reps {
		last := rep == reps-1
		if err := b.inlineRep(ctx, fmt.Sprintf("%s-r%d", stem, rep), label, db, &run, last); err != nil {
			return run, err
		}
	}
	run.EventsPerSec = median(run.EventsPerSecReps)
	return run, nil
}

// inlineRep drains n pre-produced events through a fresh bridge; on the
// last repetition it also runs the paced latency phase and reads the RSS.
func (b *bench) inlineRep(ctx context.Context, phase, label string, db benchDB, run *InlineRun, last bool) error {
	failPct, n := run.FailPct, run.Events
	rep := len(run.EventsPerSecReps)
	prefix := b.runID + "-" + phase
	topic, nf, err := b.phaseEvents(ctx, phase, prefix+"-d", n, failPct)
	if err != nil {
		return err
	}
	run.Failing = nf
	var span serverSpan
	if nf > 0 && last {
		span = b.beginServerSpan(ctx)
	}
	p, err := b.startBridge(ctx, phase, phaseEnv(topic, b.handoffQueue(), db.env))
	if err != nil {
		return err
	}
	defer p.stop()
	ok := float64(n - nf)
	elapsed, cpu, err := b.waitBridge(ctx, p, 10*time.Minute, func(c counters) (bool, error) {
		return c.applied+c.duplicate >= ok && c.handedOff >= float64(nf), nil
	})
	if err != nil {
		return err
	}
	if run.Server = span.end(ctx, cpu.Temporal, elapsed); run.Server != nil {
		b.progress("  %s: temporal server's own figures: %s", label, run.Server)
	}
	eps := float64(n) / elapsed.Seconds()
	run.EventsPerSecReps = append(run.EventsPerSecReps, eps)
	run.CPUReps = append(run.CPUReps, cpu)
	if nf > 0 {
		run.StartsPerSec = float64(nf) / elapsed.Seconds()
	}
	b.progress("  %s rep %d: %.0f events/s; cores used: machine %.2f, bridge %.2f, postgres %.2f, temporal %.2f, bench+kfake %.2f",
		label, rep+1, eps, cpu.MachineBusy, cpu.Bridge, cpu.Postgres, cpu.Temporal, cpu.Bench)
	if !last {
		return nil
	}

	// Paced phase: half the drained rate, stamped at produce time.
	rate := median(run.EventsPerSecReps) / 2
	sent, sentFail, err := b.paced(ctx, topic, prefix+"-l", rate, time.Duration(b.sizes.LatencySeconds*float64(time.Second)), failPct)
	if err != nil {
		return err
	}
	run.LatencyRate = rate
	if _, _, err := b.waitBridge(ctx, p, 2*time.Minute, func(c counters) (bool, error) {
		return c.applied+c.duplicate >= ok+float64(sent-sentFail) && c.handedOff >= float64(nf+sentFail), nil
	}); err != nil {
		return fmt.Errorf("paced phase: %w", err)
	}
	err = db.pool.QueryRow(ctx, `SELECT count(*),
  coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY ms), 0),
  coalesce(percentile_cont(0.99) WITHIN GROUP (ORDER BY ms), 0)
FROM (SELECT (extract(epoch FROM applied_at - produced_at) * 1000)::float8 AS ms
      FROM bench_rows WHERE event_id >= $1 AND event_id < $2) s`, prefix+"-l-", prefix+"-l.").Scan(&run.LatencySamples, &run.P50Ms, &run.P99Ms)
	if err != nil {
		return fmt.Errorf("latency query: %w", err)
	}
	_, peak, err := rss(p.cmd.Process.Pid)
	if err != nil {
		return err
	}
	run.PeakRSSMB = peak
	return nil
}

// median of xs (0 when empty).
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// ---- 3. workflow mode ----

func (b *bench) workflowMode(ctx context.Context) error {
	n := b.sizes.Workflow
	prefix := b.runID + "-workflow"
	topic, _, err := b.phaseEvents(ctx, "workflow", prefix, n, 0)
	if err != nil {
		return err
	}
	p, err := b.startBridge(ctx, "workflow", phaseEnv(topic, b.workQueue, map[string]string{
		"CAUSET_BRIDGE_MODE": "workflow", "CAUSET_ORDERING": "none", // workflow mode keeps no entity order
	}))
	if err != nil {
		return err
	}
	defer p.stop()
	var lastCheck time.Time
	elapsed, cpu, err := b.waitBridge(ctx, p, 10*time.Minute, func(c counters) (bool, error) {
		if time.Since(lastCheck) < 100*time.Millisecond {
			return false, nil
		}
		lastCheck = time.Now()
		got, err := b.rowsWithPrefix(ctx, prefix)
		return got >= n, err
	})
	if err != nil {
		return err
	}
	_, peak, _ := rss(p.cmd.Process.Pid)
	b.res.Workflow = WorkflowRun{Events: n, EventsPerSec: float64(n) / elapsed.Seconds(), PeakRSSMB: peak, CPU: cpu}
	b.progress("workflow mode: %.1f events/s (%d events, every one a workflow); cores used: machine %.2f, bridge %.2f, postgres %.2f, temporal %.2f, bench+worker %.2f",
		b.res.Workflow.EventsPerSec, n, cpu.MachineBusy, cpu.Bridge, cpu.Postgres, cpu.Temporal, cpu.Bench)
	return nil
}

// rowsWithPrefix counts the applied rows of a phase.
func (b *bench) rowsWithPrefix(ctx context.Context, prefix string) (int, error) {
	var n int
	err := b.svc.Pool.QueryRow(ctx, `SELECT count(*) FROM bench_rows WHERE event_id >= $1 AND event_id < $2`, prefix+"-", prefix+".").Scan(&n)
	return n, err
}

// ---- 4. peer ----

func (b *bench) peerRuns(ctx context.Context) error {
	for i, pctv := range b.sizes.PeerFailRates {
		n := b.sizes.Peer[i]
		reps := b.sizes.Reps
		if pctv > 0 {
			reps = 1 // bound by the in-place retry sleeps: no noise to speak of
		}
		run := PeerRun{FailPct: pctv, Events: n}
		for rep := range reps {
			phase := fmt.Sprintf("peer%g-r%d", pctv, rep)
			topic, nf, err := b.phaseEvents(ctx, phase, b.runID+"-"+phase, n, pctv)
			if err != nil {
				return err
			}
			s0 := b.sample(0)
			elapsed, dl, err := runPeer(ctx, b.kafka(), topic, topic+"-g", b.dlqTopic, b.svc.Engine, b.short, n)
			if err != nil {
				return err
			}
			cpu := s0.use(b.sample(0))
			run.Failing, run.DeadLettered = nf, dl
			run.EventsPerSecReps = append(run.EventsPerSecReps, float64(n)/elapsed.Seconds())
			run.CPUReps = append(run.CPUReps, cpu)
			b.progress("  peer %g%% rep %d: %.0f events/s; cores used: machine %.2f, peer+kfake %.2f, postgres %.2f",
				pctv, rep+1, float64(n)/elapsed.Seconds(), cpu.MachineBusy, cpu.Bench, cpu.Postgres)
		}
		run.EventsPerSec = median(run.EventsPerSecReps)
		b.res.Peer = append(b.res.Peer, run)
		b.progress("peer %g%% failing: %.0f events/s (%d dead-lettered after in-place retries)", pctv, run.EventsPerSec, run.DeadLettered)
	}
	return nil
}
