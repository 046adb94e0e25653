#!/usr/bin/env bash
# Reliability suite: kills, outages, broker faults, silent and lossy links,
# bad input, hot keys, lost lanes and fuzzing, with nothing lost. See
# RELIABILITY.md. Scenarios 17-22 put processes on test hosts (network
# namespaces): they need root, ip and nft (scripts/test-tools.sh).
#
#   scripts/reliability.sh            full profile: scenarios 1-7 and 9-22, each
#                                     in both orderings where it applies (entity,
#                                     the default, and none), + 8 security tests
#                                     + the two fuzzers; about an hour on 2 cores
#   scripts/reliability.sh --short    CI profile: scenarios 1-3 and 9-26 in the
#                                     default configuration (entity ordering), 7
#                                     in both, smaller sizes, + the fuzzers; ~14 min
#
# Scenarios 17-22, 24 and 26 run side by side (-parallel 8) after the
# others: most of their time is a fault's hold or a wait, each has hosts,
# Kafka, topics, database and task queue of its own, and none stops a shared
# service. 25 runs alone before them: it times attempts around a kill of
# the cluster's history service. 26 builds the previous release's binary
# from its commit (scripts/previous-release.sh) unless .cache/releases has
# it. 24 and 25 need the real broker's SASL_SSL listener
# (KAFKA_SECURE_ENV, scripts/kafka-broker.sh) and the Temporal cluster
# (TEMPORAL_CLUSTER_ENV, scripts/temporal-cluster.sh); without them they
# skip, saying so.
#
# Environment: FUZZTIME (default 30s), RELIABILITY_RUN (a -run pattern that
# replaces the profile's), RELIABILITY_PARALLEL (default 8),
# CAUSET_RELIABILITY_ORDERINGS (e.g. "entity,none": the orderings to run,
# instead of the profile's), GO (default go). The last line of the output is
# exactly:
#
#   reliability: scenarios=<n> passed=<n> lost=<n> double_applied=<n> duplicate_workflows=<n>
#
# and the exit status is non-zero if any scenario failed.
set -uo pipefail

cd "$(dirname "$0")/.."
GO=${GO:-go}
FUZZTIME=${FUZZTIME:-30s}
PARALLEL=${RELIABILITY_PARALLEL:-8}
profile=full
case "${1:-}" in
  --short) profile=short ;;
  --full | "") profile=full ;;
  -h | --help) sed -n '2,/^set /{/^#/p}' "$0"; exit 0 ;;
  *) echo "usage: $0 [--short|--full]" >&2; exit 2 ;;
esac

# Which orderings each scenario runs is decided by the tests from the
# profile: in the short profile the default (entity), and both for 7.
if [[ $profile == short ]]; then
  run=${RELIABILITY_RUN:-'^TestReliability(1BridgeKill9|2WorkerKill9DuringBackoff|3PostgresOutage|7BadInput|9HotKey|10ReleaseDuringRebalance|11WritePathRelayKill9|12WritePathKafkaOutage|13WritePathPostgresOutage|14IncidentHold|15WritePathPoisonRow|16LongReader|17BridgePostgresBlackhole|18BridgeKafkaBlackhole|19WorkerTemporalBlackhole|20SlowLossyLinks|21OneWayPartition|22WritePathSilentLinks|23RolloutKill9|24SecuredKafka|25TemporalCluster|26RollingUpgrade)$'}
  timeout=50m
else
  run=${RELIABILITY_RUN:-'^TestReliability'}
  timeout=150m
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/causet-reliability.XXXXXX")
keep=false
# The subprocess logs (bridge, worker) of every scenario are kept when the
# run fails, for a post-mortem.
trap '[[ $keep == true ]] || rm -rf "$work"' EXIT
export CAUSET_RELIABILITY_LOGS=${CAUSET_RELIABILITY_LOGS:-$work/logs}
log="$work/reliability.log"
touch "$log"

say() { echo "$*" | tee -a "$log"; }

# scenario NAME CMD...: runs a go test command and records one RELIABILITY
# line for it (used for the fuzzers and the security tests, which have no
# lost/double-applied figures of their own).
scenario() {
  local name=$1; shift
  local start=$SECONDS out rc
  out="$work/$name.out"
  "$@" >"$out" 2>&1
  rc=$?
  tail -n 5 "$out"
  local passed=true
  [[ $rc -eq 0 ]] || passed=false
  [[ $passed == true ]] || tail -n 40 "$out"
  say "RELIABILITY scenario=$name passed=$passed lost=0 double_applied=0 duplicate_workflows=0 duration_s=$((SECONDS - start))"
}

say "== reliability profile=$profile"
say "== build bin/causet for the subprocesses"
if ! $GO build -o "$work/causet" ./cmd/causet; then
  say "reliability: scenarios=0 passed=0 lost=0 double_applied=0 duplicate_workflows=0"
  exit 1
fi

say "== scenario 7 (fuzz): FuzzDecode and FuzzValidate for $FUZZTIME each"
scenario fuzz_decode $GO test -run '^$' -fuzz '^FuzzDecode$' -fuzztime "$FUZZTIME" ./event/
scenario fuzz_validate $GO test -run '^$' -fuzz '^FuzzValidate$' -fuzztime "$FUZZTIME" ./projection/

if [[ $profile == full ]]; then
  say "== scenario 8 (security): existing tests in securitytest/, config/ (TLS, mTLS, SASL, API key, redaction)"
  scenario security $GO test -count=1 ./securitytest/ ./config/ \
    -run 'Secret|Injection|Kafka(TLS|MutualTLS|SASL)RoundTrip|KafkaSecurity|Temporal(TLSDial|EnvconfigOptions)'
fi

say "== scenarios: go test -run '$run' ./reliability/ (profile $profile)"
CAUSET_RELIABILITY=1 CAUSET_RELIABILITY_PROFILE=$profile CAUSET_BIN="$work/causet" \
  $GO test -count=1 -v -timeout "$timeout" -parallel "$PARALLEL" -run "$run" ./reliability/ 2>&1 | tee -a "$log"
rc=${PIPESTATUS[0]}

# Aggregate the RELIABILITY lines (the tests print each line twice: once in
# the test log, indented, once on stdout at column 0; count the latter).
summary=$(grep -E '^RELIABILITY scenario=' "$log" | awk '
  {
    n++
    for (i = 2; i <= NF; i++) {
      split($i, kv, "=")
      if (kv[1] == "passed" && kv[2] == "true") p++
      if (kv[1] == "lost") lost += kv[2]
      if (kv[1] == "double_applied") dbl += kv[2]
      if (kv[1] == "duplicate_workflows") dup += kv[2]
    }
  }
  END { printf "%d %d %d %d %d\n", n, p, lost, dbl, dup }')
read -r n passed lost dbl dup <<<"$summary"

echo
echo "== wall time ${SECONDS}s"
echo "== per scenario"
grep -E '^RELIABILITY scenario=' "$log" | sed 's/^RELIABILITY /  /'
status=0
if [[ $rc -ne 0 || $n -ne $passed || $n -eq 0 ]]; then
  status=1
  keep=true
  [[ $rc -ne 0 ]] && echo "go test exited with status $rc"
  echo "subprocess logs: $CAUSET_RELIABILITY_LOGS"
fi
echo "reliability: scenarios=$n passed=$passed lost=$lost double_applied=$dbl duplicate_workflows=$dup"
exit $status
