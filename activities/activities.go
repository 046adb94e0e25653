package activities

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/dlq"
	"github.com/causet/projection-retry/event"
	"github.com/causet/projection-retry/incident"
	"github.com/causet/projection-retry/parking"
	"github.com/causet/projection-retry/projection"
)

// Applier applies one event to one projection with the dedupe ledger, in a
// transaction whose BeforeCommit the activity uses; *projection.Engine is
// the production implementation.
type Applier interface {
	ApplyWith(ctx context.Context, projectionName string, ev event.Envelope, opts projection.ApplyOptions) (projection.Result, error)
}

// DeadLetterPublisher writes a DLQ record durably; *dlq.Publisher is the
// production implementation.
type DeadLetterPublisher interface {
	Publish(ctx context.Context, key []byte, r dlq.Record) (contract.DLQCoordinates, error)
}

// deadLetterFinder finds a run's dead letter already on the topic;
// *dlq.Publisher is one.
type deadLetterFinder interface {
	Find(ctx context.Context, since time.Time, workflowID, runID string, replayCount int) (contract.DLQCoordinates, bool, error)
}

// Activities holds what the activities share. Register it with the worker.
type Activities struct {
	// Applier applies projections. Required.
	Applier Applier
	// Publisher writes dead letters. Required.
	Publisher DeadLetterPublisher
	// Logger receives projection_retry, projection_dead_lettered and
	// projection_replayed lines. Optional, defaults to slog.Default().
	Logger *slog.Logger
	// Metrics counts retries, dead letters (as decided and as published)
	// and replays. Optional.
	Metrics *Metrics
	// Heads records where a retry workflow stands, as the head its key's
	// later events are parked behind (entity ordering, package parking):
	// settled in the apply transaction of its successful attempt, dead
	// lettered once its dead letter is published, settled when discarded
	// or its window ends. Optional: without it nothing is recorded.
	Heads *parking.Store
	// Holds finds the holding incident a run's last failure belongs to
	// (CAUSET_INCIDENT_POLICY=hold): such a run joins the hold instead of
	// being dead-lettered. Optional: without it no run joins a hold.
	Holds *incident.Store
	// GuardEveryRun applies the sequence guard to every attempt of every
	// run (CAUSET_ORDERING=entity); without it, to replays only. A forced
	// replay is never guarded.
	GuardEveryRun bool
	// ProbeDatabase answers whether the database answers a new connection
	// (app.ProbePostgres). Optional: without it a connection failure counts
	// as an attempt.
	ProbeDatabase func(context.Context) error
	// DeadLetterFence is how long a PublishDeadLetter attempt's claim on
	// its dead letter lasts: from before its record is handed to the
	// producer until no request of it can reach the broker any more (the
	// producer's dlq.WriteWindow, the connection deadlines and the TCP user
	// timeout). Another attempt writes only after it. Optional, defaults to
	// DefaultDeadLetterFence.
	DeadLetterFence time.Duration
	// DeadLetterSettle is how long an attempt's claim lasts once its
	// produce has failed: the producer will not send the record again, so
	// only a request already written can still reach the broker (its write
	// deadline and the TCP user timeout). Optional, defaults to
	// DefaultDeadLetterSettle.
	DeadLetterSettle time.Duration
}

// databaseProbeTimeout bounds one probe of the database.
const databaseProbeTimeout = 5 * time.Second

// outageMargin is how long before its timeout an attempt's database work
// is ended: a database that stops answering on an open connection (a hung
// pooler or proxy, which no TCP timeout sees) would otherwise hold the
// attempt until the server times it out, which counts it. The margin
// leaves time to probe and, when the database does not answer a new
// connection either, to report an outage.
const outageMargin = databaseProbeTimeout + 5*time.Second

// tryContext is ctx for an attempt's database work: it ends outageMargin
// before ctx does.
func tryContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) > 2*outageMargin {
		return context.WithDeadline(ctx, dl.Add(-outageMargin))
	}
	return context.WithCancel(ctx)
}

