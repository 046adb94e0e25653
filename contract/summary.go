package contract

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/causet/projection-retry/config"
)

// What the Temporal UI shows of a run beside its history (user metadata):
// a one-line summary in the workflow list, static details on its page, and
// current details the workflow keeps up to date. None of it is written per
// attempt: the summary and static details travel with the start request,
// and current details are answered from the workflow's memory.

// SummaryErrorRunes bounds the error in a summary and in the CausetError
// search attribute: a list shows one line.
const SummaryErrorRunes = 80

// Short is s on one line, cut to at most n runes with an ellipsis.
func Short(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// Summary is the run's line in the Temporal UI's workflow list: what failed
// and, when the bridge's attempt 1 failed before the hand-off, why.
func (in RetryInput) Summary() string {
	what := fmt.Sprintf("%s · %s · %s", in.Projection, in.Event.EventType, in.Event.EntityID)
	switch {
	case in.Replay != nil:
		return what + " · replay"
	case in.FirstAttempt != nil && in.FirstAttempt.Error != "":
		return what + " · " + Short(in.FirstAttempt.Error, SummaryErrorRunes)
	}
	return what
}

// Details are the run's static details on its Temporal UI page (Markdown):
// the event, where it came from, the schedule in the project's attempt
// numbers and how Temporal's activity attempts map to them, and where to
// look next.
func (in RetryInput) Details() string {
	var b strings.Builder
	printf(&b, "**%s** failed to apply event `%s` (%s, entity `%s`, fork `%s`), from %s partition %d offset %d.\n\n",
		in.Projection, in.Event.EventID, in.Event.EventType, in.Event.EntityID, in.Event.ForkID,
		in.Source.Topic, in.Source.Partition, in.Source.Offset)
	plan := in.Retry.Plan(in.Mode)
	b.WriteString(ScheduleLine(plan))
	b.WriteString("\n\n")
	if in.FirstAttempt != nil {
		printf(&b, "Attempt 1 (the bridge's) failed at %s: %s\n\n", in.FirstAttempt.StartedAt.UTC().Format(time.RFC3339), Short(in.FirstAttempt.Error, 400))
	}
	printf(&b, "Every attempt with its time and error: Queries → `%s`. Dead-lettered runs wait %s for a `%s` or `%s` signal.",
		QueryStatus, in.ReplayWindow, SignalReplay, SignalDiscard)
	return b.String()
}

// ScheduleLine says a plan's attempts in the project's numbers and how the
// ApplyProjection activity's attempts (Temporal's numbers) map to them.
func ScheduleLine(plan config.Plan) string {
	n := len(plan.Offsets)
	offs := make([]string, n)
	for i, o := range plan.Offsets {
		offs[i] = "+" + o.String()
	}
	line := fmt.Sprintf("Schedule: %d attempts at %s.", n, strings.Join(offs, ", "))
	if plan.Policy == nil {
		return line
	}
	first := plan.FirstActivityAttempt
	if first == n {
		return line + fmt.Sprintf(" Attempt %d runs as the ApplyProjection activity.", first)
	}
	if first == 1 {
		return line + fmt.Sprintf(" Attempts 1–%d run as one ApplyProjection activity, whose attempt numbers are these.", n)
	}
	return line + fmt.Sprintf(" Attempts %d–%d run as one ApplyProjection activity: its attempt k in the UI is attempt k+%d here.",
		first, n, first-1)
}

// AttemptTimerSummary names the wait before an attempt in the project's
// numbers.
func AttemptTimerSummary(attempt, of int) string {
	return fmt.Sprintf("backoff before attempt %d of %d", attempt, of)
}

// ApplySummary names the ApplyProjection activity of a schedule in the
// project's numbers.
func ApplySummary(plan config.Plan, run int) string {
	n, first := len(plan.Offsets), plan.FirstActivityAttempt
	s := fmt.Sprintf("attempts %d–%d of %d (activity attempt k = attempt k+%d)", first, n, n, first-1)
	switch {
	case first == 1:
		s = fmt.Sprintf("attempts 1–%d of %d", n, n)
	case first == n:
		s = fmt.Sprintf("attempt %d of %d", first, n)
	}
	if run > 0 {
		s = fmt.Sprintf("replay %d: %s", run, s)
	}
	return s
}

// ReplayCommand is the temporal CLI command that replays a dead-lettered
// run (CONTRACT §6).
func ReplayCommand(workflowID string) string {
	return fmt.Sprintf("temporal workflow signal --workflow-id '%s' --name %s --input '{\"reason\":\"fixed\"}'", workflowID, SignalReplay)
}

// CurrentDetails are the run's current details on its Temporal UI page
// (Markdown): where it stands now, in the project's attempt numbers.
func (s Status) CurrentDetails(workflowID string, maxAttempts int) string {
	last := func() (Attempt, bool) {
		if len(s.Attempts) == 0 {
			return Attempt{}, false
		}
		return s.Attempts[len(s.Attempts)-1], true
	}
	a, ok := last()
	switch s.State {
	case StateSucceeded:
		if ok {
			return fmt.Sprintf("**Succeeded** on attempt %d of %d.", a.Number, maxAttempts)
		}
		return "**Succeeded.**"
	case StateDeadLettered:
		var b strings.Builder
		b.WriteString("**Dead-lettered**")
		if ok {
			printf(&b, " after attempt %d of %d: %s", a.Number, maxAttempts, Short(a.Error, 400))
		}
		b.WriteString("\n\n")
		if s.DLQ != nil {
			printf(&b, "DLQ record: %s partition %d offset %d.\n\n", s.DLQ.Topic, s.DLQ.Partition, s.DLQ.Offset)
		}
		printf(&b, "Replay it once the projection is fixed:\n\n```\n%s\n```", ReplayCommand(workflowID))
		return b.String()
	case StateDiscarded:
		return "**Discarded** by an operator."
	case StateHeld:
		if ok {
			return fmt.Sprintf("**Held** by an incident after attempt %d of %d: %s", a.Number, maxAttempts, Short(a.Error, 400))
		}
		return "**Held** by an incident."
	}
	var b strings.Builder
	if s.State == StateReplaying {
		printf(&b, "**Replaying** (replay %d).", s.ReplayCount)
	} else {
		b.WriteString("**Retrying.**")
	}
	if ok && a.Error != "" {
		printf(&b, " Attempt %d of %d failed: %s", a.Number, maxAttempts, Short(a.Error, 400))
	}
	if n := len(s.Schedule); n > 0 {
		times := make([]string, n)
		for i, t := range s.Schedule {
			times[i] = t.UTC().Format("15:04:05")
		}
		first := maxAttempts - n + 1
		span := fmt.Sprintf("Attempts %d–%d", first, maxAttempts)
		if n == 1 {
			span = fmt.Sprintf("Attempt %d", first)
		}
		mapping := fmt.Sprintf("its attempt k is attempt k+%d here", first-1)
		if first == 1 {
			mapping = "its attempt numbers are these"
		}
		printf(&b, "\n\n%s at %s UTC, as the ApplyProjection activity (%s). Queries → `%s` shows each attempt's outcome as it happens.",
			span, strings.Join(times, ", "), mapping, QueryStatus)
	}
	return b.String()
}

// Summary is the incident's line in the Temporal UI's workflow list.
func (in IncidentInput) Summary() string {
	return fmt.Sprintf("incident · %s · %s · %s", in.Projection, in.Policy, Short(in.Error, SummaryErrorRunes))
}

// Details are the incident's static details on its Temporal UI page.
func (in IncidentInput) Details() string {
	var b strings.Builder
	printf(&b, "One failure of **%s** across many events: fingerprint `%s` (%s", in.Projection, in.Fingerprint, in.ErrorKind)
	if in.SQLState != "" {
		printf(&b, ", SQLSTATE %s", in.SQLState)
	}
	printf(&b, "), pattern `%s`. Policy **%s**.\n\n", Short(in.Pattern, 400), in.Policy)
	printf(&b, "It resolves when a probe applies sample event `%s` (in a transaction rolled back), or when an operator signals `%s` or `%s`.",
		in.Sample.EventID, SignalResolve, SignalDeadLetterAll)
	if in.HoldMax > 0 {
		printf(&b, " A hold longer than %s dead-letters its events.", in.HoldMax)
	}
	if in.MaxHeld > 0 {
		printf(&b, " More than %d held events dead-letters them.", in.MaxHeld)
	}
	return b.String()
}

// CurrentDetails are the incident's current details on its Temporal UI
// page: its state, counts, probes and, once decided, why.
func (s IncidentStatus) CurrentDetails() string {
	var b strings.Builder
	printf(&b, "**%s** · %d events affected, %d held · %d probes", s.State, s.EventsAffected, s.EventsHeld, s.Probes)
	if s.LastProbeError != "" {
		printf(&b, " · last probe failed: %s", Short(s.LastProbeError, 200))
	}
	if s.NextProbeAt != nil {
		printf(&b, " · next probe at %s UTC", s.NextProbeAt.UTC().Format("15:04:05"))
	}
	if s.ResolvedAt != nil {
		printf(&b, "\n\nDecided by %s at %s UTC: %s", s.ResolvedBy, s.ResolvedAt.UTC().Format("15:04:05"), s.Reason)
	}
	return b.String()
}

// printf appends to b. It stands in for fmt.Fprintf, whose io.Writer the
// workflow checker cannot prove deterministic; these texts are built in
// workflow code.
func printf(b *strings.Builder, format string, args ...any) {
	b.WriteString(fmt.Sprintf(format, args...))
}
