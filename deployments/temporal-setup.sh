#!/bin/sh
# temporal-setup.sh schema|namespace
#
# What a self-hosted Temporal on PostgreSQL needs before Causet runs beside
# it, the same steps wherever it runs: scripts/temporal-cluster.sh (the
# cluster CI runs), docker-compose.cluster.yml (in the admin-tools image) and
# deployments/README.md ("The procedure CI follows"). Both steps can be run
# again on a set-up server and change nothing.
#
#   schema     the persistence and visibility databases and schemas, with the
#              server's temporal-sql-tool
#   namespace  the namespace and Causet's search attributes, with the
#              temporal CLI as an administrator (waits for the frontend)
#
# Environment:
#   SQL_HOST, SQL_PORT, SQL_USER, SQL_PASSWORD   PostgreSQL (schema)
#   TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE          the frontend (namespace)
#   TEMPORAL_RETENTION                            default 72h
#   SQL_TOOL, TEMPORAL_CLI                        the binaries (default: on PATH)
#   TEMPORAL_SETUP_WAIT                           seconds to wait for the frontend (default 90)
set -eu

SQL_TOOL="${SQL_TOOL:-temporal-sql-tool}"
TEMPORAL_CLI="${TEMPORAL_CLI:-temporal}"

schema() {
	for db in temporal temporal_visibility; do
		name=temporal
		[ "$db" = temporal_visibility ] && name=visibility
		set -- --plugin postgres12 --ep "${SQL_HOST:?}" -p "${SQL_PORT:-5432}" -u "${SQL_USER:?}" --db "$db"
		[ -n "${SQL_PASSWORD:-}" ] && set -- "$@" --pw "$SQL_PASSWORD"
		# A database set up before only takes the updates since.
		if ! "$SQL_TOOL" "$@" update-schema --schema-name "postgresql/v12/$name" >/dev/null 2>&1; then
			"$SQL_TOOL" "$@" create-database
			"$SQL_TOOL" "$@" setup-schema -v 0.0
			"$SQL_TOOL" "$@" update-schema --schema-name "postgresql/v12/$name"
		fi
		echo "temporal-setup: schema of $db is current"
	done
}

# retry WHAT CMD...: runs CMD once a second until it succeeds, within
# TEMPORAL_SETUP_WAIT seconds of the namespace step in all.
retry() {
	what=$1
	shift
	until "$@"; do
		[ "$waited" -lt "${TEMPORAL_SETUP_WAIT:-90}" ] || {
			echo "temporal-setup: $what after ${waited}s" >&2
			exit 1
		}
		sleep 1
		waited=$((waited + 1))
	done
}

namespace() {
	ns="${TEMPORAL_NAMESPACE:?}"
	t() { "$TEMPORAL_CLI" --address "${TEMPORAL_ADDRESS:?}" "$@"; }
	healthy() { t operator cluster health >/dev/null 2>&1; }
	registered() {
		t operator namespace describe --namespace "$ns" >/dev/null 2>&1 ||
			t operator namespace create --namespace "$ns" --retention "${TEMPORAL_RETENTION:-72h}"
	}
	known() { t operator search-attribute list --namespace "$ns" >/dev/null 2>&1; }
	waited=0
	retry "the frontend at $TEMPORAL_ADDRESS is not healthy" healthy
	# The frontend may answer before the namespace registry is ready, and a
	# namespace just registered is not known to every frontend at once.
	retry "creating namespace $ns failed" registered
	retry "namespace $ns is not found" known
	# Causet's search attributes (CONTRACT §6): `causet worker` prints these
	# lines when its credentials cannot create them. Creating one that
	# exists with the same type changes nothing.
	for sa in CausetProjection CausetEventType CausetEntityId CausetForkId CausetRetryState CausetIncidentState CausetError; do
		t operator search-attribute create --namespace "$ns" --name "$sa" --type Keyword
	done
	for sa in CausetRolloutAffected CausetRolloutApplied CausetRolloutFailing; do
		t operator search-attribute create --namespace "$ns" --name "$sa" --type Int
	done
	echo "temporal-setup: namespace $ns with Causet's search attributes"
}

case "${1:-}" in
schema) schema ;;
namespace) namespace ;;
*)
	echo "usage: temporal-setup.sh schema|namespace" >&2
	exit 2
	;;
esac
