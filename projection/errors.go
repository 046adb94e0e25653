package projection

import (
	"errors"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/event"
	"github.com/causet/projection-retry/internal/pgerr"
)

// ApplyError is a classified apply failure. Error returns Err's message; for
// a PostgreSQL error, its message alone (e.g. `column "followed_at" of
// relation "artist_followers" does not exist`), as operators read it in logs
// and dead letters; the SQLSTATE stays available through Unwrap.
type ApplyError struct {
	Kind contract.ErrorKind
	Err  error
}

func (e *ApplyError) Error() string {
	var pgErr *pgconn.PgError
	if errors.As(e.Err, &pgErr) && pgErr.Message != "" {
		return pgErr.Message
	}
	return e.Err.Error()
}
func (e *ApplyError) Unwrap() error { return e.Err }

// Retryable reports whether the failure may succeed on a later attempt
// (everything but invalid_event).
func (e *ApplyError) Retryable() bool { return e.Kind != contract.KindInvalidEvent }

func newApplyError(err error) *ApplyError {
	var ae *ApplyError
	if errors.As(err, &ae) {
		return ae
	}
	return &ApplyError{Kind: Classify(err), Err: err}
}

// ErrNotDeployed is returned (kind ir_eval) by Apply for a projection with no
// deployed version.
var ErrNotDeployed = errors.New("projection is not deployed")

// Classify returns the kind of err: the Kind of an *ApplyError; invalid_event
// for *event.InvalidError; ir_eval for *EvalError and ErrNotDeployed;
// connection for failures to reach or keep the database (connect errors,
// network errors, io.EOF, timeouts, cancellations, errors pgconn deems safe to
// retry, SQLSTATE class 08, 57P01-57P03 and 53300); sql for any other error,
// including every other *pgconn.PgError. Classify(nil) is "".
func Classify(err error) contract.ErrorKind {
	if err == nil {
		return ""
	}
	var ae *ApplyError
	if errors.As(err, &ae) {
		return ae.Kind
	}
	if event.IsInvalid(err) {
		return contract.KindInvalidEvent
	}
	var ee *EvalError
	if errors.As(err, &ee) || errors.Is(err, ErrNotDeployed) {
		return contract.KindIREval
	}
	if pgerr.Connection(err) {
		return contract.KindConnection
	}
	return contract.KindSQL
}
