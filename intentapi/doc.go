// Package runtime is the write path's HTTP server (causet runtime): it
// validates intents, has package ledger decide and record them in one
// PostgreSQL transaction each, and answers as the write-path spec says.
//
//	POST /v1/intents              {"intentId","intentType","entityId","forkId","payload"}
//	  200 {"status":"SUCCESS","intentId","events":[envelopes]} | {"status":"REJECTED","intentId","rule","reason"}
//	  400 the request is at fault: malformed JSON, unknown fields, missing or empty IDs, an unknown
//	      intentType, a payload over 256 KiB, NUL anywhere, IDs over the envelope's limits
//	  413 the body is over 1 MiB
//	  422 the handler failed to evaluate (CEL error, cost limit)
//	  503 the ledger write failed after the infrastructure retries
//	GET /v1/intents/{intentId}    200 {"intentId","status":"unknown"|"succeeded"|"rejected", …}
//	GET /healthz                  200 while the process runs
//	GET /readyz                   200 when PostgreSQL answers, else 503
//	GET /metrics                  Prometheus, when Options.Gatherer is set
//
// Every 4xx and 5xx has the body {"error":"<message>"}, and none of them
// wrote anything. A re-submitted intentId gets its recorded 200 body, byte
// for byte. The status of every intent is counted in
// causet_runtime_intents_total{status} and timed in
// causet_runtime_intent_duration_seconds{status}, status being success,
// rejected, replayed (an answer recorded before), invalid (400, 413),
// unprocessable (422), unavailable (503) or error (500); each is logged on
// one INFO line (event intent_outcome), and every request on a DEBUG line
// (event http_request).
package intentapi
