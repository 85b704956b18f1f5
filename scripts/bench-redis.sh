#!/usr/bin/env bash
# Measures floodgate's Redis store against the ceiling of the Redis server it
# runs on, in one run. Starts its own redis-server on a free loopback port,
# and in ROUNDS interleaved rounds measures:
#
#   - the one-call-per-decision ceiling: redis-benchmark -P 16 EVALSHA of a
#     minimal token-bucket (GCRA) script, one call per decision;
#   - `floodgate bench` (token bucket, KEYS keys, through the engine) in
#     each mode: one script call per decision (--batch 1, no deny cache),
#     and exact (the defaults: batched, deny cache), at CONCURRENCY callers
#     and at 1 and 8 callers;
#   - with BEFORE=path/to/another/floodgate, that binary's `floodgate bench`
#     with the same flags it knows, for a before/after comparison;
#   - leased mode on one hot key: LEASED_PROCS processes of `floodgate bench
#     --leased` at once, against the embedded store's rate in one process.
#
# Within a round the cases of one concurrency run in an order that rotates
# from round to round. For every floodgate case it prints decisions/s and
# its ratio to the ceiling of the same round, p50/p99, degraded decisions,
# the script calls per decision, and the CPU per decision of the client
# (user + system time of the floodgate process, from the shell's `times`
# of the subshell that ran it) and of Redis (from INFO commandstats and
# INFO cpu around the case, so the same for any binary). For the ceiling
# it prints the same two CPU figures per call (redis-benchmark's own, and
# Redis'). Medians over the rounds, every round in brackets. Stops the
# server by its PID.
#
# Environment: DURATION (per case, default 5s), REQUESTS (redis-benchmark
# -n, default 300000), ROUNDS (3), KEYS (10000), CONCURRENCY (64),
# LEASED_PROCS (4), BEFORE (unset), STORE_TIMEOUT (passed to --store-timeout
# when set), PIN (unset; 1: Redis on the last CPU and the clients of the
# ceiling and of every floodgate case on the others, as when Redis has a
# machine of its own; the hot-key processes stay unpinned; needs taskset
# and 2 CPUs or more), UNIX (unset; 1: the ceiling and every floodgate case
# reach Redis over a Unix socket, redis+unix://, instead of loopback TCP).
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-5s}
REQUESTS=${REQUESTS:-300000}
ROUNDS=${ROUNDS:-3}
KEYS=${KEYS:-10000}
CONCURRENCY=${CONCURRENCY:-64}
LEASED_PROCS=${LEASED_PROCS:-4}
BEFORE=${BEFORE:-}

for bin in redis-server redis-cli redis-benchmark go; do
	command -v "$bin" >/dev/null 2>&1 || { echo "bench-redis: $bin not found (redis-server and redis-tools from Debian's packages)" >&2; exit 1; }
done

# With PIN=1, the server's CPU and the clients' CPUs, as taskset prefixes.
srv=()
cli=()
if [ "${PIN:-}" = 1 ]; then
	ncpu=$(nproc)
	[ "$ncpu" -ge 2 ] && command -v taskset >/dev/null 2>&1 || { echo "bench-redis: PIN=1 needs taskset and 2 CPUs or more" >&2; exit 1; }
	srv=(taskset -c $((ncpu - 1)))
	cli=(taskset -c 0-$((ncpu - 2)))
fi

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
fg="$tmp/floodgate"

# A free loopback port: try random high ports until a server starts on one.
port=""
for attempt in 1 2 3 4 5 6 7 8 9 10; do
	try=$((20000 + RANDOM % 40000))
	"${srv[@]}" redis-server --port "$try" --bind 127.0.0.1 --save "" --appendonly no --dir "$tmp" \
		${UNIX:+--unixsocket "$tmp/redis.sock" --unixsocketperm 700} \
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
url="redis://127.0.0.1:$port"
reach=(-p "$port")
if [ -n "${UNIX:-}" ]; then
	url="redis+unix://$tmp/redis.sock"
	reach=(-s "$tmp/redis.sock")
fi
echo "bench-redis: redis-server pid $pid on 127.0.0.1:$port${UNIX:+ and $tmp/redis.sock (the cases' and the ceiling's)}; $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)${srv:+; Redis pinned to CPU ${srv[2]}, the clients to ${cli[2]}}" >&2

# A minimal GCRA script: the one-call-per-decision ceiling.
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

# redis_usage: "script_calls cpu_seconds" of the server so far.
redis_usage() {
	local calls cpu
	calls=$(redis-cli -p "$port" INFO commandstats | tr -d '\r' |
		sed -n 's/^cmdstat_\(evalsha\|eval\):calls=\([0-9]*\),.*/\2/p' | awk '{s+=$1} END {print s+0}')
	cpu=$(redis-cli -p "$port" INFO cpu | tr -d '\r' |
		awk -F: '$1=="used_cpu_sys" || $1=="used_cpu_user" {s+=$2} END {printf "%.6f", s}')
	echo "$calls $cpu"
}

