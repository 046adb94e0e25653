package intentapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/causet/projection-retry/event"
	"github.com/causet/projection-retry/intents"
	"github.com/causet/projection-retry/ledger"
)

// MaxBodyBytes bounds a request body; a larger one is refused with 413
// before it is decoded.
const MaxBodyBytes = 1 << 20

// Outcome labels of causet_runtime_intents_total and of the intent log line.
const (
	outcomeSuccess       = "success"
	outcomeRejected      = "rejected"
	outcomeReplayed      = "replayed"
	outcomeInvalid       = "invalid"
	outcomeUnprocessable = "unprocessable"
	outcomeUnavailable   = "unavailable"
	outcomeUnknown       = "unknown"
	outcomeReused        = "reused"
	outcomeInProgress    = "in_progress"
	outcomeError         = "error"
)

var outcomes = []string{outcomeSuccess, outcomeRejected, outcomeReplayed, outcomeInvalid,
	outcomeUnprocessable, outcomeUnavailable, outcomeUnknown, outcomeReused, outcomeInProgress, outcomeError}

// requestFields are the fields of a POST /v1/intents body, matched exactly
// (encoding/json alone would match "INTENTID" too).
var requestFields = []string{"intentId", "intentType", "entityId", "forkId", "payload"}

// answer is what one POST answered, for the log line and the metrics.
type answer struct {
	outcome string
	code    int
	body    []byte
	err     string
	out     ledger.Outcome
}

func (s *Server) submit(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	in, a := s.answer(w, r)
	writeBody(w, a.code, a.body)
	elapsed := time.Since(start)
	s.metrics.observe(a.outcome, elapsed)
	attrs := []slog.Attr{slog.String("event", "intent_outcome"), slog.String("intentId", in.IntentID),
		slog.String("intentType", in.IntentType), slog.String("entityId", in.EntityID), slog.String("forkId", in.ForkID),
		slog.String("status", a.outcome), slog.Int("httpStatus", a.code),
		slog.Float64("durationMs", float64(elapsed.Microseconds())/1000)}
	if a.out.Status != "" {
		attrs = append(attrs, slog.Int("handlerVersion", a.out.HandlerVersion), slog.Int("events", len(a.out.Events)))
	}
	if a.out.Rule != "" {
		attrs = append(attrs, slog.String("rule", a.out.Rule), slog.String("reason", a.out.Reason))
	}
	if a.err != "" {
		attrs = append(attrs, slog.String("error", a.err))
	}
	s.logger.LogAttrs(r.Context(), slog.LevelInfo, "intent_outcome", attrs...)
}

func (s *Server) answer(w http.ResponseWriter, r *http.Request) (intents.Intent, answer) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		return intents.Intent{}, failure(http.StatusRequestEntityTooLarge, outcomeInvalid,
			fmt.Sprintf("request body is more than the %d bytes allowed", MaxBodyBytes))
	case err != nil:
		return intents.Intent{}, failure(http.StatusBadRequest, outcomeInvalid, "read request body: "+err.Error())
	}
	in, err := decodeIntent(body)
	if err != nil {
		return in, failure(http.StatusBadRequest, outcomeInvalid, err.Error())
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.opts.IntentTimeout)
	defer cancel()
	if _, err := s.opts.Catalog.Lookup(ctx, in.IntentType); err != nil {
		return in, s.failed(err)
	}
	out, err := s.opts.Ledger.Submit(ctx, in)
	if err != nil {
		return in, s.failed(err)
	}
	a := answer{outcome: outcomeSuccess, code: http.StatusOK, body: out.Body, out: out}
	switch {
	case out.Replayed:
		a.outcome = outcomeReplayed
	case out.Status == ledger.StatusRejected:
		a.outcome = outcomeRejected
	}
	return in, a
}

func failure(code int, outcome, msg string) answer {
	body, _ := json.Marshal(map[string]string{"error": msg})
	return answer{outcome: outcome, code: code, body: body, err: msg}
}

