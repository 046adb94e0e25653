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
		r.healthy++
		return true
	}
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

// watch is the probe of one slow try.
type watch struct {
	timer    *time.Timer
	done     chan struct{}
	declared time.Time // when the probe failed; zero if it answered
}

// watch starts watching a try: once it has waited slowTry, the probe runs,
// and if it fails the outage begins (msg logged as bridge_outage, counted).
// Call stop when the try returns. Nothing is watched during an outage.
func (r *retrier) watch(msg string, attrs ...any) *watch {
	if !r.outage.IsZero() || r.dep.probe == nil {
		return nil
	}
	w := &watch{done: make(chan struct{})}
	w.timer = time.AfterFunc(slowTry, func() {
		defer close(w.done)
		if r.w.answers(r.dep.probe) {
			return
		}
		w.declared = time.Now()
		r.w.m.outages.WithLabelValues(r.dep.name).Inc()
		r.log.Warn(msg, append(attrs, "dependency", r.dep.name,
			"error", "no answer within "+slowTry.String()+" and the probe fails", "event", "bridge_outage")...)
	})
	return w
}

// stop ends the watch once its try returned, waiting for a probe under way;
// an outage the probe proved is the retrier's from then on.
func (w *watch) stop(r *retrier) {
	if w == nil || w.timer.Stop() {
		return
	}
	<-w.done
	if !w.declared.IsZero() {
		r.outage = w.declared
	}
}

// wait sleeps the next backoff; false when the partition stopped first.
func (r *retrier) wait() bool { return r.bo.Wait(r.w.ctx) == nil }

// pausedFor is how long the outage has lasted, for its closing log line.
func (r *retrier) pausedFor() string { return time.Since(r.outage).Round(time.Millisecond).String() }

// until runs try until it succeeds, logging each failure (WARN first, DEBUG
// after) and waiting with backoff between tries. False when the partition
// stopped first.
func (w *waits) until(log *slog.Logger, dep string, what string, try func(ctx context.Context) error) bool {
	bo := backoff.Backoff{Min: w.opts.MinBackoff, Max: w.opts.MaxBackoff}
	for n := 0; ; n++ {
		err := try(w.ctx)
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
