package starter

import (
	"context"
	"log/slog"
	"time"

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

func (p *partition) database() dependency { return dependency{"database", p.b.opts.Probe} }
func (p *partition) temporal() dependency { return dependency{"temporal", p.b.opts.TemporalProbe} }

// retrier is one retry-until-done loop of a partition.
type retrier struct {
	p       *partition
	dep     dependency
	log     *slog.Logger
	bo      backoff.Backoff
	outage  time.Time // when the outage began; zero while there is none
	healthy int       // failed tries while the dependency answered its probe
}

func (p *partition) retrier(log *slog.Logger, dep dependency) *retrier {
	return &retrier{p: p, dep: dep, log: log, bo: backoff.Backoff{Min: p.b.opts.MinBackoff, Max: p.b.opts.MaxBackoff}}
}

// failed classifies a failed try. It returns true when the dependency
// answers its probe: the try, not the dependency, failed (r.healthy counts
// them). Otherwise it is an outage: msg is logged at WARN as bridge_outage
// when the outage begins (counted once), at DEBUG after.
func (r *retrier) failed(msg string, err error, attrs ...any) bool {
	if r.p.answers(r.dep.probe) {
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
		r.p.b.m.outages.WithLabelValues(r.dep.name).Inc()
		r.log.Warn(msg, append(attrs, "event", "bridge_outage")...)
		return
	}
	r.log.Debug(msg+": still failing", attrs...)
}

// wait sleeps the next backoff; false when the partition stopped first.
func (r *retrier) wait() bool { return r.bo.Wait(r.p.ctx) == nil }

// pausedFor is how long the outage has lasted, for its closing log line.
func (r *retrier) pausedFor() string { return time.Since(r.outage).Round(time.Millisecond).String() }

// until runs try until it succeeds, logging each failure (WARN first, DEBUG
// after) and waiting with backoff between tries. False when the partition
// stopped first.
func (p *partition) until(log *slog.Logger, dep string, what string, try func(ctx context.Context) error) bool {
	bo := backoff.Backoff{Min: p.b.opts.MinBackoff, Max: p.b.opts.MaxBackoff}
	for n := 0; ; n++ {
		err := try(p.ctx)
		if err == nil {
			return true
		}
		if p.ctx.Err() != nil {
			return false
		}
		level := slog.LevelWarn
		if n > 0 {
			level = slog.LevelDebug
		}
		log.Log(p.ctx, level, what+", retrying with backoff", "dependency", dep, "error", err.Error())
		if bo.Wait(p.ctx) != nil {
			return false
		}
	}
}

// answers runs a dependency's probe (Options.Probe, TemporalProbe): the
// proof of an outage. Without a probe every failure counts as one.
func (p *partition) answers(probe func(context.Context) error) bool {
	if probe == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(p.ctx, p.b.opts.StartTimeout)
	defer cancel()
	return probe(ctx) == nil
}