// failed maps a catalog or ledger error to its answer. Every answer but
// 504 means that nothing was written; 504 means that the commit was sent
// and its answer lost, so that the outcome is unknown.
func (s *Server) failed(err error) answer {
	var ie *intents.InvalidError
	var ee *intents.EvalError
	var ue *ledger.UnavailableError
	var ou *ledger.OutcomeUnknownError
	var re *ledger.ReusedError
	switch {
	case errors.As(err, &ou):
		a := failure(http.StatusGatewayTimeout, outcomeUnknown, fmt.Sprintf(
			"the ledger did not confirm the commit: the outcome is unknown; check GET /v1/intents/%s before re-submitting "+
				"(re-submitting with the same intentId is safe: it gets the recorded outcome if there is one)", ou.IntentID))
		a.err = err.Error()
		return a
	case errors.As(err, &re):
		return failure(http.StatusUnprocessableEntity, outcomeReused, re.Error())
	case errors.Is(err, ledger.ErrInProgress):
		return failure(http.StatusConflict, outcomeInProgress, err.Error())
	case errors.As(err, &ie), errors.Is(err, intents.ErrUnknownIntentType):
		return failure(http.StatusBadRequest, outcomeInvalid, err.Error())
	case errors.As(err, &ee):
		return failure(http.StatusUnprocessableEntity, outcomeUnprocessable, "intent handler failed: "+err.Error())
	case errors.As(err, &ue):
		a := failure(http.StatusServiceUnavailable, outcomeUnavailable,
			"the ledger is unavailable; re-submitting this intent is safe")
		a.err = err.Error() // logged, not sent: it names hosts
		return a
	}
	s.logger.Error("intent failed unexpectedly", "error", err.Error())
	a := failure(http.StatusInternalServerError, outcomeError, "internal error; nothing was written")
	a.err = err.Error()
	return a
}

// decodeIntent checks and decodes a request body; every error is the
// request's fault (400).
func decodeIntent(body []byte) (intents.Intent, error) {
	if err := intents.CheckJSON(body); err != nil {
		return intents.Intent{}, fmt.Errorf("request body: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	var fields map[string]json.RawMessage
	if err := dec.Decode(&fields); err != nil {
		return intents.Intent{}, fmt.Errorf("malformed JSON body: %s", strings.TrimPrefix(err.Error(), "json: "))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return intents.Intent{}, errors.New("malformed JSON body: data after the JSON object")
	}
	names := make([]string, 0, len(fields))
	for k := range fields {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		if !slices.Contains(requestFields, k) {
			return intents.Intent{}, fmt.Errorf("unknown field %q (want %s)", k, strings.Join(requestFields, ", "))
		}
	}
	var ids [4]string
	for i, k := range requestFields[:4] {
		if raw, ok := fields[k]; ok && string(raw) != "null" {
			if err := json.Unmarshal(raw, &ids[i]); err != nil {
				return intents.Intent{}, fmt.Errorf("%s must be a string", k)
			}
		}
	}
	in := intents.Intent{IntentID: ids[0], IntentType: ids[1], EntityID: ids[2], ForkID: ids[3], Payload: map[string]any{}}
	if err := in.Validate(); err != nil {
		return in, err
	}
	payload, err := intents.ParsePayload(fields["payload"])
	if err != nil {
		return in, err
	}
	in.Payload = payload
	return in, nil
}

func (s *Server) status(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("intentId")
	switch {
	case len(id) > event.MaxIntentIDBytes:
		writeError(w, http.StatusBadRequest, fmt.Sprintf("intentId is %d bytes, more than the %d allowed", len(id), event.MaxIntentIDBytes))
		return
	case strings.ContainsRune(id, 0):
		writeError(w, http.StatusBadRequest, "intentId contains NUL (PostgreSQL text cannot hold it)")
		return
	case !utf8.ValidString(id):
		writeError(w, http.StatusBadRequest, "intentId is not valid UTF-8")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.opts.IntentTimeout)
	defer cancel()
	st, err := s.opts.Ledger.Status(ctx, id)
	if err != nil {
		s.logger.Warn("intent status failed", "intentId", id, "error", err.Error())
		writeError(w, http.StatusServiceUnavailable, "the ledger is unavailable; ask again")
		return
	}
	body := map[string]any{"intentId": st.IntentID, "status": st.Status}
	switch st.Status {
	case ledger.RecordedSucceeded:
		body["events"] = st.Events
	case ledger.RecordedRejected:
		body["rule"], body["reason"] = st.Rule, st.Reason
	}
	writeJSON(w, http.StatusOK, body)
}
