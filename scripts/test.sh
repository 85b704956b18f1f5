#!/usr/bin/env bash
# Runs Floodgate's whole test suite. Installs every external program a test
# needs when it is missing, from Debian's packages: redis-server and
# redis-cli (the Redis tests, Sentinel and Cluster among them), Chromium (the
# dashboard's browser tests), NGINX (the replay's prediction of NGINX's
# limit_req), systemd's systemd-analyze (the unit file's checks) and
# Prometheus (promtool for the alert rules, and a Prometheus server that
# scrapes floodgate for the Grafana dashboard's queries). Then runs go vet
# and go test -race. In CI (CI set) no test
# skips for a missing program: it fails.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"

# apt_get runs apt-get, waiting for a dpkg or package-list lock that
# another apt-get holds (up to ten minutes) rather than failing at once.
apt_get() {
	local try
	for try in 1 2 3 4 5 6 7 8 9 10; do
		if DEBIAN_FRONTEND=noninteractive $SUDO apt-get -o DPkg::Lock::Timeout=60 "$@"; then
			return 0
		fi
		echo "test.sh: apt-get $* failed (try $try of 10; another apt-get may hold its lock)" >&2
		sleep 60
	done
	return 1
}

need=()
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || need+=(redis-tools)
command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || need+=(chromium)
command -v systemd-analyze >/dev/null 2>&1 || need+=(systemd)
{ command -v prometheus && command -v promtool; } >/dev/null 2>&1 || need+=(prometheus)
nginx=no
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || nginx=yes
if [ ${#need[@]} -gt 0 ] || [ "$nginx" = yes ]; then
	apt_get update -qq
	if [ "$nginx" = yes ]; then
		# nginx-light has what the test uses (limit_req, proxy_pass);
		# where it no longer exists, nginx is the package.
		if apt-cache show nginx-light >/dev/null 2>&1; then need+=(nginx-light); else need+=(nginx); fi
	fi
	echo "test.sh: installing ${need[*]}" >&2
	apt_get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

go vet ./...
# The tests that run without -race. Resident memory, which the race
# detector's shadow memory would hide: the process's under a flood, and
# the rate-limit service's heap reserve. Allocations on the request path,
# which it would add to (its sync.Pool drops items at random): overload
# control's, a refusal's served again and again, a request the edge
# engine forwards, and the choice of a Cluster node's circuit breaker. Built static and
# with -trimpath, as the image's binary is: the packages they compile are
# then the ones the deploy module's tests and cmd/floodgate's static and
# version builds need, compiled once for all of them.
static=(env CGO_ENABLED=0 go test -trimpath)
"${static[@]}" -count=1 -timeout 5m -run '^TestFloodRSSWithinCap$' ./cmd/floodgate
"${static[@]}" -count=1 -timeout 5m -run '^(TestHeapReserveNotResident|TestServedRefusalAllocatesNothing)$' ./internal/app
"${static[@]}" -count=1 -timeout 5m -run '^(TestOverloadAllocs|TestOverloadShareAllocs)$' ./gateway
"${static[@]}" -count=1 -timeout 5m -run '^TestForwardedRequestAllocatesNothing$' ./gateway/edge
"${static[@]}" -count=1 -timeout 5m -run '^TestBreakerPerPartitionAllocs$' ./limiter
# The deployment artefacts (deploy/: the Helm chart, the kustomize base,
# the dashboard and the alert rules), a module of its own so that Helm's
# and Kubernetes' modules stay out of the product's go.mod.
(cd deploy && go vet ./... && go test -timeout 10m ./...)
exec go test -race -timeout 15m "$@" ./...
