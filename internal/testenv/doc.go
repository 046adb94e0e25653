// Package testenv provides the external services that integration tests need:
// a throwaway PostgreSQL cluster, a Temporal dev server and Kafka (an in-process
// kfake cluster, or a real broker when KAFKA_BROKERS is set).
//
// Every package that uses testenv should route its TestMain through [Main] so
// that the services started for the test binary are torn down when it exits:
//
//	func TestMain(m *testing.M) { testenv.Main(m) }
//
// Services are started lazily, at most once per test binary, on free loopback
// ports. Each test gets an isolated slice of them: its own database
// ([Postgres]), its own Temporal client ([Temporal]), its own kfake cluster or
// unique topic names ([Kafka], [Topic]).
//
// Environment:
//
//	TEST_DATABASE_URL  use this PostgreSQL instead of starting one (each test
//	                   still gets a fresh database created on it)
//	TEMPORAL_ADDRESS   use this Temporal frontend instead of a dev server
//	TEMPORAL_NAMESPACE namespace on TEMPORAL_ADDRESS (default "default")
//	KAFKA_BROKERS      use this real Kafka (comma-separated seeds) instead of kfake
//	CI=true            a service that cannot be had fails the test instead of
//	                   skipping it, so CI cannot go green by skipping
//
// A test that touches Kafka should have "Kafka" in its name: `make test-kafka`
// re-runs exactly those tests against a real broker.
//
// If a test binary dies without running [Main]'s teardown (panic, -timeout,
// SIGKILL), a small watchdog process notices the test binary is gone and
// stops the PostgreSQL cluster and Temporal dev server it started.
//
// The cluster and the dev server are started by package
// [github.com/causet/projection-retry/internal/proc], as `causet dev` starts
// them, and each test database is copied from a template migrated by
// package [github.com/causet/projection-retry/internal/schema]. Those are
// the only project packages it imports: a leaf, so the tests of every
// package, from the parts to the commands and the reliability suite, can
// use it.
package testenv
