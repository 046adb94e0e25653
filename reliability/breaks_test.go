package reliability

import (
	"context"
	"strings"
	"sync"
	"time"
)

// tableBreaks records when a scenario broke rel_effects as a bad migration
// does (its ratio column renamed, then renamed back): every event of the
// projection fails meanwhile with one fingerprint (SQLSTATE 42703), which
// opens an incident. An event caught by the break may end as a dead letter
// rather than an effect — the promise is "applied once or dead-lettered",
// and for these events either is right — and may have had a retry
// workflow of its own. verify accepts that of an event, and only that: when
// its dead letters carry the missing column's error (or name a break's
// incident the operator dead-lettered, whose records may repeat) and it
// has no effect,
// or when its retry workflow started within a break (or breakSlack after
// one: a start waits out a Temporal outage).
type tableBreaks struct {
	mu    sync.Mutex
	spans []breakSpan
	// deadLettered are the break's incidents an operator dead-lettered
	// (dead-letter-all): their held events' dead letters name them.
	deadLettered []string
}

type breakSpan struct{ from, to time.Time }

// breakSlack is how long after a break's end a retry workflow of a
// succeeding event may start and still be the break's.
const breakSlack = 2 * time.Minute

func (b *tableBreaks) add(from, to time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.spans = append(b.spans, breakSpan{from, to})
}

// count is how many breaks there were (0 for a nil tableBreaks).
func (b *tableBreaks) count() int {
	if b == nil {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.spans)
}

// covers reports whether at falls within a break or breakSlack after it.
func (b *tableBreaks) covers(at time.Time) bool {
	if b == nil {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, s := range b.spans {
		if !at.Before(s.from) && !at.After(s.to.Add(breakSlack)) {
			return true
		}
	}
	return false
}

// isBreakError reports whether an attempt's error is the renamed column's.
func isBreakError(msg string) bool {
	return strings.Contains(msg, `column "`+brokenColumn+`"`)
}

// isLostAttemptError reports whether a dead letter's error is that of an
// attempt that never reported, its worker killed with it in flight
// (contract.SettleUnreported).
func isLostAttemptError(msg string) bool {
	return strings.HasPrefix(msg, "attempt timed out after ")
}

// deadLetteredAll records that the operator dead-lettered the break's
// incident id.
func (b *tableBreaks) deadLetteredAll(id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.deadLettered = append(b.deadLettered, id)
}

// byDeadLetterAll reports whether a dead letter's error is that of an
// event held by a break's incident the operator dead-lettered (CONTRACT
// §12: such a record may repeat, never go missing).
func (b *tableBreaks) byDeadLetterAll(msg string) bool {
	if b == nil {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, id := range b.deadLettered {
		if strings.HasPrefix(msg, "held by incident "+id+",") {
			return true
		}
	}
	return false
}

// renameColumn renames one of rel_effects' columns, within 5 s.
func (s *stack) renameColumn(from, to string) error {
	ctx, cancel := context.WithTimeout(s.ctx, 5*time.Second)
	defer cancel()
	_, err := s.pool.Exec(ctx, `ALTER TABLE rel_effects RENAME COLUMN `+from+` TO `+to)
	return err
}
