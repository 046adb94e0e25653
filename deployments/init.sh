#!/bin/sh
# One-shot init for docker-compose.yml (the `init` service), which every causet
# service waits for:
#   0. applies the pending schema migrations (causet migrate up): the processes
#      refuse to start against an older schema;
#   1. applies every table DDL file (*.sql) in CAUSET_PROJECTIONS_DIR with psql
#      (the example DDL uses CREATE TABLE IF NOT EXISTS, so re-running is safe);
#   2. deploys every IR document (*.yaml, *.yml) whose projection is not deployed yet,
#      so `docker compose up` again never replaces a version you deployed yourself;
#   3. likewise deploys every intent handler document in CAUSET_INTENTS_DIR whose intent
#      type is not deployed yet (for `causet runtime`).
# Environment: DATABASE_URL (required), CAUSET_PROJECTIONS_DIR (default /etc/causet/projections),
# CAUSET_INTENTS_DIR (default /etc/causet/intents).
set -eu

dir=${CAUSET_PROJECTIONS_DIR:-/etc/causet/projections}
intents_dir=${CAUSET_INTENTS_DIR:-/etc/causet/intents}
: "${DATABASE_URL:?DATABASE_URL must be set}"

causet migrate up

for f in "$dir"/*.sql; do
	[ -e "$f" ] || continue
	echo "init: applying $f"
	psql "$DATABASE_URL" -v ON_ERROR_STOP=1 -q -f "$f"
done

# NAME column of `causet projections list` (header and "no projections deployed" skipped).
deployed=$(causet projections list | awk 'NR > 1 && NF >= 2 { print $1 }')

todo=""
for f in "$dir"/*.yaml "$dir"/*.yml; do
	[ -e "$f" ] || continue
	name=$(sed -n 's/^name:[[:space:]]*"\{0,1\}\([A-Za-z0-9_]*\)"\{0,1\}[[:space:]]*$/\1/p' "$f" | head -n 1)
	if [ -n "$name" ] && printf '%s\n' "$deployed" | grep -qx "$name"; then
		echo "init: projection $name already deployed, skipping $f"
		continue
	fi
	todo="$todo $f"
done

if [ -n "$todo" ]; then
	# shellcheck disable=SC2086 # word splitting intended: file names have no spaces
	causet projections deploy $todo
fi

# INTENT TYPE column of `causet intents list`.
deployed=$(causet intents list | awk 'NR > 1 && NF >= 2 { print $1 }')

todo=""
for f in "$intents_dir"/*.yaml "$intents_dir"/*.yml; do
	[ -e "$f" ] || continue
	name=$(sed -n 's/^intent_type:[[:space:]]*"\{0,1\}\([A-Za-z0-9_]*\)"\{0,1\}[[:space:]]*$/\1/p' "$f" | head -n 1)
	if [ -n "$name" ] && printf '%s\n' "$deployed" | grep -qx "$name"; then
		echo "init: intent handler $name already deployed, skipping $f"
		continue
	fi
	todo="$todo $f"
done

if [ -n "$todo" ]; then
	# shellcheck disable=SC2086 # word splitting intended: file names have no spaces
	causet intents deploy $todo
fi
echo "init: done"
