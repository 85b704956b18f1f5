#!/usr/bin/env bash
# Measures Floodgate's Envoy RLS (ShouldRateLimit): decisions per second,
# p50/p99 latency and the service's CPU time per decision (utime+stime from
# /proc/PID/stat), with 50 concurrent callers over 4 connections, on the
# embedded store and on a local Redis that this script starts; and, in the
# same run, the same load against a bare grpc-go server that answers OK
# without doing anything (the floor for gRPC on this machine). Every row
# gives its CPU per decision beside its rate, and the ratios to the bare
# server (rate and CPU) close the report, with the degraded decisions
# (there must be none).
#
# Rows (NAMES): memory, redis: "floodgate rls-bench serve" (the service and
# its gRPC server, nothing else); +compat: the same in the compatibility
# mode (answers as envoyproxy/ratelimit's); rls, rls+memory: "floodgate
# rls" itself with its default settings (envoyproxy/ratelimit's variables:
# the statistics and their gRPC interceptor, the engine's metrics, the
# logger, statsd at localhost:8125 as there, REDIS_URL or
# BACKEND_TYPE=memory), the default deployment.
#
# Everything runs on loopback; every process this script starts is stopped
# by its PID. The cases run in ROUNDS interleaved rounds and the medians
# are reported, so that other work on a shared machine weighs on every case
# alike. Environment: DURATION (default 4s per case and round), WARMUP
# (1s), ROUNDS (3), CONCURRENCY (50), CONNS (4), KEYS (distinct descriptor
# values, "10000"; "1 10000" adds the one hot key, for twice the run time),
# NAMES ("memory redis memory+compat redis+compat rls rls+memory"),
# FLOODGATE (a floodgate binary to measure instead of building this tree's),
# BEFORE (a floodgate binary built before: adds the row "rls-before",
# floodgate rls on Redis from that binary, in every round beside the others,
# to compare two versions under the same load).
# With the defaults a run takes about two minutes.
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-4s}
ROUNDS=${ROUNDS:-3}
WARMUP=${WARMUP:-1s}
CONCURRENCY=${CONCURRENCY:-50}
CONNS=${CONNS:-4}
KEYS=${KEYS:-10000}
names=${NAMES:-memory redis memory+compat redis+compat rls rls+memory}
BEFORE=${BEFORE:-}
if [ -n "$BEFORE" ]; then names+=" rls-before"; fi

work=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do
		kill "$p" 2>/dev/null || true
	done
	for p in "${pids[@]}"; do
		wait "$p" 2>/dev/null || true
	done
	[ -n "${KEEP:-}" ] && echo "kept $work" >&2 || rm -rf "$work"
}
trap cleanup EXIT

if [ -n "${FLOODGATE:-}" ]; then
	fg=$FLOODGATE # a binary built before, to compare two versions
else
	echo "bench-rls: building" >&2
	go build -o "$work/floodgate" ./cmd/floodgate
	fg="$work/floodgate"
fi

# free_port prints a port nothing listens on, below Linux's ephemeral
# range (32768 up), where the machine's outgoing connections could hold it.
free_port() {
	local p
	for p in $(shuf -i 20000-32000 -n 50); do
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			echo "$p"
			return
		fi
	done
	echo "bench-rls: no free port" >&2
	return 1
}

# A port found free may be taken before redis-server binds it (others
# work on this machine): then another is tried.
for _ in 1 2 3; do
	redis_port=$(free_port)
	redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no \
		--dir "$work" --logfile "$work/redis.log" &
	redis_pid=$!
	pids+=("$redis_pid")
	for _ in $(seq 100); do
		redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break
		kill -0 "$redis_pid" 2>/dev/null || break
		sleep 0.1
	done
	redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break
	kill "$redis_pid" 2>/dev/null || true
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

