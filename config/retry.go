package config

import (
	"fmt"
	"time"
)

// Retry is the seed's projection retry policy.
type Retry struct {
	// MaxAttempts counts every attempt, the first included (PROJECTION_WORKER_MAX_RETRIES).
	MaxAttempts int
	// Initial is the delay before attempt 2 (PROJECTION_WORKER_RETRY_INITIAL_MS).
	Initial time.Duration
	// Multiplier grows each later delay (PROJECTION_WORKER_RETRY_MULTIPLIER).
	Multiplier float64
	// Max caps any one delay (PROJECTION_WORKER_RETRY_MAX_MS).
	Max time.Duration
}

// MinRetryDelay is the shortest delay Temporal keeps. Its history service
// reads timer tasks up to history.timerProcessorMaxTimeShift (1s by default)
// ahead of the clock, and a timer created due before that read horizon is
// moved to it (service/history/shard: every queue read raises
// taskMinScheduledTime to now+shift in taskKeyManager, and
// taskKeyGenerator.setTaskKeys pushes earlier timer tasks past it). Both the
// workflow's wait before its first activity attempt (a workflow.Sleep timer)
// and the activity's retries (ActivityRetryTimerTask) are such timers, so a
// delay under 1s runs as anything up to about 1s, depending on the server's
// load; Validate refuses it rather than run a schedule other than the plan.
// Delays of 1s or more are kept to the millisecond: 1500ms runs as 1.5s.
const MinRetryDelay = time.Second

// DefaultRetry is the seed's schedule: 5 attempts, 1s, 2x, at most 30s.
func DefaultRetry() Retry {
	return Retry{MaxAttempts: 5, Initial: time.Second, Multiplier: 2, Max: 30 * time.Second}
}

// Validate reports a policy that cannot be scheduled.
func (r Retry) Validate() error {
	switch {
	case r.MaxAttempts < 1:
		return fmt.Errorf("PROJECTION_WORKER_MAX_RETRIES=%d is invalid: want at least 1", r.MaxAttempts)
	case r.Initial < MinRetryDelay:
		// Max >= Initial and Multiplier >= 1, so every delay of the plan is
		// at least Initial: this one check keeps them all at or above the floor.
		return fmt.Errorf("PROJECTION_WORKER_RETRY_INITIAL_MS=%d is invalid: want at least %d "+
			"(Temporal stretches shorter activity retries and timers to as much as 1s)",
			r.Initial.Milliseconds(), MinRetryDelay.Milliseconds())
	case r.Multiplier < 1:
		return fmt.Errorf("PROJECTION_WORKER_RETRY_MULTIPLIER=%g is invalid: want a number from 1 to 100", r.Multiplier)
	case r.Max < r.Initial:
		return fmt.Errorf("PROJECTION_WORKER_RETRY_MAX_MS=%d is invalid: want at least PROJECTION_WORKER_RETRY_INITIAL_MS (%d)", r.Max.Milliseconds(), r.Initial.Milliseconds())
	}
	return nil
}

// Plan is the whole schedule for one failing event, derived in one place so
// the bridge, the workflow, the logs and the benchmarks agree.
type Plan struct {
	// Offsets[k] is when overall attempt k+1 starts, measured from attempt 1.
	Offsets []time.Duration
	// Delays[k] is the wait between attempt k+1 and attempt k+2.
	Delays []time.Duration
	// FirstWait is how long the workflow waits, after attempt 1 started, before
	// its first activity attempt: Delays[0] in inline mode, 0 in workflow mode.
	FirstWait time.Duration
	// FirstActivityAttempt is the overall number of the activity's first attempt.
	FirstActivityAttempt int
	// Policy is the activity's retry schedule; nil when no attempt is left to
	// the workflow (inline mode with MaxAttempts 1).
	Policy *ActivityRetry
}

// ActivityRetry is the activity's retry schedule in the terms of Temporal's
// retry policy, which the workflow builds from it.
type ActivityRetry struct {
	InitialInterval    time.Duration
	BackoffCoefficient float64
	MaximumInterval    time.Duration
	MaximumAttempts    int32
}

// Plan turns the four PROJECTION_WORKER_* values into the attempt schedule and
// the Temporal activity retry policy for the given mode. Both modes yield the
// same wall-clock schedule: in inline mode attempt 1 already ran in the bridge,
// so the workflow waits Delays[0] and the policy starts at the second delay.
func (r Retry) Plan(mode Mode) Plan {
	p := Plan{Offsets: make([]time.Duration, r.MaxAttempts)}
	delay := r.Initial
	for k := 1; k < r.MaxAttempts; k++ {
		d := min(delay, r.Max)
		p.Delays = append(p.Delays, d)
		p.Offsets[k] = p.Offsets[k-1] + d
		delay = time.Duration(float64(delay) * r.Multiplier)
		if delay > r.Max || delay <= 0 {
			delay = r.Max
		}
	}
	switch {
	case mode == ModeWorkflow:
		p.FirstActivityAttempt = 1
		p.Policy = &ActivityRetry{
			InitialInterval:    r.Initial,
			BackoffCoefficient: r.Multiplier,
			MaximumInterval:    r.Max,
			MaximumAttempts:    int32(r.MaxAttempts),
		}
	case r.MaxAttempts > 1:
		p.FirstWait = p.Delays[0]
		p.FirstActivityAttempt = 2
		second := r.Max
		if len(p.Delays) > 1 {
			second = p.Delays[1]
		}
		p.Policy = &ActivityRetry{
			InitialInterval:    second,
			BackoffCoefficient: r.Multiplier,
			MaximumInterval:    r.Max,
			MaximumAttempts:    int32(r.MaxAttempts - 1),
		}
	}
	return p
}

// From is the plan from overall attempt n on (1 ≤ n ≤ the number of
// attempts): the activity's first attempt is n, at once, and the rest of
// the schedule follows it. An attempt that met an outage counts as none, so
// the run goes on from it. Policy is nil past the last attempt.
func (p Plan) From(n int) Plan {
	q := Plan{Offsets: p.Offsets, Delays: p.Delays, FirstActivityAttempt: n}
	if p.Policy == nil || n < 1 || n > len(p.Offsets) {
		q.FirstActivityAttempt = min(max(n, 1), len(p.Offsets))
		return q
	}
	interval := p.Policy.MaximumInterval
	if n <= len(p.Delays) {
		interval = p.Delays[n-1]
	}
	q.Policy = &ActivityRetry{InitialInterval: interval, BackoffCoefficient: p.Policy.BackoffCoefficient,
		MaximumInterval: p.Policy.MaximumInterval, MaximumAttempts: int32(len(p.Offsets) - n + 1)}
	return q
}

// NextDelay is the wait after overall attempt n fails, and false when n was the last.
func (p Plan) NextDelay(attempt int) (time.Duration, bool) {
	if attempt < 1 || attempt > len(p.Delays) {
		return 0, false
	}
	return p.Delays[attempt-1], true
}
