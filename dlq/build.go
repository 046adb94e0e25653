package dlq

import (
	"encoding/json"
	"time"

	"github.com/causet/projection-retry/contract"
)

// RunRecord is the record of a retry run that failed every attempt (the
// workflow's dead letter, or the bridge's for an event it could not hand
// to a workflow).
func RunRecord(in contract.DeadLetterInput, now time.Time) Record {
	rec := Record{
		SchemaVersion:  SchemaVersion,
		ProjectionName: in.Projection,
		IRVersion:      in.IRVersion,
		EventType:      in.Event.EventType,
		EntityID:       in.Event.EntityID,
		ForkID:         in.Event.ForkID,
		RetryCount:     len(in.Attempts),
		ReplayCount:    in.ReplayCount,
		Attempts:       in.Attempts,
		DeadLetteredAt: now.UTC(),
		Source:         in.Source,
	}
	if raw, err := json.Marshal(in.Event); err == nil {
		msg := json.RawMessage(raw)
		rec.Event = &msg
	}
	if n := len(in.Attempts); n > 0 {
		rec.Error = in.Attempts[n-1].Error
		rec.ErrorKind = in.Attempts[n-1].ErrorKind
		for _, a := range in.Attempts {
			if !a.StartedAt.IsZero() { // one lost before it started has no time
				rec.FirstFailedAt = a.StartedAt.UTC()
				break
			}
		}
	}
	return rec
}

// PoisonRecord is the record of an events-topic record that is not a valid
// envelope: its raw bytes are kept, errorKind invalid_event, never retried.
func PoisonRecord(value []byte, cause error, src contract.Source, now time.Time) Record {
	now = now.UTC()
	kind := string(contract.KindInvalidEvent)
	return Record{
		RawValue:       value,
		ErrorKind:      kind,
		Error:          cause.Error(),
		Attempts:       []contract.Attempt{{Number: 1, StartedAt: now, ErrorKind: kind, Error: cause.Error()}},
		FirstFailedAt:  now,
		DeadLetteredAt: now,
		Source:         src,
	}
}
