#!/usr/bin/env bash
# Debian packages some tests need, installed when missing (needs root and
# apt-get, as on CI machines):
#   chromium  headless browser for the tests that read the Temporal UI
#             (cmd/causet/*ui*_test.go)
#   nftables  nft, which the link-fault tests use to drop a connection's
#             packets without a word (internal/testenv/links.go)
set -euo pipefail

missing=()
browser=""
for b in chromium chromium-browser google-chrome; do
	if command -v "$b" >/dev/null 2>&1; then
		browser=$b
		break
	fi
done
[[ -n $browser ]] || missing+=(chromium)
command -v nft >/dev/null 2>&1 || missing+=(nftables)

if ((${#missing[@]})); then
	if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
		echo "test-tools: missing ${missing[*]}, and cannot install here (needs root and apt-get): apt-get install -y ${missing[*]}" >&2
		exit 1
	fi
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
	browser=chromium
fi
echo "test-tools: $("$browser" --version 2>/dev/null || echo "$browser"); $(nft --version)"
