#!/usr/bin/env bash
# Measures the gateway under a flood from many client addresses, the case
# where the structures kept per key (the store's keys, the penalty box's
# bans, the dashboard's keys limited most) are driven by the attacker.
#
# floodgate serve (the edge engine, admin listener off) trusts X-Forwarded-
# For from 127.0.0.1, and wrk sends every request from one of ADDRESSES
# addresses in turn (a Lua script), so that each address is a client of
# its own. The policy: a per-address limit of one request an hour, burst 1
# (an address's first request goes to the upstream, every later one is
# refused), and a penalty box banning an address for 5 minutes at its
# BANS-th refusal within a minute (BANS=off: no penalty box, every
# refusal on the limit). Run on the memory store, then with the
# store and the box on a redis-server of its own (STORE=memory, redis or
# both). ROUNDS rounds of DURATION each follow one another on the same
# server, so that the bans pile up from round to round; each prints
# requests a second, the server's CPU time a request (and Redis' with
# Redis), the share refused, and the bans made and the degraded decisions
# (a store call past its deadline, decided by the limit's on_failure) so
# far.
#
# With BEFORE=path/to/another/floodgate, that binary is measured the same
# way after this tree's, for a side-by-side comparison.
#
# Installs wrk and redis-server from Debian's packages when they are
# missing. Everything listens on 127.0.0.1; every process this script
# starts is stopped by its PID when it ends.
#
# Environment: ADDRESSES (100000), ROUNDS (4), DURATION (5s), STORE
# (both), BANS (3), CONNECTIONS (50), THREADS (2), BEFORE (unset),
# BASE_PORT (18500).
set -euo pipefail
cd "$(dirname "$0")/.."

ADDRESSES=${ADDRESSES:-100000}
ROUNDS=${ROUNDS:-4}
DURATION=${DURATION:-5s}
STORE=${STORE:-both}
BANS=${BANS:-3}
CONNECTIONS=${CONNECTIONS:-50}
THREADS=${THREADS:-2}
BEFORE=${BEFORE:-}
BASE_PORT=${BASE_PORT:-18500}

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
need=()
command -v wrk >/dev/null 2>&1 || need+=(wrk)
if [ "$STORE" != memory ]; then
	command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
	command -v redis-cli >/dev/null 2>&1 || need+=(redis-tools)
