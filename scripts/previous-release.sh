#!/usr/bin/env bash
# Builds the `causet` binary of a recorded release from its commit, for the
# rolling-upgrade test (reliability scenario 26), and prints its path.
#
#   scripts/previous-release.sh            the newest release recorded in
#                                          internal/release/releases.tsv whose
#                                          commit is not HEAD's
#   scripts/previous-release.sh 0.1.0      that release
#
# The source is the release's commit (git archive: the clone is left as it
# is), built with the release's own go.mod and stamped as make release
# stamps it (releases before 0.2.0 have no `causet version`). The binary is
# kept in .cache/releases/<version>/ and built again only when missing or
# not of that commit.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

releases=internal/release/releases.tsv
head=$(git rev-parse HEAD)
if [[ $# -gt 0 ]]; then
	version=$1
	commit=$(awk -F'\t' -v v="$version" '!/^#/ && $1 == v {print $2}' "$releases")
	if [[ -z "$commit" ]]; then
		echo "previous-release: $version is not recorded in $releases" >&2
		exit 1
	fi
else
	read -r version commit < <(awk -F'\t' -v h="$head" '!/^#/ && NF == 3 && $2 != h {v = $1; c = $2} END {print v, c}' "$releases")
	if [[ -z "$version" ]]; then
		echo "previous-release: $releases records no release before HEAD" >&2
		exit 1
	fi
fi
if ! git cat-file -e "$commit^{commit}" 2>/dev/null; then
	echo "previous-release: $version's commit $commit is not in this clone (a shallow clone? git fetch --unshallow)" >&2
	exit 1
fi

out=$PWD/.cache/releases/$version
bin=$out/causet
if [[ -x "$bin" && "$(cat "$out/commit" 2>/dev/null)" == "$commit" ]]; then
	echo "$bin"
	exit 0
fi
rm -rf "$out"
mkdir -p "$out/src"
git archive "$commit" | tar -x -C "$out/src"
pkg=github.com/causet/projection-retry/internal/release
date=$(git show -s --format=%cI "$commit")
echo "previous-release: building causet $version from $commit" >&2
(cd "$out/src" && go build -trimpath -buildvcs=false \
	-ldflags "-X $pkg.Version=$version -X $pkg.Commit=$commit -X $pkg.Date=$date" \
	-o "$bin" ./cmd/causet) >&2
rm -rf "$out/src"
echo "$commit" >"$out/commit"
echo "$bin"
