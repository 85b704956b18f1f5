#!/usr/bin/env bash
# Measures Floodgate's Envoy RLS (ShouldRateLimit): decisions per second,
# p50/p99 latency and the service's CPU time per decision (utime+stime from
# /proc/PID/stat), with 50 concurrent callers, for 1 key and 10,000 keys, on
# the embedded store and on a local Redis that this script starts; and, in
# the same run, the same load against a bare grpc-go server that answers OK
# without doing anything (the floor for gRPC on this machine).
#
# Everything runs on loopback; every process this script starts is stopped
# by its PID. The cases run in ROUNDS interleaved rounds and the medians
# are reported, so that other work on a shared machine weighs on every case
# alike. Floodgate runs in its own mode and, in the rows marked +compat, in
# the compatibility mode (answers as envoyproxy/ratelimit's). Environment:
# DURATION (default 4s per case and round), WARMUP (1s), ROUNDS (3),
# CONCURRENCY (50), CONNS (4), MODES ("floodgate compat").
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-4s}
ROUNDS=${ROUNDS:-3}
WARMUP=${WARMUP:-1s}
CONCURRENCY=${CONCURRENCY:-50}
CONNS=${CONNS:-4}
MODES=${MODES:-floodgate compat}
names="memory redis"
if [[ " $MODES " == *" compat "* ]]; then names="$names memory+compat redis+compat"; fi
if [[ " $MODES " != *" floodgate "* ]]; then names="${names/memory redis /}"; fi

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
	start_server "$@"
	local extra=()
	case $name in redis*) extra=(--extra-pid "$redis_pid") ;; esac
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
	for keys in 1 10000; do
		run_case bare "$keys" bare
		for name in $names; do
			compat=()
			if [[ $name == *+compat ]]; then compat=(--compat); fi
			case $name in
			memory*) run_case "$name" "$keys" serve --store memory "${compat[@]}" ;;
			redis*) run_case "$name" "$keys" serve --store "redis://127.0.0.1:$redis_port" "${compat[@]}" ;;
			esac
		done
	done
done
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"

echo
echo "medians over $ROUNDS rounds"
declare -A med
for keys in 1 10000; do
	for name in bare $names; do
		k=$name.$keys
		med[rate.$k]=$(median "${rate[$k]}")
		med[cpu.$k]=$(median "${cpu[$k]}")
		x=""
		if [ -n "${rcpu[$k]:-}" ]; then x=$(printf '  redis CPU %.1fµs/decision' "$(median "${rcpu[$k]}")"); fi
		printf '%-13s keys=%-5s %9.0f/s  p50 %7.0fµs  p99 %7.0fµs  service CPU %6.1fµs/decision%s  errors %s  degraded %s\n' \
			"$name" "$keys" "${med[rate.$k]}" "$(median "${p50[$k]}")" "$(median "${p99[$k]}")" \
			"${med[cpu.$k]}" "$x" "$(sum "${errs[$k]}")" "$(sum "${degr[$k]}")"
	done
done

echo
echo "ratios to the bare gRPC server (goals: embedded >= 0.90; Redis >= 0.85, <= 25µs service CPU/decision, 0 degraded);"
echo "of the medians, and in brackets the median of each round's ratio (less swayed by load that changes between rounds)"
for keys in 1 10000; do
	for mode in $MODES; do
		m=memory r=redis
		if [ "$mode" = compat ]; then m=memory+compat r=redis+compat; fi
		awk -v k="$keys" -v mode="$mode" -v b="${med[rate.bare.$keys]}" -v m="${med[rate.$m.$keys]}" -v r="${med[rate.$r.$keys]}" \
			-v cb="${med[cpu.bare.$keys]}" -v cm="${med[cpu.$m.$keys]}" -v cr="${med[cpu.$r.$keys]}" \
			-v pm="$(median "${ratio[$m.$keys]}")" -v pr="$(median "${ratio[$r.$keys]}")" 'BEGIN {
			printf "keys=%-5s %-9s embedded %.2f (%.2f)  redis %.2f (%.2f)  | service CPU/decision: bare %.1fµs, embedded %.1fµs, redis %.1fµs\n",
				k, mode, m / b, pm, r / b, pr, cb, cm, cr
		}'
	done
done
