#!/usr/bin/env bash
# Measures Floodgate's Envoy RLS (ShouldRateLimit): decisions per second,
# p50/p99 latency and the service's CPU time per decision (utime+stime from
# /proc/PID/stat), with 50 concurrent callers, for 1 key and 10,000 keys, on
# the embedded store and on a local Redis that this script starts; and, in
# the same run, the same load against a bare grpc-go server that answers OK
# without doing anything (the floor for gRPC on this machine).
#
# Everything runs on loopback; every process this script starts is stopped
# by its PID. Environment: DURATION (default 5s), WARMUP (1s),
# CONCURRENCY (50), CONNS (4).
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-5s}
WARMUP=${WARMUP:-1s}
CONCURRENCY=${CONCURRENCY:-50}
CONNS=${CONNS:-4}

work=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do
		kill "$p" 2>/dev/null || true
	done
	for p in "${pids[@]}"; do
		wait "$p" 2>/dev/null || true
	done
	rm -rf "$work"
}
trap cleanup EXIT

echo "bench-rls: building" >&2
go build -o "$work/floodgate" ./cmd/floodgate
fg="$work/floodgate"

free_port() {
	local p
	for p in $(shuf -i 20000-60000 -n 50); do
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			echo "$p"
			return
		fi
	done
	echo "bench-rls: no free port" >&2
	return 1
}

redis_port=$(free_port)
redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no \
	--dir "$work" --logfile "$work/redis.log" &
redis_pid=$!
pids+=("$redis_pid")
for _ in $(seq 100); do
	redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break
	sleep 0.1
done
redis-cli -p "$redis_port" ping >/dev/null

# start_server MODE ARGS... : starts "floodgate rls-bench MODE ARGS", sets
# server_pid and server_addr.
start_server() {
	local out="$work/server.out"
	: >"$out"
	"$fg" rls-bench "$@" >"$out" 2>"$work/server.err" &
	server_pid=$!
	pids+=("$server_pid")
	server_addr=""
	for _ in $(seq 100); do
		server_addr=$(awk '/^listening /{print $2}' "$out")
		[ -n "$server_addr" ] && return
		sleep 0.1
	done
	echo "bench-rls: server did not start: $(cat "$work/server.err")" >&2
	return 1
}

stop_server() {
	kill -TERM "$server_pid" 2>/dev/null || true
	wait "$server_pid" 2>/dev/null || true
	grep -h "decisions=" "$work/server.err" >&2 || true
}

field() { # field NAME JSON
	sed -n "s/.*\"$1\":\([-0-9.e+]*\).*/\1/p" <<<"$2"
}

declare -A rate cpu p50 p99 errs
run_case() { # run_case NAME KEYS MODE ARGS...
	local name=$1 keys=$2
	shift 2
	start_server "$@"
	local extra=()
	if [ "$name" = redis ]; then extra=(--extra-pid "$redis_pid"); fi
	local j
	j=$("$fg" rls-bench load --target "$server_addr" --concurrency "$CONCURRENCY" --conns "$CONNS" \
		--keys "$keys" --duration "$DURATION" --warmup "$WARMUP" --pid "$server_pid" "${extra[@]}" --json)
	stop_server
	rate[$name.$keys]=$(field decisions_per_sec "$j")
	cpu[$name.$keys]=$(field cpu_us_per_decision "$j")
	p50[$name.$keys]=$(field p50_us "$j")
	p99[$name.$keys]=$(field p99_us "$j")
	errs[$name.$keys]=$(field errors "$j")
	local x
	x=$(field extra_cpu_us_per_decision "$j")
	[ -n "$x" ] && x=$(printf '%.1f' "$x")
	printf '%-6s keys=%-5s %9.0f/s  p50 %7.0fµs  p99 %7.0fµs  service CPU %6.1fµs/decision%s  errors %s\n' \
		"$name" "$keys" "${rate[$name.$keys]}" "${p50[$name.$keys]}" "${p99[$name.$keys]}" \
		"${cpu[$name.$keys]:-0}" "${x:+  redis CPU ${x}µs/decision}" "${errs[$name.$keys]}"
}

echo "bench-rls: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg), $CONCURRENCY callers over $CONNS connections, $DURATION each after $WARMUP warm-up"
for keys in 1 10000; do
	run_case bare "$keys" bare
	run_case memory "$keys" serve --store memory
	run_case redis "$keys" serve --store "redis://127.0.0.1:$redis_port"
done

echo
echo "ratios to the bare gRPC server (goals: embedded >= 0.90; Redis >= 0.75 and <= 45µs service CPU/decision)"
for keys in 1 10000; do
	awk -v k="$keys" -v b="${rate[bare.$keys]}" -v m="${rate[memory.$keys]}" -v r="${rate[redis.$keys]}" \
		-v cm="${cpu[memory.$keys]}" -v cr="${cpu[redis.$keys]}" -v cb="${cpu[bare.$keys]}" 'BEGIN {
		printf "keys=%-5s embedded %.2f  redis %.2f  | CPU/decision: bare %.1fµs, embedded %.1fµs, redis %.1fµs\n",
			k, m / b, r / b, cb, cm, cr
	}'
done