// databaseDown probes the database after an attempt could not reach it;
// the probe's error when it does not answer either.
func (a *Activities) databaseDown(ctx context.Context) error {
	if a.ProbeDatabase == nil {
		return nil
	}
	pctx, cancel := context.WithTimeout(ctx, databaseProbeTimeout)
	defer cancel()
	return a.ProbeDatabase(pctx)
}

// DatabaseAnswers returns once the database answers a probe, and fails
// with contract.DatabaseOutageType while it does not: the server retries it
// on its backoff, so a run waiting through an outage holds no worker slot.
func (a *Activities) DatabaseAnswers(ctx context.Context) error {
	if err := a.databaseDown(ctx); err != nil {
		return temporal.NewApplicationError("the database does not answer: "+err.Error(), contract.DatabaseOutageType)
	}
	return nil
}

func (a *Activities) logger() *slog.Logger {
	if a.Logger == nil {
		return slog.Default()
	}
	return a.Logger
}

// ApplyProjection makes one attempt at applying the event. It records every
// attempt so far, this one included, as heartbeat details when it starts and
// again when it fails; the next attempt reads them back. On failure it returns
// them all as the error's details, so the workflow (and the UI) sees each
// attempt's time and error, not only the last; an attempt that times out
// returns nothing, and its timeout carries the details instead.
func (a *Activities) ApplyProjection(ctx context.Context, in contract.ApplyInput) (contract.ApplyOutput, error) {
	info := activity.GetInfo(ctx)
	number := in.FirstAttempt + int(info.Attempt) - 1
	started := info.StartedTime
	if started.IsZero() {
		started = time.Now()
	}
	var earlier []contract.Attempt
	if activity.HasHeartbeatDetails(ctx) {
		// A decode failure only loses history of earlier attempts, never the event.
		_ = activity.GetHeartbeatDetails(ctx, &earlier)
	}
	// An earlier attempt still marked as started never reported: it timed out.
	earlier = contract.SettleUnreported(earlier)
	// An attempt between them that left no record never started on a
	// worker: it is shown lost rather than missing.
	earlier = contract.RecordLost(earlier, in.FirstAttempt, number, in.Run)
	// Record this attempt before it runs: if it overruns its timeout, the
	// timeout carries these details, and the workflow and the next attempt
	// still see it with its number and start time.
	running := append(slices.Clip(earlier), contract.Attempt{Number: number, Run: in.Run, StartedAt: started})
	activity.RecordHeartbeat(ctx, running)

	var res projection.Result
	err := in.Event.Validate()
	if err == nil {
		tryCtx, cancel := tryContext(ctx)
		stopBeating := heartbeatWhile(ctx, running)
		res, err = a.Applier.ApplyWith(tryCtx, in.Projection, in.Event, projection.ApplyOptions{
			BeforeCommit: a.beforeCommit(info.WorkflowExecution.ID, in),
			Guard:        a.guarded(in),
		})
		stopBeating()
		cancel()
		if err == nil && res.Err != nil {
			err = res.Err
		}
		if errors.Is(err, parking.ErrHeadEnded) {
			err = &event.InvalidError{Reason: parking.ErrHeadEnded.Error()}
		}
		var refused *projection.SequenceRefused
		if errors.As(err, &refused) {
			a.logLine(ctx, "projection_replay_refused", in, number, slog.Int64("sequence", in.Event.Sequence),
				slog.String("laterEventId", refused.Later.EventID), slog.Int64("laterSequence", refused.Later.Sequence))
		}
	}
	if err == nil {
		if in.Run > 0 {
			a.logLine(ctx, "projection_replayed", in, number, slog.Int("replayCount", in.Run), slog.Int("irVersion", res.IRVersion))
			a.Metrics.replayed(in.Projection)
		}
		return contract.ApplyOutput{
			IRVersion: res.IRVersion,
			Duplicate: res.Status == projection.StatusDuplicate,
			Attempts:  earlier,
			Attempt:   number,
			StartedAt: started,
		}, nil
	}

	kind := classify(err)
	if kind == contract.KindConnection {
		if down := a.databaseDown(ctx); down != nil {
			// An outage, not this event's failure: the attempt counts as
			// none, and the run tries it again once the database answers.
			a.logger().Warn("the database does not answer: the attempt waits for it and counts as none",
				"event", "projection_database_outage", "projectionName", in.Projection, "eventId", in.Event.EventID,
				"retryAttempt", number, "error", err.Error(), "probe", down.Error())
			return contract.ApplyOutput{}, temporal.NewNonRetryableApplicationError(
				fmt.Sprintf("the database does not answer (%v): attempt %d waits for it", down, number), contract.DatabaseOutageType, nil, earlier)
		}
	}
	attempts := append(earlier, contract.Attempt{
		Number: number, Run: in.Run, StartedAt: started,
		ErrorKind: string(kind), Error: err.Error(), IRVersion: res.IRVersion,
		WaitingBehind: a.behind(ctx, info.WorkflowExecution.ID),
	})
	nonRetryable := kind == contract.KindInvalidEvent
	if delay, ok := nextDelay(in, number); ok && !nonRetryable {
		a.logLine(ctx, "projection_retry", in, number, slog.String("error", err.Error()), slog.String("nextRetryIn", delay.String()))
		a.Metrics.retried(in.Projection, string(kind))
	} else {
		a.logLine(ctx, "projection_dead_lettered", in, number, slog.String("error", err.Error()), slog.String("errorKind", string(kind)))
		a.Metrics.deadLettered(in.Projection, string(kind))
	}
	activity.RecordHeartbeat(ctx, attempts)
	// The message is the error's; its Go chain is not sent as the failure's
	// cause, which would repeat the same text a level deeper per wrapper.
	if nonRetryable {
		return contract.ApplyOutput{}, temporal.NewNonRetryableApplicationError(err.Error(), string(kind), nil, attempts)
	}
	return contract.ApplyOutput{}, temporal.NewApplicationError(err.Error(), string(kind), attempts)
}

