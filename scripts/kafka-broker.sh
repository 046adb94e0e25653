#!/usr/bin/env bash
# kafka-broker.sh start|stop|status|restart
#
# Runs a single-node Apache Kafka (KRaft, broker+controller in one JVM) on
# 127.0.0.1 without Docker and without a Kafka distribution tarball: the jars
# come from Maven Central via `mvn dependency:copy-dependencies` into a
# gitignored cache (.cache/kafka/<version>/libs), so only Java 17+ and Maven are
# needed.
#
# Environment:
#   KAFKA_VERSION          Kafka version (default deployments/versions.env's, 4.1.1)
#   KAFKA_PORT             PLAINTEXT listener port (default 9092)
#   KAFKA_CONTROLLER_PORT  CONTROLLER listener port (default KAFKA_PORT+1)
#   KAFKA_HEAP_OPTS        JVM heap (default -Xms256m -Xmx512m)
#   KAFKA_START_TIMEOUT    seconds to wait for the broker (default 90)
#   KAFKA_SECURE_PORT      SASL_SSL listener port (default KAFKA_PORT+2)
#
# The broker stores its data in a fresh temp dir that `stop` removes, so every
# start is a clean cluster. Clients use KAFKA_BROKERS=127.0.0.1:$KAFKA_PORT.
#
# Two listeners for clients:
#   PLAINTEXT on KAFKA_PORT        no authentication; its principal (ANONYMOUS)
#                                  is a super user: for tests that set up
#                                  topics and for local development only.
#   SASL_SSL on KAFKA_SECURE_PORT  TLS with a certificate from a CA made at
#                                  start, SCRAM-SHA-512 users made at start,
#                                  and the StandardAuthorizer: a principal may
#                                  do what its ACLs allow and nothing else (no
#                                  ACL: refused). Users: admin (super user),
#                                  causet-bridge, causet-worker, causet-relay,
#                                  causet-ops, causet-bench (the benchmark's),
#                                  each with a random password.
# start writes what a client of the SASL_SSL listener needs to
# .cache/kafka/run-$KAFKA_PORT/secure.env (its brokers, CA file and the
# users' passwords, and the PLAINTEXT listener for a test harness) and prints
# KAFKA_SECURE_ENV=<that file>.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# The default version of every stack here (deployments/versions.env).
KAFKA_VERSION="${KAFKA_VERSION:-$(sed -n 's/^KAFKA_VERSION=//p' "$ROOT/deployments/versions.env")}"
LOG4J_VERSION="${LOG4J_VERSION:-2.24.3}"
SLF4J_VERSION="${SLF4J_VERSION:-2.0.17}"
KAFKA_PORT="${KAFKA_PORT:-9092}"
KAFKA_CONTROLLER_PORT="${KAFKA_CONTROLLER_PORT:-$((KAFKA_PORT + 1))}"
KAFKA_HEAP_OPTS="${KAFKA_HEAP_OPTS:--Xms256m -Xmx512m}"
KAFKA_START_TIMEOUT="${KAFKA_START_TIMEOUT:-90}"
KAFKA_SECURE_PORT="${KAFKA_SECURE_PORT:-$((KAFKA_PORT + 2))}"
SECURE_USERS=(admin causet-bridge causet-worker causet-relay causet-ops causet-bench)

CACHE="$ROOT/.cache/kafka/$KAFKA_VERSION"
LIBS="$CACHE/libs"
RUN="$ROOT/.cache/kafka/run-$KAFKA_PORT"
PIDFILE="$RUN/kafka.pid"
LOGFILE="$RUN/kafka.log"
DATADIR_FILE="$RUN/datadir"
TLS_DIR="$RUN/tls"
SECURE_ENV="$RUN/secure.env"

