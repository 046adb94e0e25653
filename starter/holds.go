package starter

import (
	"context"
	"errors"

	"github.com/causet/projection-retry/parking"
	"github.com/causet/projection-retry/projection"
)

// Entity ordering's one rule for a batch, fresh or a release of parked
// events (ordered.go, release.go): the first failure of a key holds every
// later pair of that key in the batch. The engine holds them within a round
// of writes (HoldAfterFailure); a pair written in an earlier round, or one
// whose key failed only at a later statement, may still have applied. Such
// a run is rolled back (errRerun from its beforeCommit) and run again with
// the pairs after each such failure held, until a run keeps the rule.
// After maxOrderedRuns-1 reruns every pair of a key that failed is held,
// which is always stable. What a split batch learned is kept by the
// partition's keys: a failure committed in one half is its key's head, and
// the other half holds the key (heads, stillReleased).

// errRerun rolls a batch back so it runs again with more pairs held.
var errRerun = errors.New("rerun: a later event of a failed key was applied")

const maxOrderedRuns = 5

// holdAndRerun is the hold-and-rerun state of one batch: for each key that
// failed in an earlier run, the index of its first failure.
type holdAndRerun struct {
	after map[parking.Key]int
}

// holds reports whether the pair at index of key k is held: it comes after
// the key's first failure in an earlier run.
func (hr *holdAndRerun) holds(k parking.Key, index int) bool {
	at, ok := hr.after[k]
	return ok && index > at
}

// check, in a run's beforeCommit, finds each key's first failure among outs
// (keyOf says which key a result is of, and false for a result the rule
// does not govern) and returns errRerun when a later pair of such a key
// applied, recording the failure so that the next run holds what follows
// it. first is each key's first failure, by index.
func (hr *holdAndRerun) check(outs []projection.Result, keyOf func(projection.Result) (parking.Key, bool)) (first map[parking.Key]int, err error) {
	first = map[parking.Key]int{}
	for _, o := range outs {
		if o.Status != projection.StatusFailed {
			continue
		}
		if k, ok := keyOf(o); ok {
			if at, seen := first[k]; !seen || o.Index < at {
				first[k] = o.Index
			}
		}
	}
	for _, o := range outs {
		if o.Status != projection.StatusApplied && o.Status != projection.StatusDuplicate {
			continue
		}
		k, ok := keyOf(o)
		if !ok {
			continue
		}
		if at, failed := first[k]; failed && o.Index > at {
			if hr.after == nil {
				hr.after = map[parking.Key]int{}
			}
			if cur, held := hr.after[k]; !held || at < cur {
				hr.after[k] = at
			}
			err = errRerun
		}
	}
	return first, err
}

// run applies until a run keeps the rule (or fails otherwise); rerun is
// told of each run that had to run again.
func (hr *holdAndRerun) run(ctx context.Context, apply func() ([]projection.Result, error), rerun func(run int)) ([]projection.Result, error) {
	for run := 1; ; run++ {
		outs, err := apply()
		if !errors.Is(err, errRerun) || ctx.Err() != nil {
			return outs, err
		}
		if run >= maxOrderedRuns-1 {
			// Not stable: every pair of each failed key is held; its first
			// one becomes the key's head.
			for k := range hr.after {
				hr.after[k] = -1
			}
		}
		if rerun != nil {
			rerun(run + 1)
		}
	}
}