// heartbeatWhile heartbeats details every third of the attempt's heartbeat
// timeout until the returned stop is called: an attempt alive on its worker
// is not taken for one lost on its way there.
func heartbeatWhile(ctx context.Context, details []contract.Attempt) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(contract.ApplyHeartbeatTimeout / 3)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				activity.RecordHeartbeat(ctx, details)
			}
		}
	}()
	return func() {
		close(done)
		<-finished
	}
}

func nextDelay(in contract.ApplyInput, number int) (time.Duration, bool) {
	if number < 1 || number >= in.MaxAttempts || number > len(in.Delays) {
		return 0, false
	}
	return in.Delays[number-1], true
}

func classify(err error) contract.ErrorKind {
	if event.IsInvalid(err) {
		return contract.KindInvalidEvent
	}
	var ae *projection.ApplyError
	if errors.As(err, &ae) {
		return ae.Kind
	}
	return projection.Classify(err)
}

// logLine writes one of the seed's structured lines; field names are the contract.
func (a *Activities) logLine(ctx context.Context, name string, in contract.ApplyInput, attempt int, extra ...slog.Attr) {
	attrs := []slog.Attr{
		slog.String("event", name),
		slog.String("projectionName", in.Projection),
		slog.String("eventType", in.Event.EventType),
		slog.String("entityId", in.Event.EntityID),
		slog.String("forkId", in.Event.ForkID),
		slog.String("eventId", in.Event.EventID),
		slog.Int("retryAttempt", attempt),
	}
	level := slog.LevelWarn
	if name == "projection_dead_lettered" {
		level = slog.LevelError
	} else if name == "projection_replayed" {
		level = slog.LevelInfo
	}
	a.logger().LogAttrs(ctx, level, name, append(attrs, extra...)...)
}

