// Package reliability holds the reliability suite of issue 8: scenarios that
// kill, stop and break the bridge, the worker, PostgreSQL, Temporal and Kafka
// while events flow, then count what was lost, applied twice, dead-lettered
// and started as workflows. The scenarios are Go tests in this package; they
// are heavy, so they skip unless CAUSET_RELIABILITY is set:
//
//	CAUSET_RELIABILITY=1 go test -v -timeout 60m ./reliability/   # full profile
//	CAUSET_RELIABILITY=short go test -v ./reliability/             # CI profile
//	scripts/reliability.sh [--short]                               # all, with the summary line
//
// CAUSET_RELIABILITY_PROFILE=short|full overrides the profile. Each scenario
// prints one machine-readable line to stdout:
//
//	RELIABILITY scenario=<name> passed=<bool> lost=<n> double_applied=<n> duplicate_workflows=<n> ...
//
// which scripts/reliability.sh aggregates. See RELIABILITY.md for the figures.
package reliability
