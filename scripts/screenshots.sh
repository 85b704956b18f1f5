#!/usr/bin/env bash
# Takes the dashboard's screenshots for docs/console.md: runs the browser
# test (headless Chromium, installed when missing) with -artifacts and
# copies the pictures it writes into docs/img.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v chromium >/dev/null 2>&1; then
	SUDO=""
	[ "$(id -u)" -eq 0 ] || SUDO="sudo"
	$SUDO apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends chromium >/dev/null
fi
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
go test -count=1 -run '^TestDashboardBrowser$' -artifacts -outputdir "$out" ./cmd/floodgate
mkdir -p docs/img
for f in dashboard-traffic.png dashboard-keys.png dashboard-health.png; do
	find "$out" -name "$f" -exec cp {} docs/img/ \;
done
ls -l docs/img
