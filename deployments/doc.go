// Package deployments holds the files for running Causet outside `causet
// dev`: with Docker Compose (the repository's docker-compose.yml and
// Dockerfile, with init.sh, the one-shot that migrates the schema and
// deploys the example documents), beside an existing Temporal cluster
// (README.md), on Kubernetes (deployments/kubernetes) and under Prometheus
// and Grafana (deployments/observability).
//
// Its Go code is a test: it checks docker-compose.yml and the Dockerfile
// statically, with no Docker engine — services, dependencies and their
// conditions, health checks on /readyz, ports, image tags, and that every
// environment variable given to a causet service is one the code reads
// (app.Variables).
//
// Neighbours: a command-layer package that nothing imports. Its test reads
// app (the variables) and contract (the search-attribute names).
package deployments