field() { sed -n "s/.*\"$1\": *\([0-9.eE+-]*\).*/\1/p" <<<"$2" | head -1; }

# child_cpu: the user + system seconds of the children the shell that
# calls it has waited for (the second line of `times`, which must run in
# that shell itself, not in a pipeline's subshell).
child_cpu() {
	times >"$tmp/times"
	awk 'NR == 2 {s = 0; for (i = 1; i <= 2; i++) {split($i, a, "m"); sub("s", "", a[2]); s += a[1] * 60 + a[2]} printf "%.3f", s}' "$tmp/times"
}

# rb: "rps client_cpu_seconds" of redis-benchmark, from its CSV line and
# the CPU time of the subshell that ran it.
rb() {
	local out
	out=$("${cli[@]}" redis-benchmark "${reach[@]}" -c 50 -r "$KEYS" --csv "$@" 2>/dev/null >"$tmp/rb.csv"; child_cpu)
	echo "$(tail -1 "$tmp/rb.csv" | tr -d '"' | awk -F, '{print $2}') $out"
}

declare -A rate p50 p99 deg calls cpu ccpu ratio
# run_case NAME BINARY ARGS... : one floodgate bench, with Redis' usage
# around it; appends to the lists.
run_case() {
	local name=$1 bin=$2
	shift 2
	local u0 u1 out n
	u0=$(redis_usage)
	# The subshell runs only floodgate, so its children's CPU time is the
	# client's; it exits with floodgate's status.
	out=$("${cli[@]}" "$bin" bench --store "$url" --algorithm token_bucket --rate 100 --per 1s --burst 100 \
		--keys "$KEYS" --duration "$DURATION" --json "$@" >"$tmp/case.json"; rc=$?; child_cpu; exit $rc)
	local client=$out
	out=$(cat "$tmp/case.json")
	u1=$(redis_usage)
	n=$(awk -v a="$(field allowed "$out")" -v d="$(field denied "$out")" -v e="$(field errors "$out")" 'BEGIN {print a+d+e}')
	ccpu[$name]+=" $(awk -v c="$client" -v n="$n" 'BEGIN {printf "%.2f", c*1e6/n}')"
	rate[$name]+=" $(field decisions_per_sec "$out")"
	p50[$name]+=" $(field p50_us "$out")"
	p99[$name]+=" $(field p99_us "$out")"
	local g
	g=$(field degraded "$out")
	deg[$name]+=" ${g:-0}"
	calls[$name]+=" $(awk -v a="$u0" -v b="$u1" -v n="$n" 'BEGIN {split(a, x, " "); split(b, y, " "); printf "%.4f", (y[1]-x[1])/n}')"
	cpu[$name]+=" $(awk -v a="$u0" -v b="$u1" -v n="$n" 'BEGIN {split(a, x, " "); split(b, y, " "); printf "%.2f", (y[2]-x[2])*1e6/n}')"
	ratio[$name]+=" $(awk -v r="$(field decisions_per_sec "$out")" -v c="$ceiling" 'BEGIN {printf "%.2f", r/c}')"
	printf '  round %s %-28s %9.0f/s  x%s  p50 %7.0fµs  p99 %7.0fµs  CPU/decision client %sµs redis %sµs  degraded %s\n' \
		"$round" "$name" "$(field decisions_per_sec "$out")" "${ratio[$name]##* }" "$(field p50_us "$out")" \
		"$(field p99_us "$out")" "${ccpu[$name]##* }" "${cpu[$name]##* }" "${g:-?}" >&2
}

# The flags of the engine's store deadline, when asked for.
st=()
[ -n "${STORE_TIMEOUT:-}" ] && st=(--store-timeout "$STORE_TIMEOUT")

