#!/usr/bin/env bash
# bench-temporal.sh [--quick] [OUT]
#
# The bench's Temporal phases (the default schedule's accuracy, the
# hand-off at 100 % failing against raw ExecuteWorkflow) against the
# Temporal dev server and then the production-shaped cluster of
# scripts/temporal-cluster.sh (four services, PostgreSQL persistence and SQL
# visibility, 4 history shards), one after the other on this machine, and
# their figures side by side: starts/s, the server's latency, persistence
# calls and CPU per start (the cluster's PostgreSQL counted as the server's,
# as the dev server's in-process SQLite is).
#
# The cluster is started for the run and stopped after it, unless
# TEMPORAL_CLUSTER_ENV names one already running. OUT (default
# .cache/bench-temporal) gets dev-server/, cluster/ (each a bench's
# results) and side-by-side.md. CAUSET_BENCH_PHASES overrides the phases
# (default schedule,handoff).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
quick=()
if [[ ${1:-} == --quick ]]; then
	quick=(--quick)
	shift
fi
OUT="${1:-$ROOT/.cache/bench-temporal}"
PHASES="${CAUSET_BENCH_PHASES:-schedule,handoff}"
mkdir -p "$OUT"

go build -o bin/causet ./cmd/causet

echo "bench-temporal: the dev server" >&2
env -u TEMPORAL_ADDRESS -u TEMPORAL_NAMESPACE CAUSET_BENCH_PHASES="$PHASES" \
	bin/causet bench "${quick[@]}" --out "$OUT/dev-server"

if [[ -z ${TEMPORAL_CLUSTER_ENV:-} ]]; then
	scripts/temporal-cluster.sh start >/dev/null
	trap 'scripts/temporal-cluster.sh stop >/dev/null' EXIT
	TEMPORAL_CLUSTER_ENV="$ROOT/.cache/temporal-cluster/run-${TEMPORAL_CLUSTER_PORT:-17233}/cluster.env"
fi
# shellcheck disable=SC1090
set -a && . "$TEMPORAL_CLUSTER_ENV" && set +a

echo "bench-temporal: the cluster at $TEMPORAL_ADDRESS" >&2
CAUSET_BENCH_PHASES="$PHASES" \
	CAUSET_BENCH_TEMPORAL_METRICS="$TEMPORAL_CLUSTER_METRICS" \
	CAUSET_BENCH_TEMPORAL_PIDFILES="$TEMPORAL_CLUSTER_PIDFILES" \
	CAUSET_BENCH_TEMPORAL_PGDATA="$TEMPORAL_CLUSTER_PGDATA" \
	bin/causet bench "${quick[@]}" --out "$OUT/cluster"

bin/causet bench --side-by-side "dev server=$OUT/dev-server" \
	--side-by-side "cluster (4 services, PostgreSQL, 4 shards)=$OUT/cluster" | tee "$OUT/side-by-side.md"
