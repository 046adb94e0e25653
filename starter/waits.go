package starter

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"go.temporal.io/api/serviceerror"

	"github.com/causet/projection-retry/internal/backoff"
)

// Every wait on a dependency goes through a retrier: capped backoff with
// jitter between tries, and the error classes of ARCHITECTURE.md — a
// failure is an outage only when the dependency's probe does not answer;
// while it answers, the try itself is at fault and the caller bounds how
// many such tries it allows.

// dependency is what a try depends on: its name is the log's dependency
// field and the outage_pauses_total label; probe proves an outage (nil:
// every failure counts as one).
type dependency struct {
	name  string
	probe func(context.Context) error
}

// waits is how a partition waits on its dependencies: until its context
// ends, with the bridge's backoff, probes and outage counter.
type waits struct {
	ctx  context.Context
	opts *Options
	m    *metrics
	// progress is the partition's (stalled.go): every try that returns and
	// every backoff that ends is progress.
	progress
}

func (w *waits) database() dependency { return dependency{"database", w.opts.Probe} }
func (w *waits) temporal() dependency { return dependency{"temporal", w.opts.TemporalProbe} }

// retrier is one retry-until-done loop of a partition.
type retrier struct {
	w       *waits
	dep     dependency
	log     *slog.Logger
	bo      backoff.Backoff
	outage  time.Time // when the outage began; zero while there is none
	healthy int       // failed tries while the dependency answered its probe
	// probeFails: the dependency's last probe failed, so a try found
	// waiting once it answers again waits on a silent connection.
	probeFails bool
}

func (w *waits) retrier(log *slog.Logger, dep dependency) *retrier {
	return &retrier{w: w, dep: dep, log: log, bo: backoff.Backoff{Min: w.opts.MinBackoff, Max: w.opts.MaxBackoff}}
}

// failed classifies a failed try. It returns true when the dependency
// answers its probe: the try, not the dependency, failed (r.healthy counts
// them). Otherwise it is an outage: msg is logged at WARN as bridge_outage
// when the outage begins (counted once), at DEBUG after.
func (r *retrier) failed(msg string, err error, attrs ...any) bool {
	if r.w.answers(r.dep.probe) {
		r.probeFails = false
		r.healthy++
		return true
	}
	r.probeFails = true
	r.outageTry(msg, err, attrs...)
	return false
}

// outageTry records a try that failed for want of the dependency, without
// asking its probe (throttling, or a dependency without one).
func (r *retrier) outageTry(msg string, err error, attrs ...any) {
	attrs = append(attrs, "dependency", r.dep.name, "error", errString(err))
	if r.outage.IsZero() {
		r.outage = time.Now()
		r.w.m.outages.WithLabelValues(r.dep.name).Inc()
		r.log.Warn(msg, append(attrs, "event", "bridge_outage")...)
		return
	}
	r.log.Debug(msg+": still failing", attrs...)
}

// slowTry is how long a try may go unanswered before the dependency's probe
// is asked, while the try still waits: on a link that drops packets without
// a word the try only fails once its connection times out
// (CAUSET_LINK_TIMEOUT) and the next one's connection attempt has, but the
// outage is said (logged and counted) as soon as the probe fails.
var slowTry = 5 * time.Second

// probeEvery is how often a watch probes again while its try waits on a
// dependency that did not answer.
var probeEvery = time.Second

// DefaultDatabaseTryTimeout is Options.DatabaseTryTimeout's default: the
// sessions' default statement_timeout (60s) and a margin.
const DefaultDatabaseTryTimeout = 65 * time.Second

// errSilentConnection ends a try that still waits once its dependency,
// silent before, answers new connections again: the try's own connection
// crosses a peer that accepts and never answers (a hung pooler or proxy, a
// load balancer that lost the flow), which no TCP timeout ever ends.
var errSilentConnection = errors.New("the database answers new connections again while this try still waits on its own: " +
	"its connection is silent for good, and the try runs again on a new one")

// errTryTimedOut ends a try that outlived Options.DatabaseTryTimeout.
var errTryTimedOut = errors.New("no answer within the database try timeout")

// watch is the probe of one slow try, and the try's context.
type watch struct {
	timer    *time.Timer
	ctx      context.Context
	cancel   context.CancelCauseFunc
	release  context.CancelFunc
	stopped  chan struct{}
	done     chan struct{}
	declared time.Time // when the probe failed and the outage was said; zero if not
	// probeFailed: the probe failed while the try waited.
	probeFailed bool
}

// watch starts watching a try and returns the context it runs with, which
// ends past timeout. Once the try has waited slowTry, the probe runs: if it
// fails the outage begins (msg logged as bridge_outage, counted; during an
// outage it is not said again), and the probe is asked again every
// probeEvery until it answers, which ends the try (errSilentConnection).
// A probe that answers at once leaves a slow try alone. Call stop when the
// try returns.
func (r *retrier) watch(timeout time.Duration, msg string, attrs ...any) *watch {
	ctx, cancel := context.WithCancelCause(r.w.ctx)
	ctx, release := context.WithTimeoutCause(ctx, timeout, errTryTimedOut)
	w := &watch{ctx: ctx, cancel: cancel, release: release}
	if r.dep.probe == nil {
		return w
	}
	inOutage, said := r.probeFails, !r.outage.IsZero()
	w.stopped, w.done = make(chan struct{}), make(chan struct{})
	w.timer = time.AfterFunc(slowTry, func() {
		defer close(w.done)
		silent := inOutage
		for {
			answers := r.w.answers(r.dep.probe)
			switch {
			case answers && silent:
				w.cancel(errSilentConnection)
				r.log.Info("a try waits on a silent connection while the "+r.dep.name+" answers new ones: retrying it on a new one",
					append(attrs, "dependency", r.dep.name)...)
				return
			case answers:
				return // slow, but the dependency answers: its timeout bounds it
			case !silent:
				silent, w.probeFailed = true, true
				if said {
					break // the outage this try is part of was said already
				}
				w.declared = time.Now()
				r.w.m.outages.WithLabelValues(r.dep.name).Inc()
				r.log.Warn(msg, append(attrs, "dependency", r.dep.name,
					"error", "no answer within "+slowTry.String()+" and the probe fails", "event", "bridge_outage")...)
			}
			select {
			case <-w.stopped:
				return
			case <-time.After(probeEvery):
			}
		}
	})
	return w
}