// PublishDeadLetter writes the DLQ record of CONTRACT §7 and returns where it
// landed. Its retry policy never gives up, so a failure here is retried until
// the topic accepts the record. One attempt at a time writes: each claims
// the dead letter first (DeadLetterFence), and an attempt that finds an
// earlier one's claim, or is itself a retry, looks on the topic before
// writing.
func (a *Activities) PublishDeadLetter(ctx context.Context, in contract.DeadLetterInput) (contract.DLQCoordinates, error) {
	info := activity.GetInfo(ctx)
	workflowID, runID := info.WorkflowExecution.ID, info.WorkflowExecution.RunID
	key := in.Key
	if len(key) == 0 {
		key = []byte(in.Event.EntityID)
	}
	started := time.Now()
	if a.Heads != nil {
		if info.Attempt > 1 {
			// A retry: an earlier attempt may have written the record and lost
			// only its completion (Temporal unreachable). Its record stands.
			at, done, err := a.Heads.PublishedDeadLetter(ctx, workflowID, runID, in.ReplayCount)
			if err != nil {
				return at, err
			}
			if done {
				return at, a.settleDeadLettered(ctx, workflowID)
			}
		}
		claim, err := a.claimDeadLetter(ctx, workflowID, runID, in.ReplayCount, int(info.Attempt))
		if err != nil {
			return contract.DLQCoordinates{}, err
		}
		started = claim.started
		if info.Attempt > 1 || claim.Earlier {
			// Not remembered: an earlier attempt may have written the record
			// and died (or lost the database) before remembering it. Its
			// window has passed, so the topic says, from when the activity
			// was first scheduled.
			if f, ok := a.Publisher.(deadLetterFinder); ok {
				at, done, err := f.Find(ctx, info.ScheduledTime, workflowID, runID, in.ReplayCount)
				if err != nil {
					return at, err
				}
				if done {
					if err := a.Heads.RecordDeadLetter(ctx, workflowID, runID, in.ReplayCount, at); err != nil {
						return contract.DLQCoordinates{}, err
					}
					return at, a.settleDeadLettered(ctx, workflowID)
				}
				// The look took part of the window: take a whole one again.
				if started, err = a.renewDeadLetterClaim(ctx, workflowID, runID, in.ReplayCount, int(info.Attempt)); err != nil {
					return contract.DLQCoordinates{}, err
				}
			}
		}
	}
	// The record's time is when its window began: the producer fails it
	// rather than write it once dlq.WriteWindow has passed.
	rec := dlq.RunRecord(in, started)
	rec.Workflow = &dlq.WorkflowRef{Namespace: info.Namespace, ID: workflowID, RunID: runID}
	at, err := a.Publisher.Publish(ctx, key, rec)
	if err != nil {
		a.logger().LogAttrs(ctx, slog.LevelWarn, "dead letter publish failed; will retry",
			slog.String("projectionName", in.Projection), slog.String("eventId", in.Event.EventID), slog.Any("err", err))
		a.settleClaimAfterFailure(ctx, workflowID, runID, in.ReplayCount, int(info.Attempt))
		return at, err
	}
	a.Metrics.publishedDeadLetter(in.Projection, rec.ErrorKind)
	if a.Heads != nil {
		if err := a.Heads.RecordDeadLetter(ctx, workflowID, runID, in.ReplayCount, at); err != nil {
			// Retried: the retry finds the record on the topic (Find).
			return contract.DLQCoordinates{}, err
		}
	}
	return at, a.settleDeadLettered(ctx, workflowID)
}

// DefaultDeadLetterFence is Activities.DeadLetterFence when unset: the
// producer's write window (dlq.WriteWindow) plus the connect, handshake and
// write deadlines and the TCP user timeout of a default link, with room.
const DefaultDeadLetterFence = 85 * time.Second

// DefaultDeadLetterSettle is Activities.DeadLetterSettle when unset: a
// request's write deadline and the TCP user timeout of a default link,
// with room.
const DefaultDeadLetterSettle = 30 * time.Second

