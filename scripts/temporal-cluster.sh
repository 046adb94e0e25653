#!/usr/bin/env bash
# temporal-cluster.sh build|start|stop|status|kill|start-service|restart SERVICE
#
# A production-shaped Temporal server on 127.0.0.1 without Docker: the
# server of go.temporal.io/server (the version the pinned temporal CLI
# embeds), built into ./bin by `build`; PostgreSQL persistence and
# PostgreSQL (SQL) visibility in a PostgreSQL cluster of its own, schemas set
# up by the server's own temporal-sql-tool; TEMPORAL_CLUSTER_SHARDS history
# shards; frontend, history, matching and worker as four processes. The
# namespace, its retention and the project's search attributes are made with
# `temporal operator` (bin/temporal, `make tools`), as a production user
# would (deployments/README.md, "Beside an existing Temporal cluster").
#
#   build                  bin/temporal-server and bin/temporal-sql-tool
#   start                  PostgreSQL, schemas, the four services, namespace
#   stop                   everything start started; its data is removed
#   status                 which services run
#   kill SERVICE           kill -9 one service (frontend|history|matching|worker)
#   start-service SERVICE  start one service again
#   restart SERVICE        stop one service (SIGTERM) and start it again
#
# Environment:
#   TEMPORAL_SERVER_VERSION     default deployments/versions.env's (v1.29.1)
#   TEMPORAL_CLUSTER_PORT       frontend gRPC port (default 17233); history,
#                               matching and worker use +1, +2, +6; the
#                               frontend's HTTP API +10; each service's
#                               Prometheus metrics its gRPC port +50;
#                               membership +100...
#   TEMPORAL_CLUSTER_PG_PORT    its PostgreSQL (default 15433)
#   TEMPORAL_CLUSTER_SHARDS     history shards (default 4)
#   TEMPORAL_CLUSTER_NAMESPACE  namespace made at start (default causet)
#
# start prints TEMPORAL_ADDRESS=127.0.0.1:<port>, TEMPORAL_NAMESPACE=<ns> and
# TEMPORAL_CLUSTER_ENV=<a file with both, the port, the services' metrics
# URLs and their pid files>, for the tests and the bench.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# The default versions of every stack here (deployments/versions.env).
pinned() { sed -n "s/^$1=//p" "$ROOT/deployments/versions.env"; }
VERSION="${TEMPORAL_SERVER_VERSION:-v$(pinned TEMPORAL_SERVER_VERSION)}"
PORT="${TEMPORAL_CLUSTER_PORT:-17233}"
PG_PORT="${TEMPORAL_CLUSTER_PG_PORT:-15433}"
SHARDS="${TEMPORAL_CLUSTER_SHARDS:-4}"
NAMESPACE="${TEMPORAL_CLUSTER_NAMESPACE:-causet}"
SERVICES=(frontend history matching worker)

BIN="$ROOT/bin"
SERVER="$BIN/temporal-server"
SQL_TOOL="$BIN/temporal-sql-tool"
CLI="$BIN/temporal"
RUN="$ROOT/.cache/temporal-cluster/run-$PORT"
PGDATA_FILE="$RUN/pgdata"

log() { printf 'temporal-cluster: %s\n' "$*" >&2; }
die() {
	log "$*"
	exit 1
}

