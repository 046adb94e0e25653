// Package observability holds the Prometheus alert rules
// (causet-alerts.rules.yml) and the Grafana dashboard
// (causet-dashboard.json) of a Causet deployment; README.md describes both.
//
// Its Go code is a test: both files parse with Prometheus's own parsers,
// every alert carries what an operator needs, and
// (TestMetricsExportedKafka) every metric they name is exported by a
// running worker, bridge and relay, started in process on internal/testenv's
// services.
//
// Neighbours: a command-layer package that nothing imports. Its test runs
// the service through app with projection, relay, contract and the example
// projections.
package observability