fi
if [ ${#need[@]} -gt 0 ]; then
	echo "bench-flood-keys: installing ${need[*]}" >&2
	$SUDO apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

NAME=bench-flood-keys
# shellcheck source=scripts/procs.sh
. scripts/procs.sh
# shellcheck source=scripts/ports.sh
. scripts/ports.sh
build_gateway_bench

pick UP
pick GATE
pick OPS
pick REDIS

"$work/benchgw" upstream -addr "127.0.0.1:$UP" >/dev/null &
pids+=($!)
wait_http "http://127.0.0.1:$UP/"

REDIS_PID=""
if [ "$STORE" != memory ]; then
	redis-server --port "$REDIS" --bind 127.0.0.1 --save "" --appendonly no --dir "$work" \
		--daemonize no --loglevel warning --logfile "$work/redis.log" &
	REDIS_PID=$!
	pids+=($REDIS_PID)
	for _ in $(seq 1 100); do
		redis-cli -p "$REDIS" ping >/dev/null 2>&1 && break
		sleep 0.05
	done
fi

# The addresses, one after another (a stride through them, so that a
# connection's requests do not repeat an address it just used), each wrk
# thread from its own place; every round starts again from the same
# places, so an address's first request in the run passes and its later
# ones are refused, while the share refused stays under 100% as long as
# the rounds reach addresses not seen before.
cat >"$work/flood.lua" <<EOF
local threads = 0
function setup(thread)
  thread:set("id", threads)
  threads = threads + 1
end
local n, count = 0, $ADDRESSES
request = function()
  n = n + 1
  local i = (n * 7919 + id * 50021) % count
  local a = string.format("10.%d.%d.%d", math.floor(i / 65536) % 256, math.floor(i / 256) % 256, i % 256)
  return wrk.format("GET", "/", {["X-Forwarded-For"] = a})
end
EOF

policy() { # STORE-URL
	local bans=""
	if [ "$BANS" != off ]; then
		bans="  bans:
    - {name: flood, key: client_ip, after: $BANS, within: 1m, ban: 5m}"
	fi
	cat <<EOF
version: 1
server:
  admin_listen: "off"
  ops_listen: "127.0.0.1:$OPS"
  store: $1
  trusted_proxies: [127.0.0.1/32]
$bans
routes:
  - name: all
    match: {paths: ["/**"]}
    upstream: http://127.0.0.1:$UP
limits:
  - name: per-address
    rate: 1
    per: 1h
    burst: 1
    key: client_ip
EOF
}

HZ=$(getconf CLK_TCK)

# run NAME BINARY STORE-URL: ROUNDS rounds on one server.
run() {
	local name=$1 bin=$2 store=$3 pid r f0 f1 r0 r1 out reqs rps refused bans degraded metrics
	policy "$store" >"$work/policy.yaml"
	"$bin" serve --engine fast --config "$work/policy.yaml" --listen "127.0.0.1:$GATE" --log-level error >/dev/null 2>&1 &
	pid=$!
	pids+=($pid)
	wait_http "http://127.0.0.1:$GATE/"
	for r in $(seq 1 "$ROUNDS"); do
		f0=$(cpu_ticks "$pid")
		r0=0
		[ -n "$REDIS_PID" ] && r0=$(cpu_ticks "$REDIS_PID")
		out=$(wrk -t"$THREADS" -c"$CONNECTIONS" -d"$DURATION" -s "$work/flood.lua" "http://127.0.0.1:$GATE/")
		f1=$(cpu_ticks "$pid")
		r1=0
		[ -n "$REDIS_PID" ] && r1=$(cpu_ticks "$REDIS_PID")
		reqs=$(awk '/requests in/ {print $1}' <<<"$out")
		rps=$(awk '/^Requests\/sec:/ {printf "%.0f", $2}' <<<"$out")
		refused=$(awk '/Non-2xx or 3xx responses:/ {print $5}' <<<"$out")
		metrics=$(curl -s "http://127.0.0.1:$OPS/metrics")
		bans=$(awk '/^floodgate_bans_total/ {s += $2} END {printf "%d", s}' <<<"$metrics")
		degraded=$(awk '/^floodgate_degraded_decisions_total/ {s += $2} END {printf "%d", s}' <<<"$metrics")
		awk -v name="$name" -v r="$r" -v rps="$rps" -v n="$reqs" -v f=$((f1 - f0)) -v rd=$((r1 - r0)) -v hz="$HZ" \
			-v refused="${refused:-0}" -v bans="$bans" -v degraded="$degraded" -v redis="$REDIS_PID" 'BEGIN {
			line = sprintf("  %-22s round %d: %7d req/s, %5.1f us CPU a request", name, r, rps, f / hz * 1e6 / n)
			if (redis != "" && name ~ /redis/) line = line sprintf(" (Redis %4.1f us)", rd / hz * 1e6 / n)
			printf "%s, %5.1f%% refused; so far %d bans, %d degraded decisions\n", line, 100 * refused / n, bans, degraded
		}'
	done
	kill "$pid"
	wait "$pid" 2>/dev/null || true
	if [ -n "$REDIS_PID" ]; then redis-cli -p "$REDIS" flushall >/dev/null; fi
}

banned="a ban after $BANS refusals within a minute"
[ "$BANS" = off ] && banned="no penalty box"
echo "wrk -t$THREADS -c$CONNECTIONS -d$DURATION, $ADDRESSES addresses, $banned, $ROUNDS rounds on one server each; $(nproc) CPUs, $(go version | awk '{print $3}'), load average $(cut -d' ' -f1-3 /proc/loadavg)"
bins=("this tree:$work/floodgate")
[ -n "$BEFORE" ] && bins+=("before:$BEFORE")
for b in "${bins[@]}"; do
	label=${b%%:*}
	bin=${b#*:}
	if [ "$STORE" != redis ]; then run "$label, memory" "$bin" memory; fi
	if [ "$STORE" != memory ]; then run "$label, redis" "$bin" "redis://127.0.0.1:$REDIS"; fi
done
