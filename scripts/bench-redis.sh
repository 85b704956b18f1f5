#!/usr/bin/env bash
# Measures floodgate's Redis store against the ceiling of the Redis server it
# runs on. Starts its own redis-server on a free loopback port, measures the
# server's EVALSHA rate for the very script the store runs (a token-bucket
# decision of store/redisstore/apply.lua) with redis-benchmark, with and
# without pipelining, then runs `floodgate bench` against the same server and
# prints both, floodgate's p99 and the ratio. Stops the server by its PID.
#
# Environment: DURATION (floodgate bench per round, default 5s), REQUESTS
# (redis-benchmark -n per round, default 200000), ROUNDS (default 3), KEYS
# (default 1000), CONCURRENCY (default 50).
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-5s}
REQUESTS=${REQUESTS:-200000}
ROUNDS=${ROUNDS:-3}
KEYS=${KEYS:-1000}
CONCURRENCY=${CONCURRENCY:-50}

for bin in redis-server redis-cli redis-benchmark go; do
	command -v "$bin" >/dev/null 2>&1 || { echo "bench-redis: $bin not found (redis-server and redis-tools from Debian's packages)" >&2; exit 1; }
done

tmp=$(mktemp -d)
pid=""
cleanup() {
	if [ -n "$pid" ]; then
		kill "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT INT TERM

echo "bench-redis: building floodgate" >&2
go build -o "$tmp/floodgate" ./cmd/floodgate

# A free loopback port: try random high ports until a server starts on one.
port=""
for attempt in 1 2 3 4 5 6 7 8 9 10; do
	try=$((20000 + RANDOM % 40000))
	redis-server --port "$try" --bind 127.0.0.1 --save "" --appendonly no --dir "$tmp" \
		--daemonize no --loglevel warning --logfile "$tmp/redis.log" &
	pid=$!
	for _ in $(seq 1 100); do
		if redis-cli -p "$try" ping >/dev/null 2>&1; then port=$try; break; fi
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.05
	done
	[ -n "$port" ] && break
	kill "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
	pid=""
done
[ -n "$port" ] || { echo "bench-redis: could not start redis-server" >&2; exit 1; }
echo "bench-redis: redis-server pid $pid on 127.0.0.1:$port" >&2

# The store's script and the arguments it sends for a token bucket of 100
# per second with a burst of 100 (floodgate bench's defaults), one hit:
# op, now ("" = server TIME), hits, then alg, cost, shadow, lease and
# rate, per ns, tau ns, tau rem, cost·T ns, rem, capacity, queue delay.
sha=$(redis-cli -p "$port" -x SCRIPT LOAD <store/redisstore/apply.lua)
args=(c "" 1 1 1 0 0 100 1000000000 1000000000 0 10000000 0 100 -1)
key='fgceil:{k__rand_int__}:bench'
# Sanity: the script answers a decision.
redis-cli -p "$port" EVALSHA "$sha" 1 'fgceil:{k0}:bench' "${args[@]}" >/dev/null

# A minimal GCRA script, for reference: what a bare token bucket costs.
minimal='local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local T, tau = tonumber(ARGV[1]), tonumber(ARGV[2])
local tat = tonumber(redis.call("GET", KEYS[1]) or "0")
if tat < now then tat = now end
local new = tat + T
if new - now > tau then return {0, math.floor((tau - (tat - now)) / T)} end
redis.call("SET", KEYS[1], string.format("%.0f", new), "PX", math.ceil((new - now) / 1000))
return {1, math.floor((tau - (new - now)) / T)}'
msha=$(redis-cli -p "$port" SCRIPT LOAD "$minimal")

# rps and p99 (ms) from redis-benchmark's CSV line.
rb() {
	redis-benchmark -p "$port" -c 50 -r "$KEYS" --csv "$@" 2>/dev/null | tail -1 | tr -d '"' |
		awk -F, '{printf "%s %s\n", $2, $7}'
}
fgbench() {
	"$tmp/floodgate" bench --store "redis://127.0.0.1:$port" --algorithm token_bucket \
		--rate 100 --per 1s --burst 100 --keys "$KEYS" --concurrency "$CONCURRENCY" --duration "$DURATION" --json
}
field() { sed -n "s/.*\"$1\": *\([0-9.eE+-]*\).*/\1/p"; }

# The machine may be shared: the measurements alternate, ROUNDS times each,
# and the medians are compared.
: >"$tmp/c16"; : >"$tmp/c1"; : >"$tmp/min"; : >"$tmp/fg"
for round in $(seq 1 "$ROUNDS"); do
	echo "bench-redis: round $round/$ROUNDS" >&2
	rb -n "$REQUESTS" -P 16 EVALSHA "$sha" 1 "$key" "${args[@]}" >>"$tmp/c16"
	out=$(fgbench)
	echo "$(field decisions_per_sec <<<"$out") $(field p50_us <<<"$out") $(field p99_us <<<"$out") $(field errors <<<"$out")" >>"$tmp/fg"
	rb -n $((REQUESTS / 5)) EVALSHA "$sha" 1 "$key" "${args[@]}" >>"$tmp/c1"
	rb -n "$REQUESTS" -P 16 EVALSHA "$msha" 1 'fgmin:{k__rand_int__}' 10000000 1000000000 >>"$tmp/min"
done
failed=$(redis-cli -p "$port" INFO commandstats | sed -n 's/^cmdstat_\(evalsha\|eval\):.*failed_calls=\([0-9]*\).*/\2/p' | awk '{s+=$1} END {print s+0}')
if [ "$failed" != "0" ]; then
	echo "bench-redis: $failed script calls failed:" >&2
	redis-cli -p "$port" INFO errorstats >&2
	exit 1
fi

# median FILE COLUMN
median() { sort -g -k"$2","$2" "$1" | awk -v c="$2" '{v[NR]=$c} END {print v[int((NR+1)/2)]}'; }
each() { awk -v c="$2" '{printf "%s%.0f", (NR>1?" ":""), $c}' "$1"; }
c16=$(median "$tmp/c16" 1); c16p99=$(median "$tmp/c16" 2)
c1=$(median "$tmp/c1" 1); c1p99=$(median "$tmp/c1" 2)
m16=$(median "$tmp/min" 1)
fg=$(median "$tmp/fg" 1); p50=$(median "$tmp/fg" 2); p99=$(median "$tmp/fg" 3)
errs=$(awk '{s+=$4} END {print s+0}' "$tmp/fg")

echo "rounds: $ROUNDS (medians; every round in brackets)"
awk -v c16="$c16" -v c16p99="$c16p99" -v c1="$c1" -v c1p99="$c1p99" -v m16="$m16" \
	-v fg="$fg" -v p50="$p50" -v p99="$p99" -v err="$errs" \
	-v c16all="$(each "$tmp/c16" 1)" -v c1all="$(each "$tmp/c1" 1)" -v mall="$(each "$tmp/min" 1)" -v fgall="$(each "$tmp/fg" 1)" 'BEGIN {
	printf "redis-benchmark EVALSHA (store script), -c 50 -P 16:  %8.0f decisions/s  p99 %.3f ms  [%s]\n", c16, c16p99, c16all
	printf "redis-benchmark EVALSHA (store script), -c 50:        %8.0f decisions/s  p99 %.3f ms  [%s]\n", c1, c1p99, c1all
	printf "redis-benchmark EVALSHA (minimal GCRA), -c 50 -P 16:  %8.0f decisions/s  (reference)  [%s]\n", m16, mall
	printf "floodgate bench, %d workers:                           %8.0f decisions/s  p50 %.0f us  p99 %.0f us  errors %d  [%s]\n", 50, fg, p50, p99, err, fgall
	printf "ratio floodgate / pipelined ceiling:    %5.1f%%  (goal >= 50%%, stretch 80%%)\n", 100 * fg / c16
	printf "ratio floodgate / unpipelined ceiling:  %5.1f%%\n", 100 * fg / c1
	printf "ratio floodgate / minimal GCRA ceiling: %5.1f%%\n", 100 * fg / m16
}'
