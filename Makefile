# Causet projection retries — developer and CI entry points.
#
#   make dev         the whole stack on embedded defaults with demo traffic
#                    (installs the temporal CLI into ./bin first if needed)
#   make tools       install the temporal CLI (dev server for tests) into ./bin
#   make test        unit + integration tests (starts throwaway PostgreSQL,
#                    Temporal dev server and in-process Kafka by itself)
#   make test-kafka  re-run the Kafka-facing tests (names containing "Kafka")
#                    against a real broker at KAFKA_BROKERS (see kafka-start)
#   make lint        gofmt, go vet, staticcheck, workflowcheck
#   make build       bin/causet
#   make kafka-start / kafka-stop   local Apache Kafka (KRaft) on 127.0.0.1:9092,
#                    and SASL_SSL (SCRAM-SHA-512, ACLs) on 127.0.0.1:9094
#   make temporal-cluster-start / -stop  a production-shaped Temporal on
#                    127.0.0.1:17233: frontend, history, matching and worker
#                    processes, PostgreSQL persistence and SQL visibility
#   make test-cluster  reliability scenarios 24 and 25 beside both: every
#                    process on the broker's SASL_SSL listener with a user and
#                    ACLs of its own, on the Temporal cluster; history killed
#                    mid-backoff, matching restarted under load
#   make model       the park/release model test over SEEDS seeds (default
#                    1000; SEED=n replays one), real bridge, worker, Temporal
#                    dev server and PostgreSQL; make test runs 10

SHELL := /usr/bin/env bash

GO                   ?= go
# The versions of Temporal, Kafka and PostgreSQL every stack here runs.
include deployments/versions.env
TEMPORAL_CLI_TAG     := v$(TEMPORAL_CLI_VERSION)
TEMPORAL             := $(CURDIR)/bin/temporal
# Three test binaries at a time (-p 3): they mostly wait on timers, servers
# and subprocesses (a 2-core run uses about a quarter of its CPU time), so a
# third overlaps the waits: 857 s -> 620 s for make test here. The starter
# package alone runs 7-8 minutes here under -race, so go test's default
# 10-minute limit per binary is raised: a slower machine must not fail it.
GOTESTFLAGS          ?= -race -count=1 -p 3 -timeout 30m
# Tests that touch Kafka carry "Kafka" in their name; test-kafka runs those.
KAFKA_TEST_PATTERN   ?= Kafka
KAFKA_PORT           ?= 9092
KAFKA_BROKERS        ?= 127.0.0.1:$(KAFKA_PORT)
# What a client of the broker's SASL_SSL listener needs (kafka-start writes it).
KAFKA_SECURE_ENV     ?= $(CURDIR)/.cache/kafka/run-$(KAFKA_PORT)/secure.env
TEMPORAL_CLUSTER_PORT ?= 17233
# Where the Temporal cluster is (temporal-cluster-start writes it).
TEMPORAL_CLUSTER_ENV ?= $(CURDIR)/.cache/temporal-cluster/run-$(TEMPORAL_CLUSTER_PORT)/cluster.env

.PHONY: all dev tools previous-release test test-kafka test-cluster temporal-cluster-start temporal-cluster-stop lint build release kafka-start kafka-stop kafka-status clean reliability model soak

all: lint test build

tools:
	@if $(GO) version -m $(TEMPORAL) 2>/dev/null | grep -Eq '^[[:space:]]+mod[[:space:]]+github.com/temporalio/cli[[:space:]]+$(TEMPORAL_CLI_TAG)([[:space:]]|$$)'; then \
		echo "temporal CLI $(TEMPORAL_CLI_TAG) already in ./bin"; \
	else \
		echo "installing temporal CLI $(TEMPORAL_CLI_TAG) into ./bin (a few minutes on a cold cache)"; \
		GOBIN=$(CURDIR)/bin $(GO) install github.com/temporalio/cli/cmd/temporal@$(TEMPORAL_CLI_TAG); \
	fi

# gotestsum closes with "DONE <n> tests, <m> skipped" and lists any skipped
# test, so a run shows the integration tests ran rather than skipped.
GOTESTSUM            := $(GO) tool gotestsum --format pkgname --format-hide-empty-pkg --

# The longest test binaries are named first so that go test starts them
# first (it runs packages in the order named, -p at a time):
# run last, they would run alone at the end. Each package runs once.
SLOW_PACKAGES        := ./starter/ ./cmd/causet/ ./app/ ./rollout/

