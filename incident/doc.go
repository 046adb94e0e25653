// Package incident recognises systemic failures — many distinct events of
// one projection failing the same way — and keeps what the bridges and the
// incident workflow share about each (CONTRACT §12).
//
//   - Fingerprints (fingerprint.go): a failure's fingerprint is its
//     projection, error kind, SQLSTATE (or, for IR failures, the expression
//     path its message names) and message with the values stripped, so that
//     `null value in column "email" violates not-null constraint` of ten
//     thousand events is one fingerprint while a bad event's own error is
//     another. Double-quoted identifiers are kept; literals, numbers and
//     UUIDs go.
//   - Detector (detector.go): distinct failing events per fingerprint in a
//     sliding window, bounded in fingerprints and in events per fingerprint;
//     a batch read again counts an event once.
//   - Store (store.go): the incidents table (causet_incidents). Under
//     CAUSET_INCIDENT_POLICY=hold the row is the incident's state as the
//     bridges see it, and the events it holds are parked behind it as their
//     keys' head (package parking); SetState moves the row and, in the same
//     transaction, the heads of its keys, which is what releases (or
//     dead-letters) the parked events.
//   - Registry (registry.go): one bridge's view of incidents. It feeds the
//     detector with the bridge's failed inline attempts, opens a
//     ProjectionIncidentWorkflow by Signal-With-Start when a fingerprint
//     reaches the threshold, tells the bridge which failures a holding
//     incident takes, and reports the events it parked or counted to the
//     incident's workflow: at once when it opens, then at most every
//     DefaultReportInterval. It also restarts the workflow of an incident
//     whose row still holds events, and signals a held incident when its
//     projection's IR is deployed so that it probes at once.
//
// Detection runs only on attempt 1 in the bridge (inline mode); a retry
// workflow's later attempts stay per event.
//
// Neighbours: the bridge (package starter) owns a Registry; the incident
// workflow's activities (package activities) use the Store and Of;
// `causet incidents` (cmd/causet) signals an incident's workflow through
// SignalWithStart, restarting it from its row if it has ended; package app
// builds the store. The workflow itself is in package workflows. Below,
// this package uses parking (head states of held keys), contract (incident
// names, inputs, states), config (thresholds and policy) and event.
package incident
