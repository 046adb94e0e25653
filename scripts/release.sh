#!/usr/bin/env bash
# Builds the release artifacts of the checked-out commit into dist/<version>/
# with the Go toolchain alone (cross-compiled static binaries need nothing
# else), and nothing is published:
#
#   causet_linux_amd64, causet_linux_arm64   static (CGO_ENABLED=0), stamped
#                                            with version, commit and date
#   SHA256SUMS                               sha256sum -c SHA256SUMS checks them
#   causet.cdx.json                          CycloneDX SBOM of the binary's modules
#                                            (cyclonedx-gomod, pinned below)
#   the container image causet:<version>     only where docker runs ('+' in a
#                                            version becomes '-' in its tag)
#
# VERSION is the release recorded for HEAD in internal/release/releases.tsv,
# else "<last release>+dev.<commit>"; set VERSION to cut a new release (then
# record it in releases.tsv and CHANGELOG.md). Each binary is run once
# (`causet version`) to check its stamp.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

CYCLONEDX_GOMOD_VERSION=v1.10.0
releases=internal/release/releases.tsv
commit=$(git rev-parse HEAD)
if [[ -n "$(git status --porcelain --untracked-files=no)" ]]; then
	echo "release: the tree has changes not committed; commit them first" >&2
	exit 1
fi
if [[ -z "${VERSION:-}" ]]; then
	VERSION=$(awk -F'\t' -v c="$commit" '!/^#/ && $2 == c {print $1}' "$releases")
	if [[ -z "$VERSION" ]]; then
		last=$(awk -F'\t' '!/^#/ && NF == 3 {v = $1} END {print v}' "$releases")
		VERSION="$last+dev.${commit:0:12}"
	fi
fi
date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
out=dist/$VERSION
rm -rf "$out"
mkdir -p "$out"
pkg=github.com/causet/projection-retry/internal/release
ldflags="-s -w -X $pkg.Version=$VERSION -X $pkg.Commit=$commit -X $pkg.Date=$date"

for arch in amd64 arm64; do
	echo "release: causet_linux_$arch"
	CGO_ENABLED=0 GOOS=linux GOARCH=$arch go build -trimpath -buildvcs=false -ldflags "$ldflags" \
		-o "$out/causet_linux_$arch" ./cmd/causet
done
(cd "$out" && sha256sum causet_linux_amd64 causet_linux_arm64 > SHA256SUMS)

if [[ ! -x bin/cyclonedx-gomod ]]; then
	echo "release: cyclonedx-gomod $CYCLONEDX_GOMOD_VERSION into ./bin"
	GOBIN="$PWD/bin" go install "github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod@$CYCLONEDX_GOMOD_VERSION"
fi
bin/cyclonedx-gomod app -json -licenses=false -main cmd/causet -output "$out/causet.cdx.json" . 2>/dev/null

if [[ "$(go env GOARCH)" == amd64 ]]; then
	stamp=$("$out/causet_linux_amd64" version)
	if ! grep -qx "causet $VERSION" <<<"$stamp" || ! grep -q "commit:    $commit\$" <<<"$stamp"; then
		echo "release: the amd64 binary does not name $VERSION at $commit:" >&2
		echo "$stamp" >&2
		exit 1
	fi
fi

# An image tag has no '+': build metadata becomes '-'.
tag=causet:${VERSION//+/-}
if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
	docker build --build-arg VERSION="$VERSION" --build-arg COMMIT="$commit" --build-arg DATE="$date" -t "$tag" .
	echo "release: image $tag"
else
	echo "release: no docker engine here: the image is not built (docker build --build-arg VERSION=$VERSION --build-arg COMMIT=$commit --build-arg DATE=$date -t $tag .)"
fi
echo "release: $VERSION at $commit in $out/"
ls -l "$out"
