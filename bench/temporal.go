package bench

// The phases that measure Temporal: the default schedule's accuracy on the
// dev server, and the hand-off capacity against raw ExecuteWorkflow calls
// with the bridge's memory while those failures are in flight.

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/starter"
)

// ---- 5. schedule accuracy ----

func (b *bench) schedule(ctx context.Context) error {
	n := b.sizes.Schedule
	prefix := b.runID + "-schedule"
	topic, _, err := b.phaseEvents(ctx, "schedule", prefix, n, 100)
	if err != nil {
		return err
	}
	// The default schedule (5 attempts, 1s × 2, max 30s), whose plan the
	// observed attempts are compared with below.
	p, err := b.startBridge(ctx, "schedule", phaseEnv(topic, b.workQueue, retryEnv(config.DefaultRetry())))
	if err != nil {
		return err
	}
	defer p.stop()
	if _, _, err := b.waitBridge(ctx, p, 2*time.Minute, func(c counters) (bool, error) { return c.handedOff >= float64(n), nil }); err != nil {
		return err
	}
	plan := config.DefaultRetry().Plan(config.ModeInline)
	run := ScheduleRun{Events: n}
	for _, o := range plan.Offsets {
		run.ExpectedS = append(run.ExpectedS, o.Seconds())
	}
	deadline := time.Now().Add(plan.Offsets[len(plan.Offsets)-1] + time.Minute)
	for i := range n {
		id := contract.RetryWorkflowID(benchProjection, benchFork, fmt.Sprintf("%s-%07d", prefix, i))
		var st contract.Status
		for {
			v, err := b.svc.Temporal.Client.QueryWorkflow(ctx, id, "", contract.QueryStatus)
			if err == nil {
				err = v.Get(&st)
			}
			if err == nil && len(st.Attempts) >= len(plan.Offsets) {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("workflow %s: %d of %d attempts after the schedule plus a minute (last error %v)", id, len(st.Attempts), len(plan.Offsets), err)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(250 * time.Millisecond):
			}
		}
		var obs []float64
		t0 := st.Attempts[0].StartedAt
		for k, a := range st.Attempts[:len(plan.Offsets)] {
			if a.StartedAt.IsZero() {
				continue // lost before any worker started it: no time to measure
			}
			off := a.StartedAt.Sub(t0)
			obs = append(obs, off.Seconds())
			run.LatenessMaxS = max(run.LatenessMaxS, (off - plan.Offsets[k]).Seconds())
		}
		run.ObservedS = append(run.ObservedS, obs)
	}
	// What a dead letter of the default schedule costs Temporal: the first
	// event's history once its dead letter is published.
	first := contract.RetryWorkflowID(benchProjection, benchFork, fmt.Sprintf("%s-%07d", prefix, 0))
	for {
		var st contract.Status
		v, err := b.svc.Temporal.Client.QueryWorkflow(ctx, first, "", contract.QueryStatus)
		if err == nil {
			err = v.Get(&st)
		}
		if err == nil && st.DLQ != nil {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("workflow %s: not dead-lettered a minute after its schedule (last error %v)", first, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	if run.DeadLetter, err = readHistoryCost(ctx, b.svc.Temporal.Client, first); err != nil {
		return err
	}
	b.res.Schedule = run
	b.progress("a dead letter of the default schedule: %s", run.DeadLetter)
	b.progress("schedule accuracy: expected %s s, observed %v, worst lateness %.3f s", floats(run.ExpectedS, 0), run.ObservedS, run.LatenessMaxS)
	return nil
}

// ---- 6 + 7. hand-off capacity and in-flight memory ----

func (b *bench) handoff(ctx context.Context) error {
	n := b.sizes.Handoff
	conc := b.sizes.MaxInflight
	half := n / 2
	span := b.beginServerSpan(ctx)
	raw1, err := b.rawStarts(ctx, b.runID+"-raw1", half, conc, b.handoffQueue(), false)
	if err != nil {
		return err
	}
	rawServer := span.end(ctx, raw1.cpu.Temporal, raw1.d)

	topic, _, err := b.phaseEvents(ctx, "handoff", b.runID+"-handoff", n, 100)
	if err != nil {
		return err
	}
	span = b.beginServerSpan(ctx)
	p, err := b.startBridge(ctx, "handoff", phaseEnv(topic, b.handoffQueue(), retryEnv(longRetry)))
	if err != nil {
		return err
	}
	elapsed, cpu, err := b.waitBridge(ctx, p, 15*time.Minute, func(c counters) (bool, error) { return c.handedOff >= float64(n), nil })
	if err != nil {
		p.stop()
		return err
	}
	bridgeServer := span.end(ctx, cpu.Temporal, elapsed)
	// Let the bridge commit and settle, then read its memory.
	time.Sleep(2 * time.Second)
	cur, peak, err := rss(p.cmd.Process.Pid)
	p.stop()
	if err != nil {
		return err
	}
	b.res.InFlight = InFlightRun{Failures: n, RSSMB: cur, PeakRSSMB: peak}

	raw2, err := b.rawStarts(ctx, b.runID+"-raw2", n-half, conc, b.handoffQueue(), false)
	if err != nil {
		return err
	}
	// What eager workflow start buys: the same starts on the in-process
	// worker's queue, without and with EnableEagerStart (the server hands
	// the first workflow task back in the start's response). A polled queue
	// runs each workflow's first task, so both are compared on it. The
	// retries they schedule are 10 minutes out, after the bench.
	span = b.beginServerSpan(ctx)
	polled, err := b.rawStarts(ctx, b.runID+"-polled", half, conc, b.workQueue, false)
	if err != nil {
		return err
	}
	polledServer := span.end(ctx, polled.cpu.Temporal, polled.d)
	span = b.beginServerSpan(ctx)
	eager, err := b.rawStarts(ctx, b.runID+"-eager", half, conc, b.workQueue, true)
	if err != nil {
		return err
	}
	eagerServer := span.end(ctx, eager.cpu.Temporal, eager.d)
	rawRate := float64(n) / (raw1.d + raw2.d).Seconds()
	b.res.Handoff = HandoffRun{Events: n, Concurrency: conc, BridgeStartsPerSec: float64(n) / elapsed.Seconds(), RawStartsPerSec: rawRate,
		RawBeforePerSec: float64(half) / raw1.d.Seconds(), RawAfterPerSec: float64(n-half) / raw2.d.Seconds(),
		BridgeCPU: cpu, RawCPU: raw1.cpu,
		PolledPerSec: float64(half) / polled.d.Seconds(), EagerPerSec: float64(half) / eager.d.Seconds(), PolledCPU: polled.cpu, EagerCPU: eager.cpu,
		BridgeServer: bridgeServer, RawServer: rawServer, PolledServer: polledServer, EagerServer: eagerServer}
	b.progress("  hand-off cores used: bridge run: machine %.2f, bridge %.2f, postgres %.2f, temporal %.2f; raw run: machine %.2f, bench %.2f, temporal %.2f; raw before %.0f/s, after %.0f/s",
		cpu.MachineBusy, cpu.Bridge, cpu.Postgres, cpu.Temporal, raw1.cpu.MachineBusy, raw1.cpu.Bench, raw1.cpu.Temporal, b.res.Handoff.RawBeforePerSec, b.res.Handoff.RawAfterPerSec)
	b.progress("hand-off: bridge %.0f workflow starts/s at 100%% failing, raw ExecuteWorkflow %.0f/s (%d concurrent)", b.res.Handoff.BridgeStartsPerSec, rawRate, conc)
	b.progress("  eager start: on a polled queue %.0f starts/s without, %.0f/s with EnableEagerStart (temporal %.2f and %.2f cores)",
		b.res.Handoff.PolledPerSec, b.res.Handoff.EagerPerSec, polled.cpu.Temporal, eager.cpu.Temporal)
	for _, x := range []struct {
		what string
		f    *ServerFigures
	}{{"bridge", bridgeServer}, {"raw", rawServer}, {"polled queue", polledServer}, {"polled queue, eager", eagerServer}} {
		if x.f != nil {
			b.progress("  temporal server's own figures, %s: %s", x.what, x.f)
		}
	}
	b.progress("in flight: bridge RSS %.0f MB (peak %.0f MB) with %d failures handed off and retrying", cur, peak, n)
	return nil
}

// rawStarts makes n ExecuteWorkflow calls for the retry workflow on queue,
// with the bridge's start options (and EnableEagerStart if eager), from
// conc goroutines, and returns the time taken.
type timed struct {
	d   time.Duration
	cpu CPUUse
}

func (b *bench) rawStarts(ctx context.Context, prefix string, n, conc int, queue string, eager bool) (timed, error) {
	s0 := b.sample(0)
	var next atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	start := time.Now()
	for range conc {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				id := fmt.Sprintf("%s-%07d", prefix, i)
				in := contract.RetryInput{
					Event: envelope(id, "fail-"+id, i, true, time.Now()), Projection: benchProjection, Key: []byte("fail-" + id),
					Source: contract.Source{Topic: "raw", Partition: 0, Offset: int64(i)}, Mode: config.ModeInline,
					FirstAttempt: &contract.Attempt{Number: 1, StartedAt: time.Now(), ErrorKind: "ir_eval", Error: "division by zero"},
					Retry:        longRetry, ReplayWindow: contract.DefaultReplayWindow,
				}
				sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				opts := starter.StartOptions(queue, in)
				opts.EnableEagerStart = eager
				_, err := b.svc.Temporal.Client.ExecuteWorkflow(sctx, opts, contract.RetryWorkflowName, in)
				cancel()
				if err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return timed{}, fmt.Errorf("raw ExecuteWorkflow: %w", err)
	}
	return timed{d: time.Since(start), cpu: s0.use(b.sample(0))}, nil
}
