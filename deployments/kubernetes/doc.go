// Package kubernetes holds the kustomize manifests of the four long-running
// processes of the one image — `causet bridge`, `causet worker`, `causet
// runtime` and `causet relay` — in base/ (Deployments, PodDisruptionBudgets,
// the worker's HPA, the runtime's Service, the network policy, the schema
// migration that runs before the processes, the ConfigMap causet.env) and
// overlays/ (dev, production). PostgreSQL, Kafka and Temporal are not part of them;
// README.md says how to point the processes at yours.
//
// Its Go code is a test: it renders the base and every overlay with the
// kustomize library (what `kubectl kustomize` runs), decodes every object
// strictly into its k8s.io/api type and checks what the service needs of
// them — probes on /healthz and /readyz, the security context, the schema
// migrated before any process starts, and environment variables the code
// reads, with values it accepts. No cluster is needed.
//
// Neighbours: a command-layer package that nothing imports. Its test reads
// the variables through app and parses their values with config, intentapi
// and relay, as the processes do.
package kubernetes