// DeadLetterClaimedType is the error type of an attempt that found an
// earlier attempt's claim on its dead letter: it is retried once that
// claim's window has passed.
const DeadLetterClaimedType = "DeadLetterClaimed"

type takenClaim struct {
	parking.DeadLetterClaim
	started time.Time
}

func (a *Activities) deadLetterFence() time.Duration {
	if a.DeadLetterFence > 0 {
		return a.DeadLetterFence
	}
	return DefaultDeadLetterFence
}

// claimDeadLetter takes the claim on a dead letter for this attempt. An
// earlier attempt's claim that ends well before this attempt does is waited
// out here; otherwise the attempt fails, to be retried when it ends.
func (a *Activities) claimDeadLetter(ctx context.Context, workflowID, runID string, replayCount, attempt int) (takenClaim, error) {
	for {
		started := time.Now()
		c, err := a.Heads.ClaimDeadLetter(ctx, workflowID, runID, replayCount, attempt, a.deadLetterFence())
		if err != nil {
			return takenClaim{}, err
		}
		if c.Taken {
			return takenClaim{DeadLetterClaim: c, started: started}, nil
		}
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < c.Wait+dlq.WriteWindow+5*time.Second {
			return takenClaim{}, temporal.NewApplicationErrorWithOptions(
				fmt.Sprintf("attempt %d of this dead letter may still be writing it for %s; retried after", c.Holder, c.Wait.Round(time.Second)),
				DeadLetterClaimedType, temporal.ApplicationErrorOptions{NextRetryDelay: c.Wait + time.Second})
		}
		t := time.NewTimer(c.Wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return takenClaim{}, ctx.Err()
		case <-t.C:
		}
	}
}

// settleClaimAfterFailure shortens this attempt's claim once its produce
// has failed: the producer will not send the record again, so only a
// request already on its way can still land (DeadLetterSettle). Without
// it the next attempt waits out the whole fence.
func (a *Activities) settleClaimAfterFailure(ctx context.Context, workflowID, runID string, replayCount, attempt int) {
	if a.Heads == nil {
		return
	}
	settle := a.DeadLetterSettle
	if settle <= 0 {
		settle = DefaultDeadLetterSettle
	}
	// The attempt's own context may have ended (its timeout): the claim is
	// shortened anyway, within a bound of its own.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), databaseProbeTimeout)
	defer cancel()
	if err := a.Heads.ShortenDeadLetterClaim(sctx, workflowID, runID, replayCount, attempt, settle); err != nil {
		a.logger().LogAttrs(ctx, slog.LevelWarn, "could not shorten the claim on a dead letter; the next attempt waits out the whole fence",
			slog.String("workflowId", workflowID), slog.Any("err", err))
	}
}

// renewDeadLetterClaim takes a whole window again on a claim this attempt
// holds, and returns when it began; an error when the claim was lost.
func (a *Activities) renewDeadLetterClaim(ctx context.Context, workflowID, runID string, replayCount, attempt int) (time.Time, error) {
	started := time.Now()
	held, err := a.Heads.RenewDeadLetterClaim(ctx, workflowID, runID, replayCount, attempt, a.deadLetterFence())
	if err != nil {
		return started, err
	}
	if !held {
		return started, fmt.Errorf("the claim on the dead letter of %s ended while its topic was read; retried", workflowID)
	}
	return started, nil
}

// settleDeadLettered records, once its dead letter is written, that the run
// no longer holds its key unless dead letters hold their entity.
func (a *Activities) settleDeadLettered(ctx context.Context, workflowID string) error {
	if a.Heads == nil {
		return nil
	}
	// After the record: the key's later events go on (unless dead letters
	// hold their entity) only once the event has its dead letter. A
	// failure here retries the activity, which finds its record.
	_, err := parking.SetHeadState(ctx, a.Heads.Pool(), workflowID, parking.HeadDeadLettered)
	return err
}