// stop ends the watch once its try returned, waiting for a probe under way;
// an outage the probe proved is the retrier's from then on. It returns why
// the watch ended the try (errSilentConnection, errTryTimedOut), nil when
// it did not.
func (w *watch) stop(r *retrier) error {
	if w.timer != nil && !w.timer.Stop() {
		close(w.stopped)
		<-w.done
		if w.probeFailed {
			r.probeFails = true
		}
		if !w.declared.IsZero() && r.outage.IsZero() {
			r.outage = w.declared
		}
	}
	cause := context.Cause(w.ctx)
	if cause == errSilentConnection {
		r.probeFails = false
	}
	w.release()
	w.cancel(nil)
	if r.w.ctx.Err() != nil || (cause != errSilentConnection && cause != errTryTimedOut) {
		return nil
	}
	return cause
}

// wait sleeps the next backoff; false when the partition stopped first.
func (r *retrier) wait() bool {
	defer r.w.beat()
	return r.bo.Wait(r.w.ctx) == nil
}

// pausedFor is how long the outage has lasted, for its closing log line.
func (r *retrier) pausedFor() string { return time.Since(r.outage).Round(time.Millisecond).String() }

// until runs try until it succeeds, logging each failure (WARN first, DEBUG
// after) and waiting with backoff between tries. False when the partition
// stopped first. A database try is watched as a batch is: bounded by
// Options.DatabaseTryTimeout, and ended when it waits on a silent
// connection.
func (w *waits) until(log *slog.Logger, dep string, what string, try func(ctx context.Context) error) bool {
	bo := backoff.Backoff{Min: w.opts.MinBackoff, Max: w.opts.MaxBackoff}
	var r *retrier
	if dep == "database" {
		r = w.retrier(log, w.database())
	}
	for n := 0; ; n++ {
		var err error
		if r != nil {
			wt := r.watch(w.opts.DatabaseTryTimeout, what)
			err = try(wt.ctx)
			if hung := wt.stop(r); hung != nil {
				err = hung
			}
		} else {
			err = try(w.ctx)
		}
		w.beat()
		if err == nil {
			return true
		}
		if w.ctx.Err() != nil {
			return false
		}
		level := slog.LevelWarn
		if n > 0 {
			level = slog.LevelDebug
		}
		log.Log(w.ctx, level, what+", retrying with backoff", "dependency", dep, "error", err.Error())
		if bo.Wait(w.ctx) != nil {
			return false
		}
		w.beat()
	}
}

// answers runs a dependency's probe (Options.Probe, TemporalProbe): the
// proof of an outage. Without a probe every failure counts as one.
func (w *waits) answers(probe func(context.Context) error) bool {
	if probe == nil {
		return false
	}
	timeout := w.opts.ProbeTimeout
	if timeout == 0 {
		timeout = defaultProbeTimeout
	}
	ctx, cancel := context.WithTimeout(w.ctx, timeout)
	defer cancel()
	return probe(ctx) == nil
}

// refuses classifies a failed start of an event's workflow once: true when
// it must be dead-lettered — Temporal refused the request itself, or it
// failed maxHealthyStartFailures times while Temporal answered its probe.
// Throttling, a request that timed out, and failures Temporal's probe does
// not answer, are an outage: the same request is retried.
func (r *retrier) refuses(msg string, err error) bool {
	switch {
	case isRefusal(err):
		return true
	case isThrottled(err) || isTimeout(err):
		r.outageTry(msg, err)
	case r.failed(msg, err):
		r.log.Debug("request failed while Temporal answers", "try", r.healthy, "error", err.Error())
		return r.healthy >= maxHealthyStartFailures
	}
	return false
}

// defaultProbeTimeout is Options.ProbeTimeout's default: a healthy
// PostgreSQL or Temporal answers a probe in milliseconds.
const defaultProbeTimeout = 5 * time.Second

// maxHealthyStartFailures bounds the failed starts of one event while
// Temporal answers its probe: past it the event, not Temporal, is at fault.
const maxHealthyStartFailures = 5

// isRefusal reports a start Temporal refused because of the request itself:
// retrying the same request can never succeed.
func isRefusal(err error) bool {
	var ia *serviceerror.InvalidArgument
	return errors.As(err, &ia)
}

// isTimeout reports a request that ran out of time: the server did not
// answer in time.
func isTimeout(err error) bool {
	var de *serviceerror.DeadlineExceeded
	var ce *serviceerror.Canceled
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &de) || errors.As(err, &ce)
}

// isThrottled reports a start refused for capacity (rate limits): Temporal
// answers but is saturated, an outage of capacity.
func isThrottled(err error) bool {
	var re *serviceerror.ResourceExhausted
	return errors.As(err, &re)
}
