#!/usr/bin/env bash
# Runs Floodgate's whole test suite. Installs what the tests need when it is
# missing (redis-server, and Chromium for the dashboard's browser tests, from
# Debian's packages), then runs go test -race.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || need+=(redis-tools)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
if [ ${#need[@]} -gt 0 ]; then
	echo "test.sh: installing ${need[*]}" >&2
	SUDO=""
	[ "$(id -u)" -eq 0 ] || SUDO="sudo"
	$SUDO apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

go vet ./...
exec go test -race -timeout 15m "$@" ./...
