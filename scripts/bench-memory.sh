#!/usr/bin/env bash
# Measures floodgate serve's resident memory under a flood of distinct
# client addresses, against server.memory.max_bytes.
#
# For each cap of CAPS (MiB), it starts floodgate serve with a policy of one
# route (upstream none) and a per-address fixed window on it, the cap as
# server.memory.max_bytes and loopback as a trusted proxy, then
#   1. sends BASE_REQUESTS requests forwarded for 256 addresses: the peak
#      resident memory (VmHWM) after them is the baseline, the process
#      with the same load and next to no keys;
#   2. sends cap/32 requests (twice as many as keys fit, at about 100
#      bytes a key), each forwarded for an address of its own (memflood,
#      CONNECTIONS connections, 32 requests written at once on each);
#   3. reads VmHWM (the peak), the store's keys, bytes and evictions, the
#      runtime's soft memory limit and its collections from /metrics, and
#      the CPU time the process used for the flood.
# Then it stops the process by its PID. Each line says how far the peak
# grew past the baseline against the cap, and whether it kept within
# 1.1 × cap + baseline.
#
# Environment: CAPS (default "64 256"), ENGINE (fast or net/http; default
# fast), SOFT_LIMIT (auto or off: server.memory.soft_limit; default auto),
# CONNECTIONS (8), BASE_REQUESTS (400000), BASE_PORT (18300). GOMEMLIMIT
# and GOGC, when set, reach floodgate. Everything listens on 127.0.0.1.
set -euo pipefail
cd "$(dirname "$0")/.."

CAPS=${CAPS:-64 256}
ENGINE=${ENGINE:-fast}
SOFT_LIMIT=${SOFT_LIMIT:-auto}
CONNECTIONS=${CONNECTIONS:-8}
BASE_REQUESTS=${BASE_REQUESTS:-400000}
BASE_PORT=${BASE_PORT:-18300}

work=$(mktemp -d)
pid=""
cleanup() {
	if [ -n "$pid" ]; then
		kill "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	fi
	rm -rf "$work"
}
trap cleanup EXIT

go build -o "$work/floodgate" ./cmd/floodgate
go build -o "$work/memflood" ./scripts/memflood

gw="127.0.0.1:$BASE_PORT"
admin="127.0.0.1:$((BASE_PORT + 1))"
mib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }
hwm() { awk '/^VmHWM:/ { print $2 * 1024 }' "/proc/$pid/status"; }
cpu() { awk -v hz="$(getconf CLK_TCK)" '{ printf "%.1f", ($14 + $15) / hz }' "/proc/$pid/stat"; }
metric() { curl -fsS "http://$admin/metrics" | awk -v m="$1" '$1 == m { printf "%.0f", $2 }'; }

printf '%-8s %-7s %-5s %9s %9s %10s %12s %-6s %7s %5s %8s %9s\n' engine "cap MiB" limit \
	"base MiB" "peak MiB" "grew/cap" "1.1cap+base" within "cpu s" GCs keys "req/s"
for cap in $CAPS; do
	bytes=$((cap << 20))
	cat >"$work/gw.yaml" <<EOF
version: 1
server:
  listen: $gw
  admin_listen: $admin
  ops_listen: "off"
  trusted_proxies: [127.0.0.1]
  memory: {max_bytes: $bytes, soft_limit: $SOFT_LIMIT}
routes:
  - {name: all, match: {paths: ["/**"]}, upstream: none}
limits:
  - {name: per-ip, algorithm: fixed_window, limit: 100, window: 1h, key: client_ip, scope: global}
EOF
	"$work/floodgate" serve --engine "$ENGINE" --config "$work/gw.yaml" --watch=false --log-level error \
		>"$work/serve.out" 2>&1 &
	pid=$!
	for _ in $(seq 100); do
		curl -fsS "http://$admin/readyz" >/dev/null 2>&1 && break
		sleep 0.1
	done
	"$work/memflood" -target "$gw" -c "$CONNECTIONS" -n "$BASE_REQUESTS" -addrs 256 -start 16000000 >/dev/null
	base=$(hwm)
	cpu0=$(cpu)
	n=$((bytes / 32))
	rate=$("$work/memflood" -target "$gw" -c "$CONNECTIONS" -n "$n" | awk '{ gsub(/[(\/s)]/, "", $5); print $5 }')
	peak=$(hwm)
	cpu1=$(cpu)
	keys=$(metric 'floodgate_store_keys{store="main"}')
	gcs=$(metric go_gc_duration_seconds_count)
	limit=$(metric go_gc_gomemlimit_bytes)
	kill "$pid"
	wait "$pid" 2>/dev/null || true
	pid=""
	allowed=$((bytes + bytes / 10 + base))
	within=yes
	[ "$peak" -le "$allowed" ] || within=no
	limit=$(awk -v l="$limit" 'BEGIN { if (l >= 9e18) print "none"; else printf "%.1f", l / 1048576 }')
	printf '%-8s %-7s %-5s %9s %9s %10s %12s %-6s %7s %5s %8s %9s\n' "$ENGINE" "$cap" "$limit" \
		"$(mib "$base")" "$(mib "$peak")" "$(awk -v p="$peak" -v b="$base" -v c="$bytes" 'BEGIN { printf "%.3f", (p - b) / c }')" \
		"$(mib "$allowed")" "$within" "$(awk -v a="$cpu0" -v b="$cpu1" 'BEGIN { printf "%.1f", b - a }')" "$gcs" "$keys" "$rate"
done