# start_rls BACKEND [TRY] : starts "floodgate rls" with envoyproxy/ratelimit's
# variables, their defaults but for the ports, the descriptor files and the
# store (BACKEND memory or redis), and sets server_pid and server_addr.
start_rls() {
	local out="$work/server.out" grpc http debug
	: >"$out"
	: >"$work/server.err"
	grpc=$(free_port) http=$(free_port) debug=$(free_port)
	local env=(RUNTIME_ROOT="$work/runtime" RUNTIME_SUBDIRECTORY=bench
		GRPC_HOST=127.0.0.1 GRPC_PORT="$grpc" HOST=127.0.0.1 PORT="$http" DEBUG_HOST=127.0.0.1 DEBUG_PORT="$debug")
	case $1 in
	memory) env+=(BACKEND_TYPE=memory) ;;
	redis) env+=(REDIS_SOCKET_TYPE=tcp REDIS_URL="127.0.0.1:$redis_port") ;;
	esac
	env "${env[@]}" "${rls_bin:-$fg}" rls >"$out" 2>"$work/server.err" &
	server_pid=$!
	pids+=("$server_pid")
	server_metrics="http://127.0.0.1:$debug/metrics"
	server_addr=""
	for _ in $(seq 100); do
		server_addr=$(sed -n 's/^floodgate rls: gRPC (RLS v3) on \(.*\)$/\1/p' "$out")
		[ -n "$server_addr" ] && return
		kill -0 "$server_pid" 2>/dev/null || break
		sleep 0.1
	done
	if grep -q "address already in use" "$work/server.err" && [ "${2:-0}" -lt 3 ]; then
		start_rls "$1" $((${2:-0} + 1)) # a port taken since it was found free
		return
	fi
	echo "bench-rls: floodgate rls did not start: $(cat "$work/server.err")" >&2
	return 1
}
mkdir -p "$work/runtime/bench/config"
cat >"$work/runtime/bench/config/bench.yaml" <<'YAML'
domain: bench
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 4294967295}
YAML

stop_server() {
	if [ -n "${server_metrics:-}" ]; then
		# floodgate rls: the engine's counts, from its /metrics.
		local m
		m=$(curl -s "$server_metrics" || true)
		printf 'floodgate rls: decisions=%s degraded=%s\n' \
			"$(awk '/^floodgate_decisions_total\{/ {s += $NF} END {print s + 0}' <<<"$m")" \
			"$(awk '/^floodgate_degraded_decisions_total\{/ {s += $NF} END {print s + 0}' <<<"$m")" >>"$work/server.err"
		server_metrics=""
	fi
	kill -TERM "$server_pid" 2>/dev/null || true
	wait "$server_pid" 2>/dev/null || true
	grep -h "decisions=" "$work/server.err" >&2 || true
	# The engine's degraded decisions over the case, warm-up included.
	last_degraded=$(sed -n 's/.*degraded=\([0-9]*\).*/\1/p' "$work/server.err" | tail -1)
}

field() { # field NAME JSON
	sed -n "s/.*\"$1\":\([-0-9.e+]*\).*/\1/p" <<<"$2"
}

declare -A rate cpu p50 p99 errs rcpu ratio last degr
# run_case NAME KEYS MODE ARGS... : one measurement, appended to the lists.
run_case() {
	local name=$1 keys=$2
	shift 2
	if [ "$1" = rls ]; then
		start_rls "$2"
	elif [ "$1" = rls-before ]; then
		rls_bin=$BEFORE start_rls redis
	else
		start_server "$@"
	fi
	local extra=()
	case $name in redis* | rls | rls-before) extra=(--extra-pid "$redis_pid") ;; esac
	local j
	j=$("$fg" rls-bench load --target "$server_addr" --concurrency "$CONCURRENCY" --conns "$CONNS" \
		--keys "$keys" --duration "$DURATION" --warmup "$WARMUP" --pid "$server_pid" "${extra[@]}" --json)
	stop_server
	local k=$name.$keys
	rate[$k]+=" $(field decisions_per_sec "$j")"
	last[$k]=$(field decisions_per_sec "$j")
	if [ "$name" != bare ]; then
		# The ratio to the bare server of this round, measured just before.
		ratio[$k]+=" $(awk -v a="${last[$k]}" -v b="${last[bare.$keys]}" 'BEGIN {print a / b}')"
	fi
	cpu[$k]+=" $(field cpu_us_per_decision "$j")"
	p50[$k]+=" $(field p50_us "$j")"
	p99[$k]+=" $(field p99_us "$j")"
	errs[$k]+=" $(field errors "$j")"
	degr[$k]+=" ${last_degraded:-0}"
	local x
	x=$(field extra_cpu_us_per_decision "$j")
	[ -n "$x" ] && rcpu[$k]+=" $x"
	printf '  round %s %-13s keys=%-5s %9.0f/s  service CPU %6.1fµs/decision\n' "$round" "$name" "$keys" \
		"$(field decisions_per_sec "$j")" "$(field cpu_us_per_decision "$j")"
}