declare -A ceil_all
for round in $(seq 1 "$ROUNDS"); do
	echo "bench-redis: round $round/$ROUNDS" >&2
	u0=$(redis_usage)
	read -r ceiling rbcpu < <(rb -n "$REQUESTS" -P 16 EVALSHA "$msha" 1 'fgmin:{k__rand_int__}' 10000000 1000000000)
	u1=$(redis_usage)
	ceil_all[c]+=" $ceiling"
	ceil_all[client]+=" $(awk -v c="$rbcpu" -v n="$REQUESTS" 'BEGIN {printf "%.2f", c*1e6/n}')"
	ceil_all[redis]+=" $(awk -v a="$u0" -v b="$u1" -v n="$REQUESTS" 'BEGIN {split(a, x, " "); split(b, y, " "); printf "%.2f", (y[2]-x[2])*1e6/n}')"
	printf '  round %s %-28s %9.0f/s  CPU/call redis-benchmark %sµs redis %sµs\n' "$round" "ceiling (minimal GCRA, -P 16)" \
		"$ceiling" "${ceil_all[client]##* }" "${ceil_all[redis]##* }" >&2
	for c in "$CONCURRENCY" 8 1; do
		# The cases of one concurrency in an order that rotates from
		# round to round: none always runs first, right after the
		# ceiling or another concurrency's cases.
		cases=(one exact)
		[ -n "$BEFORE" ] && cases=(before one exact)
		for i in "${!cases[@]}"; do
			case ${cases[$(((i + round - 1) % ${#cases[@]}))]} in
			before) run_case "before c=$c" "$BEFORE" --concurrency "$c" ;;
			one) run_case "one call/decision c=$c" "$fg" --concurrency "$c" --batch 1 --deny-cache=false "${st[@]}" ;;
			exact) run_case "exact (batched) c=$c" "$fg" --concurrency "$c" "${st[@]}" ;;
			esac
		done
	done
done

# Leased mode on one hot key: LEASED_PROCS processes at once, against the
# embedded store in one process, ROUNDS interleaved rounds.
declare -A hot
for round in $(seq 1 "$ROUNDS"); do
	out=$("$fg" bench --store memory --keys 1 --concurrency "$CONCURRENCY" --duration "$DURATION" \
		--rate 1000000000 --burst 1000000000 --json)
	hot[mem]+=" $(field decisions_per_sec "$out")"
	hotpids=()
	for p in $(seq 1 "$LEASED_PROCS"); do
		"$fg" bench --store "$url" --prefix fghot: --keys 1 --concurrency $((CONCURRENCY / LEASED_PROCS)) \
			--duration "$DURATION" --rate 1000000000 --burst 1000000000 --leased --instances "$LEASED_PROCS" \
			--json "${st[@]}" >"$tmp/hot.$p" &
		hotpids+=($!)
	done
	wait "${hotpids[@]}"
	sum=0
	for p in $(seq 1 "$LEASED_PROCS"); do
		sum=$(awk -v s="$sum" -v r="$(field decisions_per_sec "$(cat "$tmp/hot.$p")")" 'BEGIN {print s + r}')
	done
	hot[leased]+=" $sum"
	printf '  round %s hot key: embedded %9.0f/s, leased x%s %9.0f/s\n' "$round" \
		"$(field decisions_per_sec "$out")" "$LEASED_PROCS" "$sum" >&2
done

# Script calls that failed, but for NOSCRIPT (the first EVALSHA of a
# script, answered by EVAL).
failed=$(redis-cli -p "$port" INFO commandstats | tr -d '\r' | sed -n 's/^cmdstat_\(evalsha\|eval\):.*failed_calls=\([0-9]*\).*/\2/p' | awk '{s+=$1} END {print s+0}')
noscript=$(redis-cli -p "$port" INFO errorstats | tr -d '\r' | sed -n 's/^errorstat_NOSCRIPT:count=\([0-9]*\).*/\1/p')
failed=$((failed - ${noscript:-0}))

median() { tr ' ' '\n' <<<"$*" | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {if (NR == 0) print 0; else if (NR % 2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
sum() { tr ' ' '\n' <<<"$*" | awk '{s+=$1} END {print s+0}'; }

echo
echo "rounds: $ROUNDS; medians, every round in brackets; $(nproc) CPUs, load average at the end $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-30s %9.0f/s  CPU/call: redis-benchmark %5.2fµs, redis %5.2fµs  [%s]\n' "ceiling (minimal GCRA, -P 16)" \
	"$(median "${ceil_all[c]}")" "$(median "${ceil_all[client]}")" "$(median "${ceil_all[redis]}")" "${ceil_all[c]# }"
for c in "$CONCURRENCY" 8 1; do
	for name in "before c=$c" "one call/decision c=$c" "exact (batched) c=$c"; do
		[ -n "${rate[$name]:-}" ] || continue
		printf '%-30s %9.0f/s  x%.2f of the ceiling [%s]  CPU/decision: client %5.2fµs, redis %5.2fµs  p50 %6.0fµs  p99 %7.0fµs  redis calls %.3f/decision  degraded %s  [%s]\n' \
			"$name" "$(median "${rate[$name]}")" "$(median "${ratio[$name]}")" "${ratio[$name]# }" \
			"$(median "${ccpu[$name]}")" "$(median "${cpu[$name]}")" "$(median "${p50[$name]}")" \
			"$(median "${p99[$name]}")" "$(median "${calls[$name]}")" \
			"$(sum "${deg[$name]}")" "${rate[$name]# }"
	done
done
printf '%-30s embedded (1 process) %9.0f/s  leased (%s processes) %9.0f/s  x%.2f  [%s | %s]\n' "one hot key" \
	"$(median "${hot[mem]}")" "$LEASED_PROCS" "$(median "${hot[leased]}")" \
	"$(awk -v a="$(median "${hot[leased]}")" -v b="$(median "${hot[mem]}")" 'BEGIN {print a/b}')" "${hot[mem]# }" "${hot[leased]# }"
if [ "$failed" != "0" ]; then
	echo "bench-redis: $failed script calls failed:" >&2
	redis-cli -p "$port" INFO errorstats >&2
	exit 1
fi
