#!/usr/bin/env bash
# Headless Chromium for the tests that read the Temporal UI
# (cmd/causet/*ui*_test.go). Installs Debian's chromium package when no
# browser is on PATH; needs root and apt-get (as on CI machines).
set -euo pipefail

for b in chromium chromium-browser google-chrome; do
	if command -v "$b" >/dev/null 2>&1; then
		echo "chromium: $("$b" --version 2>/dev/null || echo "$b")"
		exit 0
	fi
done
if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
	echo "chromium: not found, and cannot install it here (needs root and apt-get): apt-get install -y chromium" >&2
	exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends chromium >/dev/null
echo "chromium: $(chromium --version)"