median() { # median of the numbers given
	tr ' ' '\n' <<<"$*" | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {if (NR == 0) print 0; else if (NR % 2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'
}
sum() { tr ' ' '\n' <<<"$*" | awk '{s+=$1} END {print s+0}'; }

echo "bench-rls: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg), $CONCURRENCY callers over $CONNS connections, $ROUNDS rounds of $DURATION per case after $WARMUP warm-up"
for round in $(seq "$ROUNDS"); do
	for keys in $KEYS; do
		run_case bare "$keys" bare
		for name in $names; do
			compat=()
			if [[ $name == *+compat ]]; then compat=(--compat); fi
			case $name in
			memory*) run_case "$name" "$keys" serve --store memory "${compat[@]}" ;;
			redis*) run_case "$name" "$keys" serve --store "redis://127.0.0.1:$redis_port" "${compat[@]}" ;;
			rls) run_case "$name" "$keys" rls redis ;;
			rls-before) run_case "$name" "$keys" rls-before ;;
			rls+memory) run_case "$name" "$keys" rls memory ;;
			*)
				echo "bench-rls: unknown row $name" >&2
				exit 2
				;;
			esac
		done
	done
done
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"

echo
echo "medians over $ROUNDS rounds"
declare -A med
for keys in $KEYS; do
	for name in bare $names; do
		k=$name.$keys
		med[rate.$k]=$(median "${rate[$k]}")
		med[cpu.$k]=$(median "${cpu[$k]}")
		x=""
		if [ -n "${rcpu[$k]:-}" ]; then x=$(printf '  redis CPU %.1fµs/decision' "$(median "${rcpu[$k]}")"); fi
		printf '%-13s keys=%-5s %9.0f/s  service CPU %6.1fµs/decision  p50 %7.0fµs  p99 %7.0fµs%s  errors %s  degraded %s\n' \
			"$name" "$keys" "${med[rate.$k]}" "${med[cpu.$k]}" "$(median "${p50[$k]}")" "$(median "${p99[$k]}")" \
			"$x" "$(sum "${errs[$k]}")" "$(sum "${degr[$k]}")"
	done
done

echo
echo "ratios to the bare gRPC server: rate (goal >= 0.75 on Redis), and in brackets the median of each round's"
echo "ratio (less swayed by load that changes between rounds); service CPU a decision (goal <= 1.25 on Redis)"
for keys in $KEYS; do
	for name in $names; do
		k=$name.$keys
		awk -v k="$keys" -v name="$name" -v b="${med[rate.bare.$keys]}" -v r="${med[rate.$k]}" -v pr="$(median "${ratio[$k]}")" \
			-v cb="${med[cpu.bare.$keys]}" -v c="${med[cpu.$k]}" -v d="$(sum "${degr[$k]}")" 'BEGIN {
			printf "keys=%-5s %-13s rate %.2f (%.2f)  CPU %.2f (%.1fµs against %.1fµs)  degraded %d\n", k, name, r / b, pr, c / cb, c, cb, d
		}'
	done
done