// guarded reports whether an attempt takes the sequence guard: every
// attempt of a replay (a signalled run, or one a bulk replay restarted),
// and under entity ordering every attempt, unless the replay is forced.
func (a *Activities) guarded(in contract.ApplyInput) bool {
	return !in.Force && (a.GuardEveryRun || in.Run > 0 || in.Restarted)
}

// beforeCommit is what the attempt's apply transaction does besides the
// write, once it knows the pair's status: an attempt of a run the bridge
// found ended without an outcome (and whose event it dead-lettered) is
// refused, unless a bulk replay started the run anew; a pair that applied (or was applied before)
// settles the run as its key's head, so the bridge releases the events
// parked behind it.
func (a *Activities) beforeCommit(workflowID string, in contract.ApplyInput) func(context.Context, pgx.Tx, []projection.Result) error {
	return func(ctx context.Context, tx pgx.Tx, rs []projection.Result) error {
		if tx == nil || len(rs) == 0 || a.Heads == nil {
			return nil
		}
		if r := rs[0]; r.Status != projection.StatusApplied && r.Status != projection.StatusDuplicate {
			return nil
		}
		if !in.Restarted {
			if err := parking.RefuseEnded(ctx, tx, workflowID); err != nil {
				return err
			}
		}
		_, err := parking.SetHeadState(ctx, tx, workflowID, parking.HeadSettled)
		return err
	}
}

// behind counts the events parked behind workflowID, for the attempt's
// record; 0 when unknown.
func (a *Activities) behind(ctx context.Context, workflowID string) int64 {
	if a.Heads == nil {
		return 0
	}
	n, err := a.Heads.Behind(ctx, workflowID)
	if err != nil {
		return 0
	}
	return n
}

// JoinIncidentHold returns the holding incident the run's last failure
// belongs to, "" when none holds it.
func (a *Activities) JoinIncidentHold(ctx context.Context, in contract.JoinHoldInput) (string, error) {
	if a.Holds == nil {
		return "", nil
	}
	return a.Holds.HoldingFor(ctx, in.Projection, in.ErrorKind, in.Error)
}

// IncidentHoldEnded returns where incident id went once it no longer
// holds: releasing or resolved (its events apply now), dead_lettering or
// dead_lettered. While it holds, it fails with IncidentStillHoldsType, and
// the server retries it on the run's backoff: a held run takes no worker
// slot between asks, however long the hold. An incident without a row
// counts as resolved.
func (a *Activities) IncidentHoldEnded(ctx context.Context, id string) (contract.IncidentState, error) {
	states, err := a.Holds.States(ctx, []string{id})
	if err != nil {
		return "", err
	}
	st, ok := states[id]
	switch {
	case !ok:
		return contract.IncidentResolved, nil
	case st != contract.IncidentHolding:
		return st, nil
	}
	return "", temporal.NewApplicationError("incident "+id+" still holds this run's failure", contract.IncidentStillHoldsType)
}

// AwaitIncidentEnded waits until incident id no longer holds, and returns
// where it went: releasing or resolved (its events apply now), or
// dead_lettered. An incident without a row counts as resolved.
func (a *Activities) AwaitIncidentEnded(ctx context.Context, id string) (contract.IncidentState, error) {
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	for {
		states, err := a.Holds.States(ctx, []string{id})
		if err != nil {
			return "", err
		}
		st, ok := states[id]
		activity.RecordHeartbeat(ctx, string(st))
		switch {
		case !ok:
			return contract.IncidentResolved, nil
		case st != contract.IncidentHolding:
			return st, nil
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-t.C:
		}
	}
}

// SettleHead records that the retry workflow workflowID no longer holds its
// key (discarded, or its replay window ended): under CAUSET_DLQ_HOLD_ENTITY
// a dead letter holds its key until then.
func (a *Activities) SettleHead(ctx context.Context, workflowID string) error {
	if a.Heads == nil {
		return nil
	}
	_, err := parking.SetHeadState(ctx, a.Heads.Pool(), workflowID, parking.HeadSettled)
	return err
}
