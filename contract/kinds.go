package contract

// ErrorKind classifies a failed attempt (CONTRACT §2 errorKind). It is also
// the ApplicationError type of a failed ApplyProjection attempt.
type ErrorKind string

const (
	// KindSQL is an execution error: schema mismatch, constraint, bad value;
	// also an attempt that ran past its timeout.
	KindSQL ErrorKind = "sql"
	// KindIREval is a CEL evaluation error, or a projection that is not deployed.
	KindIREval ErrorKind = "ir_eval"
	// KindConnection means the database could not be reached or the
	// connection was lost while a probe found it answering; nothing of the
	// attempt was committed. An attempt that meets a database that does not
	// answer a probe is an outage (DatabaseOutageType) and counts as none.
	KindConnection ErrorKind = "connection"
	// KindInvalidEvent means the event can never be applied (not a valid
	// envelope, or refused by Temporal); it is never retried.
	KindInvalidEvent ErrorKind = "invalid_event"
)

// NonRetryableErrorTypes are the ApplicationError types an activity retry
// policy never retries.
var NonRetryableErrorTypes = []string{string(KindInvalidEvent), DatabaseOutageType}
