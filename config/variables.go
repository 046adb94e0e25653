package config

import "slices"

// variables is every environment variable this package reads: Load's
// (LoadKafkaSecurity's included) in the order of CONTRACT §3, then
// LoadPayloadKeys'. It is a list of its own, beside the loaders, so that
// deployments (Kubernetes manifests, docker-compose.yml) can be checked
// against it; variables_test.go fails when the package reads a name missing
// here, or no longer names one listed.
var variables = []string{
	"PROJECTION_WORKER_MAX_RETRIES",
	"PROJECTION_WORKER_RETRY_INITIAL_MS",
	"PROJECTION_WORKER_RETRY_MULTIPLIER",
	"PROJECTION_WORKER_RETRY_MAX_MS",
	"DATABASE_URL",
	"KAFKA_BROKERS",
	"KAFKA_TLS",
	"KAFKA_TLS_CA_FILE",
	"KAFKA_TLS_CERT_FILE",
	"KAFKA_TLS_KEY_FILE",
	"KAFKA_TLS_SERVER_NAME",
	"KAFKA_TLS_INSECURE_SKIP_VERIFY",
	"KAFKA_SASL_MECHANISM",
	"KAFKA_SASL_USERNAME",
	"KAFKA_SASL_PASSWORD",
	"CAUSET_EVENTS_TOPIC",
	"CAUSET_DLQ_TOPIC",
	"CAUSET_CONSUMER_GROUP",
	"CAUSET_TASK_QUEUE",
	"CAUSET_BRIDGE_MODE",
	"CAUSET_ORDERING",
	"CAUSET_DLQ_REPLAY_WINDOW",
	"CAUSET_DLQ_HOLD_ENTITY",
	"CAUSET_BRIDGE_MAX_INFLIGHT",
	"CAUSET_BRIDGE_MAX_BUFFERED_BYTES",
	"CAUSET_BRIDGE_INSTANCE_ID",
	"CAUSET_PARKED_MAX_PER_KEY",
	"CAUSET_PARKED_MAX_PER_PARTITION",
	"CAUSET_IR_COST_LIMIT",
	"CAUSET_DEDUPE_HORIZON",
	"CAUSET_METRICS_ADDR",
	"CAUSET_AUTO_MIGRATE",
	"CAUSET_LINK_TIMEOUT",
	"CAUSET_INCIDENT_THRESHOLD",
	"CAUSET_INCIDENT_WINDOW",
	"CAUSET_INCIDENT_POLICY",
	"CAUSET_INCIDENT_HOLD_MAX",
	"CAUSET_INCIDENT_MAX_HELD",
	"CAUSET_WORKER_DEPLOYMENT",
	"CAUSET_WORKER_BUILD_ID",
	"CAUSET_PAYLOAD_KEYS",
	"CAUSET_PAYLOAD_KEYS_FILE",
	"CAUSET_PAYLOAD_KEY_CURRENT",
}

// removedVariables are variables of earlier releases that Load refuses
// when set, saying what replaced them: a setting that is silently ignored
// would leave an operator believing it holds.
var removedVariables = []struct{ name, instead string }{
	{"CAUSET_LANE_MAX_QUEUED", "ordering lanes are gone, a blocked key's later events are parked in PostgreSQL; bound them with CAUSET_PARKED_MAX_PER_KEY and CAUSET_PARKED_MAX_PER_PARTITION"},
}

// Variables returns the name of every environment variable the package
// reads: Load's and LoadPayloadKeys' (a new slice each call). The runtime's
// CAUSET_RUNTIME_ADDR, the relay's CAUSET_RELAY_* and the Temporal client's
// TEMPORAL_* are read elsewhere.
func Variables() []string { return slices.Clone(variables) }
