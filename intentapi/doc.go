// Package intentapi is the write path's HTTP server (`causet runtime`): it
// validates intents, has package ledger decide and record each in one
// PostgreSQL transaction, and answers as CONTRACT §9 says.
//
//	POST /v1/intents              {"intentId","intentType","entityId","forkId","payload"}
//	  200 {"status":"SUCCESS","intentId","events":[envelopes]} | {"status":"REJECTED","intentId","rule","reason"}
//	  400 the request is at fault: malformed JSON, unknown fields, missing or empty IDs, an unknown
//	      intentType, a payload over 256 KiB, NUL anywhere, IDs over the envelope's limits
//	  409 the same intentId is being recorded by another request right now
//	  413 the body is over 1 MiB
//	  422 the handler failed to evaluate (CEL error, cost limit), or the intentId was recorded
//	      for another request
//	  503 the ledger write failed after the infrastructure retries
//	  504 COMMIT was sent and its answer lost: the outcome is unknown (GET says)
//	GET /v1/intents/{intentId}    200 {"intentId","status":"unknown"|"succeeded"|"rejected", …}
//
// Every 4xx and 5xx has the body {"error":"<message>"}, and none of them
// wrote anything (after a 504 the intent may be recorded: its outcome is
// unknown). A re-submitted intentId gets its recorded 200 body, byte
// for byte. With Options.Auth every request needs a bearer token
// (AuthFromEnv: CAUSET_RUNTIME_TOKENS or CAUSET_RUNTIME_TOKENS_FILE): POST
// scope write, GET scope read; 401 without a known token, 403 without the
// scope, counted in causet_runtime_requests_refused_total{reason}.
//
// OpsHandler, on a listener of its own (CAUSET_METRICS_ADDR), answers
// /healthz and /readyz (package internal/health) and /metrics; it needs no
// token. The status of every intent is counted in
// causet_runtime_intents_total{status} and timed in
// causet_runtime_intent_duration_seconds{status}, and logged on one INFO
// line (event intent_outcome); every request is logged on a DEBUG line
// (event http_request). Serve reloads the handler catalog (package intents)
// on each deploy notification and every RefreshInterval.
//
// Neighbours: package app builds the server for `causet runtime` and
// `causet dev` (Service.NewRuntime); the bench runs it in process; package
// client is its Go client. Below, this package uses ledger (Submit,
// Status), intents (the catalog, Intent and its checks), event (ID limits),
// config (environment lookups) and internal/health.
package intentapi