grpc_port() {
	case $1 in
	frontend) echo "$PORT" ;;
	history) echo $((PORT + 1)) ;;
	matching) echo $((PORT + 2)) ;;
	worker) echo $((PORT + 6)) ;;
	*) die "unknown service $1 (frontend|history|matching|worker)" ;;
	esac
}
membership_port() { echo $(($(grpc_port "$1") + 100)); }
# Each service serves its Prometheus metrics on its gRPC port + 50.
metrics_port() { echo $(($(grpc_port "$1") + 50)); }
metrics_urls() {
	local s urls=()
	for s in "${SERVICES[@]}"; do
		urls+=("http://127.0.0.1:$(metrics_port "$s")/metrics")
	done
	local IFS=,
	echo "${urls[*]}"
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

build() {
	local have
	have="$(go version -m "$SERVER" 2>/dev/null | awk '$1 == "mod" && $2 == "go.temporal.io/server" { print $3 }')" || true
	if [[ $have == "$VERSION" && -x $SQL_TOOL ]]; then
		log "temporal-server $VERSION already in ./bin"
		return
	fi
	log "building temporal-server and temporal-sql-tool $VERSION into ./bin (a few minutes on a cold cache)"
	local tmp
	tmp="$(mktemp -d)"
	GOBIN="$tmp" go install "go.temporal.io/server/cmd/server@$VERSION" "go.temporal.io/server/cmd/tools/sql@$VERSION"
	mkdir -p "$BIN"
	mv "$tmp/server" "$SERVER"
	mv "$tmp/sql" "$SQL_TOOL"
	rmdir "$tmp"
}

# as_postgres runs a command as the postgres system user when root (the
# server refuses to run as root).
as_postgres() {
	if ((EUID == 0)); then
		runuser -u postgres -- "$@"
	else
		"$@"
	fi
}

start_postgres() {
	local data
	data="$(mktemp -d "${TMPDIR:-/tmp}/causet-temporal-pg.XXXXXX")"
	echo "$data" >"$PGDATA_FILE"
	if ((EUID == 0)); then
		chown postgres: "$data"
	fi
	as_postgres initdb -D "$data/db" -U postgres --auth=trust -E UTF8 >"$RUN/initdb.log" 2>&1 ||
		{
			cat "$RUN/initdb.log" >&2
			die "initdb failed"
		}
	as_postgres pg_ctl -D "$data/db" -l "$data/postgres.log" -w -t 60 \
		-o "-p $PG_PORT -k $data -c listen_addresses=127.0.0.1 -c max_connections=300 -c fsync=off -c synchronous_commit=off" \
		start >/dev/null || {
		tail -n 30 "$data/postgres.log" >&2
		die "PostgreSQL did not start on 127.0.0.1:$PG_PORT"
	}
}


# The schemas and the namespace are made by deployments/temporal-setup.sh,
# the steps compose and deployments/README.md follow too.
setup_schemas() {
	SQL_TOOL="$SQL_TOOL" SQL_HOST=127.0.0.1 SQL_PORT="$PG_PORT" SQL_USER=postgres \
		"$ROOT/deployments/temporal-setup.sh" schema >>"$RUN/schema.log" 2>&1 || {
		tail -n 30 "$RUN/schema.log" >&2
		die "setting up the schemas failed"
	}
}

write_config() {
	mkdir -p "$RUN/config"
	: >"$RUN/config/dynamicconfig.yaml"
	local ds
	cat >"$RUN/config/production.yaml" <<YAML
log:
  stdout: true
  level: warn
persistence:
  defaultStore: postgres-default
  visibilityStore: postgres-visibility
  numHistoryShards: $SHARDS
  datastores:
YAML
	for ds in default:temporal:20 visibility:temporal_visibility:10; do
		IFS=: read -r name db conns <<<"$ds"
		cat >>"$RUN/config/production.yaml" <<YAML
    postgres-$name:
      sql:
        pluginName: postgres12
        databaseName: $db
        connectAddr: "127.0.0.1:$PG_PORT"
        connectProtocol: tcp
        user: postgres
        password: ""
        maxConns: $conns
        maxIdleConns: $conns
        maxConnLifetime: 1h
YAML
	done
	cat >>"$RUN/config/production.yaml" <<YAML
global:
  membership:
    maxJoinDuration: 30s
    broadcastAddress: "127.0.0.1"
services:
YAML
	local s
	for s in "${SERVICES[@]}"; do
		cat >>"$RUN/config/production.yaml" <<YAML
  $s:
    rpc:
      grpcPort: $(grpc_port "$s")
      membershipPort: $(membership_port "$s")
      bindOnLocalHost: true
YAML
		if [[ $s == frontend ]]; then
			echo "      httpPort: $((PORT + 10))" >>"$RUN/config/production.yaml"
		fi
	done
	cat >>"$RUN/config/production.yaml" <<YAML
clusterMetadata:
  enableGlobalNamespace: false
  failoverVersionIncrement: 10
  masterClusterName: active
  currentClusterName: active
  clusterInformation:
    active:
      enabled: true
      initialFailoverVersion: 1
      rpcName: frontend
      rpcAddress: "127.0.0.1:$PORT"
      httpAddress: "127.0.0.1:$((PORT + 10))"
dcRedirectionPolicy:
  policy: noop
dynamicConfigClient:
  filepath: "$RUN/config/dynamicconfig.yaml"
  pollInterval: 10s
YAML
	# The services share production.yaml; each one's zone file (--zone)
	# adds its metrics endpoint, as the dev server's: histograms in seconds.
	for s in "${SERVICES[@]}"; do
		cat >"$RUN/config/production_$s.yaml" <<YAML
global:
  metrics:
    prometheus:
      timerType: histogram
      listenAddress: "127.0.0.1:$(metrics_port "$s")"
YAML
	done
}

pidfile() { echo "$RUN/$1.pid"; }

running() {
	local f
	f="$(pidfile "$1")"
	[[ -f $f ]] && kill -0 "$(cat "$f")" 2>/dev/null
}

start_service() {
	local s=$1
	running "$s" && {
		log "$s already running (pid $(cat "$(pidfile "$s")"))"
		return
	}
	# setsid: a process group of its own, killable as one, outliving this shell.
	setsid "$SERVER" --root "$RUN" --config config --env production --zone "$s" --allow-no-auth start --service "$s" \
		>>"$RUN/$s.log" 2>&1 </dev/null &
	echo $! >"$(pidfile "$s")"
	# The worker service serves no gRPC: its membership port says it is up.
	local port deadline=$((SECONDS + 60))
	port="$(grpc_port "$s")"
	[[ $s == worker ]] && port="$(membership_port "$s")"
	until port_open "$port"; do
		if ! running "$s"; then
			tail -n 30 "$RUN/$s.log" >&2
			die "$s exited during start-up (log: $RUN/$s.log)"
		fi
		((SECONDS < deadline)) || die "$s did not listen on $port within 60s (log: $RUN/$s.log)"
		sleep 0.2
	done
}

restart_service() {
	local s=$1 i
	grpc_port "$s" >/dev/null
	if running "$s"; then
		kill -TERM "$(cat "$(pidfile "$s")")" 2>/dev/null || true
		for i in $(seq 1 300); do
			running "$s" || break
			sleep 0.1
		done
		running "$s" && kill_service "$s"
	fi
	rm -f "$(pidfile "$s")"
	start_service "$s"
	log "restarted $s"
}

kill_service() {
	local s=$1
	grpc_port "$s" >/dev/null
	if running "$s"; then
		local pid i
		pid="$(cat "$(pidfile "$s")")"
		kill -KILL "$pid" 2>/dev/null || true
		# Gone before this returns: its ports free for the next one.
		for i in $(seq 1 100); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.05
		done
		log "killed $s (kill -9)"
	fi
	rm -f "$(pidfile "$s")"
}

setup_namespace() {
	TEMPORAL_CLI="$CLI" TEMPORAL_ADDRESS="127.0.0.1:$PORT" TEMPORAL_NAMESPACE="$NAMESPACE" TEMPORAL_RETENTION=72h \
		"$ROOT/deployments/temporal-setup.sh" namespace >>"$RUN/operator.log" 2>&1 || {
		tail -n 20 "$RUN/operator.log" >&2
		die "setting up namespace $NAMESPACE failed (log: $RUN/operator.log)"
	}
}

start() {
	[[ -x $SERVER && -x $SQL_TOOL ]] || build
	[[ -x $CLI ]] || die "bin/temporal is missing: run make tools"
	if running frontend; then
		log "already running on 127.0.0.1:$PORT"
		return
	fi
	local s p
	for s in "${SERVICES[@]}"; do
		for p in "$(grpc_port "$s")" "$(membership_port "$s")" "$(metrics_port "$s")"; do
			port_open "$p" && die "port $p is in use (set TEMPORAL_CLUSTER_PORT)"
		done
	done
	port_open "$PG_PORT" && die "port $PG_PORT is in use (set TEMPORAL_CLUSTER_PG_PORT)"
	local t0=$SECONDS
	rm -rf "$RUN"
	mkdir -p "$RUN"
	start_postgres
	setup_schemas
	write_config
	# History first: the others wait for its shards to be owned.
	for s in history matching frontend worker; do
		start_service "$s"
	done
	setup_namespace
	log "started Temporal $VERSION (frontend, history, matching, worker; $SHARDS shards; PostgreSQL persistence and visibility on 127.0.0.1:$PG_PORT) in $((SECONDS - t0))s; logs: $RUN"
	{
		echo "TEMPORAL_ADDRESS=127.0.0.1:$PORT"
		echo "TEMPORAL_NAMESPACE=$NAMESPACE"
		echo "TEMPORAL_CLUSTER_PORT=$PORT"
		echo "TEMPORAL_CLUSTER_METRICS=$(metrics_urls)"
		echo "TEMPORAL_CLUSTER_PGDATA=$(cat "$PGDATA_FILE")/db"
		echo "TEMPORAL_CLUSTER_PIDFILES=$(for s in "${SERVICES[@]}"; do printf '%s,' "$(pidfile "$s")"; done | sed 's/,$//')"
	} >"$RUN/cluster.env"
	echo "TEMPORAL_ADDRESS=127.0.0.1:$PORT"
	echo "TEMPORAL_NAMESPACE=$NAMESPACE"
	echo "TEMPORAL_CLUSTER_ENV=$RUN/cluster.env"
}

stop() {
	local s
	for s in "${SERVICES[@]}"; do
		if running "$s"; then
			kill -TERM "$(cat "$(pidfile "$s")")" 2>/dev/null || true
		fi
	done
	for s in "${SERVICES[@]}"; do
		local i
		for i in $(seq 1 100); do
			running "$s" || break
			sleep 0.1
		done
		kill_service "$s" 2>/dev/null
	done
	if [[ -f $PGDATA_FILE ]]; then
		local data
		data="$(cat "$PGDATA_FILE")"
		if [[ -d $data/db ]]; then
			as_postgres pg_ctl -D "$data/db" -m immediate -w stop >/dev/null 2>&1 || true
		fi
		case "$data" in
		*/causet-temporal-pg.*) rm -rf "$data" ;;
		esac
		rm -f "$PGDATA_FILE"
	fi
	log "stopped"
}

status() {
	local s rc=0
	for s in "${SERVICES[@]}"; do
		if running "$s"; then
			echo "$s running (pid $(cat "$(pidfile "$s")")) on 127.0.0.1:$(grpc_port "$s")"
		else
			echo "$s not running"
			rc=1
		fi
	done
	return $rc
}

case "${1:-}" in
build) build ;;
start) start ;;
stop) stop ;;
status) status ;;
kill) kill_service "${2:?usage: $0 kill SERVICE}" ;;
start-service) start_service "${2:?usage: $0 start-service SERVICE}" ;;
restart) restart_service "${2:?usage: $0 restart SERVICE}" ;;
*)
	echo "usage: $0 build|start|stop|status|kill SERVICE|start-service SERVICE|restart SERVICE" >&2
	exit 2
	;;
esac