log() { printf 'kafka-broker: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

need() { command -v "$1" >/dev/null 2>&1 || die "$1 not found on PATH ($2)"; }

fetch_jars() {
	if [[ -f "$LIBS/.complete" ]]; then
		return
	fi
	need java "install a Java 17+ JRE"
	need mvn "install Apache Maven 3.8+"
	log "fetching Kafka $KAFKA_VERSION jars from Maven Central into $LIBS (first run only)"
	mkdir -p "$CACHE"
	rm -rf "$LIBS"
	cat >"$CACHE/pom.xml" <<POM
<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0"
         xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
         xsi:schemaLocation="http://maven.apache.org/POM/4.0.0 http://maven.apache.org/xsd/maven-4.0.0.xsd">
  <modelVersion>4.0.0</modelVersion>
  <groupId>local.causet</groupId>
  <artifactId>kafka-broker-libs</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.slf4j</groupId>
      <artifactId>slf4j-api</artifactId>
      <version>$SLF4J_VERSION</version>
    </dependency>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka_2.13</artifactId>
      <version>$KAFKA_VERSION</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-slf4j2-impl</artifactId>
      <version>$LOG4J_VERSION</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-core</artifactId>
      <version>$LOG4J_VERSION</version>
    </dependency>
  </dependencies>
  <build>
    <plugins>
      <plugin>
        <groupId>org.apache.maven.plugins</groupId>
        <artifactId>maven-dependency-plugin</artifactId>
        <version>3.8.1</version>
      </plugin>
    </plugins>
  </build>
</project>
POM
	if ! mvn -q -B -f "$CACHE/pom.xml" dependency:copy-dependencies \
		-DincludeScope=runtime -DoutputDirectory="$LIBS" >"$CACHE/mvn.log" 2>&1; then
		tail -n 40 "$CACHE/mvn.log" >&2
		die "mvn could not fetch org.apache.kafka:kafka_2.13:$KAFKA_VERSION (set KAFKA_VERSION to another 4.x release?)"
	fi
	touch "$LIBS/.complete"
}

is_running() {
	[[ -f "$PIDFILE" ]] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null
}

port_open() {
	(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# make_tls makes a CA and the broker's certificate (127.0.0.1 and localhost),
# valid for two days, and the broker's PKCS12 keystore; the password is $1.
make_tls() {
	local pass=$1
	need openssl "install OpenSSL"
	rm -rf "$TLS_DIR"
	mkdir -p "$TLS_DIR"
	(
		cd "$TLS_DIR"
		openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 -subj "/CN=causet test CA" 2>/dev/null
		openssl req -newkey rsa:2048 -nodes -keyout broker.key -out broker.csr -subj "/CN=localhost" 2>/dev/null
		printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' >broker.ext
		openssl x509 -req -in broker.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out broker.pem -days 2 -extfile broker.ext 2>/dev/null
		openssl pkcs12 -export -in broker.pem -inkey broker.key -certfile ca.pem -name broker -out broker.p12 -passout "pass:$pass"
		rm -f ca.key broker.csr broker.ext ca.srl
	) || die "making the TLS certificates failed"
}

# random_password prints 32 hex characters.
random_password() { openssl rand -hex 16; }

write_config() {
	local datadir=$1 keystore_pass=$2
	cat >"$RUN/server.properties" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$KAFKA_CONTROLLER_PORT
listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT,CONTROLLER://127.0.0.1:$KAFKA_CONTROLLER_PORT,SASL_SSL://127.0.0.1:$KAFKA_SECURE_PORT
advertised.listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT,SASL_SSL://127.0.0.1:$KAFKA_SECURE_PORT
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL
inter.broker.listener.name=PLAINTEXT
sasl.enabled.mechanisms=SCRAM-SHA-512
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.ssl.keystore.type=PKCS12
listener.name.sasl_ssl.ssl.keystore.location=$TLS_DIR/broker.p12
listener.name.sasl_ssl.ssl.keystore.password=$keystore_pass
listener.name.sasl_ssl.ssl.key.password=$keystore_pass
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=User:admin;User:ANONYMOUS
log.dirs=$datadir
num.partitions=3
default.replication.factor=1
auto.create.topics.enable=true
offsets.topic.replication.factor=1
offsets.topic.num.partitions=3
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=3
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
log.segment.bytes=16777216
PROPS
	cat >"$RUN/log4j2.properties" <<'L4J'
status = warn
appender.out.type = Console
appender.out.name = STDOUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = STDOUT
logger.kafka.name = kafka
logger.kafka.level = INFO
logger.state.name = state.change.logger
logger.state.level = WARN
logger.request.name = kafka.request.logger
logger.request.level = WARN
logger.zk.name = org.apache.kafka.raft
logger.zk.level = WARN
L4J
}

java_cmd() {
	# shellcheck disable=SC2086
	java $KAFKA_HEAP_OPTS -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -Djava.awt.headless=true \
		-Dlog4j2.configurationFile="$RUN/log4j2.properties" \
		-cp "$LIBS/*" "$@"
}

start() {
	if is_running; then
		log "already running (pid $(cat "$PIDFILE")) on 127.0.0.1:$KAFKA_PORT"
		return 0
	fi
	if port_open "$KAFKA_PORT"; then
		die "port $KAFKA_PORT is already in use by another process (set KAFKA_PORT)"
	fi
	if port_open "$KAFKA_SECURE_PORT"; then
		die "port $KAFKA_SECURE_PORT is already in use by another process (set KAFKA_SECURE_PORT)"
	fi
	fetch_jars
	local t0=$SECONDS
	mkdir -p "$RUN"
	rm -f "$PIDFILE"
	local datadir
	datadir="$(mktemp -d "${TMPDIR:-/tmp}/causet-kafka.XXXXXX")"
	echo "$datadir" >"$DATADIR_FILE"
	local keystore_pass
	keystore_pass="$(random_password)"
	make_tls "$keystore_pass"
	write_config "$datadir" "$keystore_pass"
	# SCRAM credentials are written into the cluster's metadata as it is
	# formatted; their passwords go to secure.env (readable by its owner only).
	local -a scram=()
	(
		umask 077
		{
			echo "KAFKA_SECURE_BROKERS=127.0.0.1:$KAFKA_SECURE_PORT"
			echo "KAFKA_PLAINTEXT_BROKERS=127.0.0.1:$KAFKA_PORT"
			echo "KAFKA_SECURE_CA_FILE=$TLS_DIR/ca.pem"
			echo "KAFKA_SECURE_MECHANISM=SCRAM-SHA-512"
		} >"$SECURE_ENV"
	)
	local user pass var
	for user in "${SECURE_USERS[@]}"; do
		pass="$(random_password)"
		scram+=(--add-scram "SCRAM-SHA-512=[name=$user,password=$pass]")
		var="${user#causet-}"
		echo "KAFKA_SECURE_PASSWORD_${var^^}=$pass" >>"$SECURE_ENV"
	done
	local cluster_id
	# A URL-safe base64 ID may start with '-', which the tool's argument parser
	# takes for an option; Kafka's own IDs never do, so draw again until it doesn't.
	cluster_id="-"
	while [[ $cluster_id == -* ]]; do
		cluster_id="$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')"
	done
	if ! java_cmd kafka.tools.StorageTool format --cluster-id="$cluster_id" -c "$RUN/server.properties" "${scram[@]}" >"$RUN/format.log" 2>&1; then
		cat "$RUN/format.log" >&2
		die "formatting storage failed"
	fi
	: >"$LOGFILE"
	# setsid: own process group, survives the calling shell, killable as a group.
	setsid bash -c 'exec "$@"' _ java $KAFKA_HEAP_OPTS -XX:+UseG1GC -XX:MaxGCPauseMillis=20 \
		-Djava.awt.headless=true -Dlog4j2.configurationFile="$RUN/log4j2.properties" \
		-cp "$LIBS/*" kafka.Kafka "$RUN/server.properties" >>"$LOGFILE" 2>&1 </dev/null &
	echo $! >"$PIDFILE"
	local deadline=$((SECONDS + KAFKA_START_TIMEOUT))
	while ((SECONDS < deadline)); do
		if ! is_running; then
			tail -n 60 "$LOGFILE" >&2
			die "broker exited during start-up (log: $LOGFILE)"
		fi
		if port_open "$KAFKA_PORT" && port_open "$KAFKA_SECURE_PORT" && grep -q 'Kafka Server started' "$LOGFILE"; then
			log "started Kafka $KAFKA_VERSION (pid $(cat "$PIDFILE")) on 127.0.0.1:$KAFKA_PORT (PLAINTEXT) and 127.0.0.1:$KAFKA_SECURE_PORT (SASL_SSL) in $((SECONDS - t0))s; log: $LOGFILE"
			echo "KAFKA_BROKERS=127.0.0.1:$KAFKA_PORT"
			echo "KAFKA_SECURE_ENV=$SECURE_ENV"
			return 0
		fi
		sleep 0.5
	done
	tail -n 60 "$LOGFILE" >&2
	stop || true
	die "broker did not become ready within ${KAFKA_START_TIMEOUT}s (log above)"
}

stop() {
	if [[ -f "$PIDFILE" ]]; then
		local pid
		pid="$(cat "$PIDFILE")"
		if kill -0 "$pid" 2>/dev/null; then
			log "stopping pid $pid"
			kill -TERM "$pid" 2>/dev/null || true
			for _ in $(seq 1 100); do
				kill -0 "$pid" 2>/dev/null || break
				sleep 0.2
			done
			if kill -0 "$pid" 2>/dev/null; then
				log "pid $pid still alive after 20s, sending SIGKILL"
				kill -KILL "$pid" 2>/dev/null || true
				for _ in $(seq 1 50); do
					kill -0 "$pid" 2>/dev/null || break
					sleep 0.1
				done
			fi
		fi
		rm -f "$PIDFILE"
	fi
	if [[ -f "$DATADIR_FILE" ]]; then
		local d
		d="$(cat "$DATADIR_FILE")"
		case "$d" in
		*/causet-kafka.*) rm -rf "$d" ;;
		esac
		rm -f "$DATADIR_FILE"
	fi
	rm -rf "$TLS_DIR" "$SECURE_ENV"
	log "stopped"
}

status() {
	if is_running; then
		echo "running pid $(cat "$PIDFILE") on 127.0.0.1:$KAFKA_PORT (Kafka $KAFKA_VERSION)"
		return 0
	fi
	echo "not running"
	return 1
}

case "${1:-}" in
start) start ;;
stop) stop ;;
status) status ;;
restart)
	stop
	start
	;;
fetch) fetch_jars ;;
*)
	echo "usage: $0 start|stop|status|restart|fetch" >&2
	exit 2
	;;
esac
