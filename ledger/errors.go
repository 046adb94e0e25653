package ledger

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/causet/projection-retry/intents"
	"github.com/causet/projection-retry/internal/backoff"
	"github.com/causet/projection-retry/internal/pgerr"
)

// UnavailableError is a PostgreSQL failure: nothing of the intent was
// written (unless Op is "commit", whose outcome a lost connection leaves
// unknown; Status tells). Tries counts the tries of connection acquisition
// and BEGIN, the only steps that are retried.
type UnavailableError struct {
	Op    string
	Tries int
	Err   error
}

func (e *UnavailableError) Error() string {
	if e.Tries > 1 {
		return fmt.Sprintf("ledger unavailable: %s failed after %d tries: %v", e.Op, e.Tries, e.Err)
	}
	return fmt.Sprintf("ledger unavailable: %s: %v", e.Op, e.Err)
}

func (e *UnavailableError) Unwrap() error { return e.Err }

func unavailable(op string, err error) error {
	return &UnavailableError{Op: op, Tries: 1, Err: err}
}

// OutcomeUnknownError is a commit whose answer was lost: COMMIT was sent,
// so the intent may be recorded or not. Status (GET /v1/intents/{id})
// tells which; a re-submission with the same intentId is answered with the
// recorded outcome if it was recorded, so it is safe either way.
type OutcomeUnknownError struct {
	IntentID string
	Err      error
}

func (e *OutcomeUnknownError) Error() string {
	return fmt.Sprintf("ledger: the commit of intent %s got no answer, its outcome is unknown: %v", e.IntentID, e.Err)
}

func (e *OutcomeUnknownError) Unwrap() error { return e.Err }

// ReusedError is an intentId recorded for another request (another type,
// entity, fork or payload): its recorded outcome is not this request's.
type ReusedError struct{ IntentID string }

func (e *ReusedError) Error() string {
	return fmt.Sprintf("intentId %s was already used for a different request (another intent type, entity, fork or payload): use a new intentId for a new intent", e.IntentID)
}

// ErrInProgress is an intentId whose first request is still being recorded:
// ask again once it has answered.
var ErrInProgress = errors.New("a request with this intentId is in progress: ask again (its outcome is then the recorded one)")

// decideError sorts a Decider's error: the request's and the handler's
// faults pass through; a read the database refuses for the handler's own
// reasons is the handler's fault; anything else is the database's.
func decideError(err error) error {
	var ie *intents.InvalidError
	var ee *intents.EvalError
	var re *intents.ReadError
	switch {
	case errors.As(err, &ie), errors.As(err, &ee), errors.Is(err, intents.ErrUnknownIntentType):
		return err
	case errors.As(err, &re) && handlerFault(re.Err):
		return &intents.EvalError{Path: "reads." + re.Read, Err: fmt.Errorf("table %s: %s", re.Table, pgMessage(re.Err))}
	}
	return unavailable("decide", err)
}

// handlerFault reports whether a read failed for a reason that the same read
// would meet again: an undefined table or column, a value of the wrong type
// (SQLSTATE classes 42 and 22), a key matching several rows, a row too
// large. Lost connections, cancellations, serialization failures and
// resource errors are the database's.
func handlerFault(err error) bool {
	if pgerr.Connection(err) {
		return false
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return strings.HasPrefix(pe.Code, "42") || strings.HasPrefix(pe.Code, "22")
	}
	return true
}

// pgMessage is a PostgreSQL error's message alone, as operators read it.
func pgMessage(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Message != "" {
		return pe.Message
	}
	return err.Error()
}

// attempt runs fn (connection acquisition, BEGIN) up to l.tries times,
// each bounded by l.tryTimeout, waiting l.waits between tries.
func attempt[T any](ctx context.Context, l *Ledger, op string, fn func(context.Context) (T, error)) (T, error) {
	var zero T
	for try := 1; ; try++ {
		tctx, cancel := context.WithTimeout(ctx, l.tryTimeout)
		v, err := fn(tctx)
		cancel()
		if err == nil {
			return v, nil
		}
		if try >= l.tries || ctx.Err() != nil {
			return zero, &UnavailableError{Op: op, Tries: try, Err: err}
		}
		wait := l.waits[min(try-1, len(l.waits)-1)]
		l.logger.Warn("ledger retry", "op", op, "try", try, "error", err.Error(), "retryIn", wait.String())
		if backoff.Sleep(ctx, wait) != nil {
			return zero, &UnavailableError{Op: op, Tries: try, Err: err}
		}
	}
}