test: tools
	$(GOTESTSUM) $(GOTESTFLAGS) $(SLOW_PACKAGES) ./...

# With the broker's SASL_SSL listener up (kafka-start), its tests run too.
test-kafka: tools
	KAFKA_BROKERS=$(KAFKA_BROKERS) $(if $(wildcard $(KAFKA_SECURE_ENV)),KAFKA_SECURE_ENV=$(KAFKA_SECURE_ENV)) $(GOTESTSUM) $(GOTESTFLAGS) -run '$(KAFKA_TEST_PATTERN)' $(SLOW_PACKAGES) ./...

test-cluster: tools
	CAUSET_RELIABILITY=short KAFKA_BROKERS=$(KAFKA_BROKERS) KAFKA_SECURE_ENV=$(KAFKA_SECURE_ENV) \
		TEMPORAL_CLUSTER_ENV=$(TEMPORAL_CLUSTER_ENV) \
		$(GO) test -count=1 -v -timeout 20m -run '^TestReliability(24SecuredKafka|25TemporalCluster)$$' ./reliability/

temporal-cluster-start: tools
	TEMPORAL_CLUSTER_PORT=$(TEMPORAL_CLUSTER_PORT) scripts/temporal-cluster.sh start

temporal-cluster-stop:
	TEMPORAL_CLUSTER_PORT=$(TEMPORAL_CLUSTER_PORT) scripts/temporal-cluster.sh stop

lint:
	@files=$$(gofmt -l $$(find . -name '*.go' -not -path './.cache/*' -not -path './bin/*')); \
	if [ -n "$$files" ]; then echo "gofmt: these files need formatting:"; echo "$$files"; exit 1; fi
	$(GO) vet ./...
	$(GO) tool staticcheck ./...
	@if [ -d workflows ]; then echo "$(GO) tool workflowcheck ./workflows/..."; $(GO) tool workflowcheck ./workflows/...; fi

build:
	$(GO) build -buildvcs=auto -o bin/causet ./cmd/causet

# Release artifacts into dist/<version>/ (scripts/release.sh): static
# linux/amd64 and linux/arm64 binaries, SHA256SUMS, an SBOM, and the image
# where docker runs. VERSION cuts a new release; nothing is published.
release:
	$(if $(VERSION),VERSION=$(VERSION)) scripts/release.sh

# The previous release's binary, built from its recorded commit into
# .cache/releases/<version>/ (reliability scenario 26 rolls from it;
# FROM=<version> builds another recorded release).
previous-release:
	scripts/previous-release.sh $(FROM)

dev: tools build
	./bin/causet dev --demo

kafka-start:
	KAFKA_PORT=$(KAFKA_PORT) scripts/kafka-broker.sh start

kafka-stop:
	KAFKA_PORT=$(KAFKA_PORT) scripts/kafka-broker.sh stop

kafka-status:
	KAFKA_PORT=$(KAFKA_PORT) scripts/kafka-broker.sh status

clean:
	rm -f bin/causet

# Reliability suite (RELIABILITY.md): kill -9, outages, DLQ faults, bad
# input, hot keys, lost lanes, fuzzers, security tests, in the default
# configuration and with CAUSET_ORDERING=none. Full profile;
# `scripts/reliability.sh --short` is the CI profile.
reliability: tools
	scripts/reliability.sh

# Soak (RELIABILITY.md "Soak"): two bridges, two workers, the runtime and
# the relay under faults drawn from a seed for DURATION, then the checker;
# SEED replays a schedule.
DURATION ?= 8m
soak: tools
	CAUSET_SOAK=1 CAUSET_SOAK_DURATION=$(DURATION) $(if $(SEED),CAUSET_SOAK_SEED=$(SEED)) \
		$(GO) test -count=1 -v -timeout 3h -run '^TestSoak' ./reliability/

SEEDS         ?= 1000
MODEL_PARALLEL ?= 8
model: tools
	CAUSET_MODEL_SEEDS=$(SEEDS) $(if $(SEED),CAUSET_MODEL_SEED=$(SEED)) $(GOTESTSUM) -count=1 -timeout 3h \
		-parallel $(MODEL_PARALLEL) -run '^TestBridgeKafkaModelSeeds$$' ./starter/
