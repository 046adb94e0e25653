// Package client submits intents to the causet runtime (POST /v1/intents)
// and reads their outcome (GET /v1/intents/{intentId}), re-submitting only
// when that cannot write an intent twice.
//
// # What Submit does with each answer
//
//	answer to POST /v1/intents                   what Submit does
//	-------------------------------------------  ------------------------------------------------------------
//	200 {"status":"SUCCESS"}                     returns the Result; never re-submits (the events are in the ledger)
//	200 {"status":"REJECTED"}                    returns the Result; never re-submits (rules are deterministic)
//	400, 422 (any 4xx but 409, 429)              returns an *HTTPError; never re-submits (it would fail the same way)
//	5xx but 504                                  nothing was written: re-submits after a backoff
//	409, 429                                     nothing was written (409: the same intentId is in progress):
//	                                               re-submits after a backoff
//	no connection (dial failed)                  the request never left: re-submits after a backoff
//	504, timeout, connection lost,               outcome unknown (504: the runtime sent COMMIT and lost its
//	  unreadable 200                               answer): asks GET /v1/intents/{intentId}, then
//	                                               "succeeded" → returns SUCCESS and its events, never re-submits
//	                                               "rejected"  → returns REJECTED, its rule and reason, never re-submits
//	                                               "unknown"   → re-submits after a backoff (counts as a try)
//	the status check fails (5xx, 429, no answer) retries the status check with the same backoff; when it
//	                                               gives up, returns ErrOutcomeUnknown and does not re-submit
//
// Every re-submission carries the same intentId, and the runtime answers an
// intentId it has already recorded with that recorded outcome, writing
// nothing. So even a timed-out request still running on the server when the
// re-submission arrives ends in exactly one recorded intent, and a proxy's
// 502 or 504 sent after the runtime recorded the intent only brings that
// outcome back.
//
// # Tries and backoff
//
// Submit makes at most MaxTries submissions (default 5); each status check
// makes at most MaxTries requests of its own. Before retry n (n = 1 after the
// first failure) it waits a random duration drawn uniformly from
// [0, min(max, initial × multiplier^(n−1))] ("full jitter", so clients that
// failed together do not retry together). With the defaults (100 ms, 2×,
// 5 s) the ceilings are 100 ms, 200 ms, 400 ms and 800 ms. Every request has
// its own timeout (default 10 s). A cancelled context ends the wait at once.
//
// # Errors
//
//   - *HTTPError: the runtime answered with an error status (method, path,
//     status code and the runtime's message). Final for a 4xx; the last
//     cause inside ErrGaveUp for a 5xx or 429.
//   - ErrGaveUp (a *GaveUpError with the number of tries): MaxTries were
//     spent; it wraps the last cause. Nothing was recorded by a try that got
//     an answer; a last try that got none may still be running on the
//     server, so re-submit the same intentId later or ask Status.
//   - ErrOutcomeUnknown: a submission got no answer and the outcome could not
//     be learned (the status check gave up, or the context ended); it also
//     wraps the lost request's and the status check's errors. The intent may
//     be recorded; re-submitting the same intentId is safe.
//   - The context's error (errors.Is(err, context.Canceled)) when it ends
//     between tries.
//
// Neighbours: a part that needs nothing of the server's code: it speaks
// HTTP to package intentapi's server and decodes events with package event;
// its waits are internal/backoff's. `causet submit` (cmd/causet), `causet
// dev`'s demo traffic (package devstack) and the bench use it.
package client
