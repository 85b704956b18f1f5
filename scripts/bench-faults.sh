#!/usr/bin/env bash
# The fault benchmark: how decisions behave at twice the saturating load with
# a healthy Redis, and then while Redis is stopped (SIGSTOP), resumed, killed
# (kill -9) and restarted, once per failure policy (allow, deny, local).
#
# One `floodgate bench` per policy runs through the engine for the whole
# scenario against one hot key limited to RATE per second (a token bucket
# with a burst of RATE), at 2×SATURATING callers, writing its counts every
# INTERVAL_MS to a timeline. The callers are capped at MAX_RATE decisions a
# second together, well above what Redis answers, so that while decisions
# are made by policy (at once) they do not spin the CPU and make every
# goroutine wait for a turn, which would show as slow decisions; this script starts its own redis-server on a free
# loopback port, breaks it at set times and records when. Per policy and
# phase it prints: allowed against the nominal (RATE × the phase, plus the
# burst in the first), the degraded decisions, the worst interval's p99 and
# the slowest decision, and after SIGCONT and the restart the recovery time
# (until the first interval with no degraded decision).
#
# The loaded scenario runs two instances (two `floodgate bench` processes
# sharing one key, --instances 2) of LOADED_CLIENTS/2 callers each for
# LOADED_SECS on one Redis, against a limit of 100 a minute, beside HOGS CPU
# hogs (bounded busy loops), with default engine settings: once per
# algorithm (a sliding log, where exactly 100 is right, and a token bucket
# with a burst of 100, where 100 + 100/min × the run is), per policy. A
# healthy Redis must be exact there with no degraded decision, whatever the
# machine's load. It prints admitted against nominal, the degraded
# decisions, the store calls given more time because Redis kept answering
# (slow), those that reached the hard timeout (hard), the calls held
# against Redis (failed: an error, or no reply for a deadline), deadlines
# noticed late because the instance did not run (late), breaker openings,
# the slowest decision and the load average at the end. Then, with the hogs
# still running, Redis is SIGSTOPped for STOPPED seconds of a run on fresh
# keys (a token bucket of 100 a minute on 10,000 keys, so that decisions
# reach Redis), and it prints per policy the decisions made while Redis was
# stopped, how many were allowed and degraded, and the slowest: each must
# come back by its policy within the store deadline (250 ms by default).
#
# Environment: FLOODGATE (a floodgate binary; default: built from this
# tree), SCENARIOS ("faults loaded"), RATE (1000), SATURATING (64 callers),
# MAX_RATE (100000), HEALTHY (5s), FAULT (3s per fault phase), INTERVAL_MS
# (50), STORE_TIMEOUT (passed to --store-timeout when set), POLICIES ("allow
# deny local"), LOADED_CLIENTS (16), LOADED_SECS (10), HOGS (6), LOADED_ALGS
# ("sliding_log token_bucket"), STOPPED (4), UNIX (unset; 1: every
# floodgate bench reaches Redis over a Unix socket, redis+unix://, instead
# of loopback TCP). Stops what it started by PID.
set -euo pipefail
cd "$(dirname "$0")/.."

RATE=${RATE:-1000}
SATURATING=${SATURATING:-64}
HEALTHY=${HEALTHY:-5}
FAULT=${FAULT:-3}
INTERVAL_MS=${INTERVAL_MS:-50}
POLICIES=${POLICIES:-allow deny local}
MAX_RATE=${MAX_RATE:-100000}
SCENARIOS=${SCENARIOS:-faults loaded}
LOADED_CLIENTS=${LOADED_CLIENTS:-16}
LOADED_SECS=${LOADED_SECS:-10}
HOGS=${HOGS:-6}
LOADED_ALGS=${LOADED_ALGS-sliding_log token_bucket}
STOPPED=${STOPPED:-4}

for bin in redis-server redis-cli go; do
	command -v "$bin" >/dev/null 2>&1 || { echo "bench-faults: $bin not found" >&2; exit 1; }
done

tmp=$(mktemp -d)
rpid=""
bpid=""
bpids=()
hogpids=()
stop_hogs() {
	for p in "${hogpids[@]}"; do
		kill "$p" 2>/dev/null || true
		wait "$p" 2>/dev/null || true
	done
	hogpids=()
}
cleanup() {
	[ -n "$bpid" ] && kill "$bpid" 2>/dev/null || true
	for p in "${bpids[@]}"; do kill "$p" 2>/dev/null || true; done
	stop_hogs
	if [ -n "$rpid" ]; then
		kill -CONT "$rpid" 2>/dev/null || true
		kill "$rpid" 2>/dev/null || true
		wait "$rpid" 2>/dev/null || true
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT INT TERM

fg=${FLOODGATE:-}
if [ -z "$fg" ]; then
	echo "bench-faults: building floodgate" >&2
	go build -o "$tmp/floodgate" ./cmd/floodgate
	fg="$tmp/floodgate"
fi

port=""
start_redis() { # start_redis PORT: starts redis-server, sets rpid
	redis-server --port "$1" --bind 127.0.0.1 --save "" --appendonly no --dir "$tmp" \
		${UNIX:+--unixsocket "$tmp/redis.sock" --unixsocketperm 700} \
		--daemonize no --loglevel warning --logfile "$tmp/redis.log" &
	rpid=$!
	for _ in $(seq 1 100); do
		redis-cli -p "$1" ping >/dev/null 2>&1 && return 0
		kill -0 "$rpid" 2>/dev/null || return 1
		sleep 0.05
	done
	return 1
}
for attempt in 1 2 3 4 5 6 7 8 9 10; do
	# Below the ephemeral ports (from 32768 on Linux): a client that
	# keeps redialling a dead Redis on loopback can connect to itself on
	# an ephemeral port and hold it, and the restart would find it taken.
	try=$((20000 + RANDOM % 12000))
	if start_redis "$try"; then port=$try; break; fi
	kill "$rpid" 2>/dev/null || true
	wait "$rpid" 2>/dev/null || true
	rpid=""
done
[ -n "$port" ] || { echo "bench-faults: could not start redis-server" >&2; exit 1; }
store="redis://127.0.0.1:$port"
[ -n "${UNIX:-}" ] && store="redis+unix://$tmp/redis.sock"
echo "bench-faults: redis-server on 127.0.0.1:$port${UNIX:+ and $tmp/redis.sock, which the benches use}; $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2

now_ms() { date +%s%3N; }
callers=$((2 * SATURATING))
total=$((HEALTHY + 4 * FAULT + 1))
st=()
[ -n "${STORE_TIMEOUT:-}" ] && st=(--store-timeout "$STORE_TIMEOUT")

want() { case " $SCENARIOS " in *" $1 "*) return 0 ;; esac; return 1; }

if want faults; then
for policy in $POLICIES; do
	redis-cli -p "$port" FLUSHALL >/dev/null
	events="$tmp/events.$policy"
	: >"$events"
	echo "bench-faults: $policy: $callers callers, ${total}s" >&2
	"$fg" bench --store "$store" --prefix "fault:$policy:" --algorithm token_bucket \
		--rate "$RATE" --per 1s --burst "$RATE" --keys 1 --concurrency "$callers" --duration "${total}s" \
		--max-rate "$MAX_RATE" --on-failure "$policy" --timeline "$tmp/timeline.$policy" --interval "${INTERVAL_MS}ms" --json "${st[@]}" \
		>"$tmp/result.$policy" &
	bpid=$!
	echo "start $(now_ms)" >>"$events"
	sleep "$HEALTHY"
	echo "stop $(now_ms)" >>"$events"
	kill -STOP "$rpid"
	sleep "$FAULT"
	kill -CONT "$rpid"
	echo "cont $(now_ms)" >>"$events"
	sleep "$FAULT"
	kill -9 "$rpid"
	wait "$rpid" 2>/dev/null || true
	echo "kill $(now_ms)" >>"$events"
	sleep "$FAULT"
	for try in 1 2 3 4 5; do
		start_redis "$port" && break
		kill "$rpid" 2>/dev/null || true
		wait "$rpid" 2>/dev/null || true
		[ "$try" = 5 ] && { echo "bench-faults: redis-server did not restart: $(tail -3 "$tmp/redis.log")" >&2; exit 1; }
		sleep 0.2
	done
	echo "restart $(now_ms)" >>"$events"
	wait "$bpid" || true
	bpid=""
	echo "end $(now_ms)" >>"$events"
done

printf '\n%-6s %-16s %9s %9s %7s %9s %12s %11s %10s\n' policy phase allowed nominal ratio degraded "p99 (worst)" "slowest" recovery
for policy in $POLICIES; do
	awk -v rate="$RATE" -v policy="$policy" -v iv="$INTERVAL_MS" '
	FNR == NR { ev[$1] = $2; next }
	{
		t = $0; sub(/.*"t_ms":/, "", t); sub(/[,}].*/, "", t)
		# The load starts when its first interval does, a little after
		# the bench process.
		if (FNR == 1 && t - iv > ev["start"]) ev["start"] = t - iv
		n = split("allowed denied degraded p99_us max_us", f, " ")
		for (i = 1; i <= n; i++) {
			v = $0; if (!sub(".*\"" f[i] "\":", "", v)) { v = 0 } else { sub(/[,}].*/, "", v) }
			val[f[i]] = v + 0
		}
		ph = ""
		if (t > ev["start"] && t <= ev["stop"]) ph = "1 healthy, 2x"
		else if (t > ev["stop"] && t <= ev["cont"]) ph = "2 SIGSTOP"
		else if (t > ev["cont"] && t <= ev["kill"]) ph = "3 after SIGCONT"
		else if (t > ev["kill"] && t <= ev["restart"]) ph = "4 kill -9"
		else if (t > ev["restart"]) ph = "5 restarted"
		if (ph == "") next
		allowed[ph] += val["allowed"]; degraded[ph] += val["degraded"]
		if (val["p99_us"] > p99[ph]) p99[ph] = val["p99_us"]
		if (val["max_us"] > mx[ph]) mx[ph] = val["max_us"]
		if (!(ph in first)) first[ph] = t
		last[ph] = t
		if ((ph == "3 after SIGCONT" || ph == "5 restarted") && !(ph in rec) && val["degraded"] == 0 && val["allowed"] + val["denied"] > 0) {
			from = (ph == "3 after SIGCONT") ? ev["cont"] : ev["restart"]
			rec[ph] = t - from
		}
	}
	END {
		split("1 healthy, 2x|2 SIGSTOP|3 after SIGCONT|4 kill -9|5 restarted", order, "|")
		split("start stop cont kill restart end", edges, " ")
		for (i = 1; i <= 5; i++) {
			ph = order[i]
			secs = (ev[edges[i+1]] - ev[edges[i]]) / 1000
			nominal = rate * secs + (i % 2 == 1 ? rate : 0)
			r = "-"
			if (ph in rec) r = sprintf("%dms", rec[ph])
			else if (i == 3 || i == 5) r = "none"
			printf "%-6s %-16s %9d %9d %7.2f %9d %10.1fms %9.1fms %10s\n", policy, substr(ph, 3), allowed[ph], nominal,
				(nominal > 0 ? allowed[ph] / nominal : 0), degraded[ph], p99[ph] / 1000, mx[ph] / 1000, r
		}
	}' "$tmp/events.$policy" "$tmp/timeline.$policy"
	echo "        whole run: $(cat "$tmp/result.$policy")"
done
fi

# start_hogs SECS: HOGS busy loops, each ending by itself after SECS.
start_hogs() {
	for _ in $(seq 1 "$HOGS"); do
		timeout "${1}s" sh -c 'while :; do :; done' &
		hogpids+=($!)
	done
}

# field NAME FILE: a number from a bench --json result.
field() { sed -n "s/.*\"$1\":\([-0-9.e+]*\).*/\1/p" "$2"; }

# start_pair NAME ARGS...: starts two bench instances on one key space;
# their results go to $tmp/NAME.1 and $tmp/NAME.2, their timelines to
# $tmp/NAME.tl1 and .tl2. wait_pair waits for them.
start_pair() {
	local name=$1
	shift
	local per=$((LOADED_CLIENTS / 2))
	bpids=()
	for i in 1 2; do
		: >"$tmp/$name.tl$i"
		"$fg" bench --store "$store" --instances 2 --concurrency "$per" --json "${st[@]}" "$@" \
			--timeline "$tmp/$name.tl$i" --interval 100ms >"$tmp/$name.$i" &
		bpids+=($!)
	done
}
wait_pair() {
	for p in "${bpids[@]}"; do wait "$p" || true; done
	bpids=()
}

if want loaded; then
	if [ -n "$rpid" ] && ! kill -0 "$rpid" 2>/dev/null; then
		echo "bench-faults: redis-server is gone" >&2
		exit 1
	fi
	rows=()
	for alg in $LOADED_ALGS; do
		case $alg in
		sliding_log) largs=(--algorithm sliding_log --limit 100 --window 1m) ;;
		token_bucket) largs=(--algorithm token_bucket --rate 100 --per 1m --burst 100) ;;
		*) echo "bench-faults: LOADED_ALGS: $alg is not sliding_log or token_bucket" >&2; exit 1 ;;
		esac
		for policy in $POLICIES; do
			redis-cli -p "$port" FLUSHALL >/dev/null
			echo "bench-faults: loaded: $alg, $policy: 2 instances × $((LOADED_CLIENTS / 2)) callers, $HOGS CPU hogs, ${LOADED_SECS}s" >&2
			# The instances connect first: a loaded machine can make
			# a connection outlast its 1 s dial timeout.
			start_pair "loaded.$alg.$policy" "${largs[@]}" --keys 1 --prefix "loaded:$alg:$policy:" \
				--duration "${LOADED_SECS}s" --on-failure "$policy"
			sleep 0.2
			start_hogs $((LOADED_SECS + 1))
			wait_pair
			load=$(cut -d' ' -f1 /proc/loadavg)
			stop_hogs
			r1="$tmp/loaded.$alg.$policy.1" r2="$tmp/loaded.$alg.$policy.2"
			if [ ! -s "$r1" ] || [ ! -s "$r2" ]; then
				rows+=("$(printf '%-13s %-6s an instance failed (its error is above)' "$alg" "$policy")")
				continue
			fi
			rows+=("$(awk -v alg="$alg" -v policy="$policy" -v secs="$LOADED_SECS" -v load="$load" \
				-v a1="$(field allowed "$r1")" -v a2="$(field allowed "$r2")" \
				-v d1="$(field degraded "$r1")" -v d2="$(field degraded "$r2")" \
				-v s1="$(field slow_calls "$r1")" -v s2="$(field slow_calls "$r2")" \
				-v h1="$(field hard_timeouts "$r1")" -v h2="$(field hard_timeouts "$r2")" \
				-v b1="$(field breaker_opens "$r1")" -v b2="$(field breaker_opens "$r2")" \
				-v f1="$(field store_failures "$r1")" -v f2="$(field store_failures "$r2")" \
				-v l1="$(field late_deadlines "$r1")" -v l2="$(field late_deadlines "$r2")" \
				-v m1="$(field max_us "$r1")" -v m2="$(field max_us "$r2")" 'BEGIN {
				nominal = 100; if (alg == "token_bucket") nominal = 100 + 100 * secs / 60
				m = (m1 > m2 ? m1 : m2) / 1000
				printf "%-13s %-6s %9d %9.1f %7.2f %9d %6d %6d %6d %6d %8d %9.1fms %6s", alg, policy, a1 + a2, nominal,
					(a1 + a2) / nominal, d1 + d2, s1 + s2, h1 + h2, f1 + f2, l1 + l2, b1 + b2, m, load
			}')")
		done
	done

	stops=()
	for policy in $POLICIES; do
		redis-cli -p "$port" FLUSHALL >/dev/null
		events="$tmp/stop.events.$policy"
		total=$((2 + STOPPED + 2))
		echo "bench-faults: loaded, Redis stopped for ${STOPPED}s: $policy, $HOGS CPU hogs, ${total}s" >&2
		start_pair "stop.$policy" --algorithm token_bucket --rate 100 --per 1m --burst 100 --keys 10000 \
			--prefix "stop:$policy:" --duration "${total}s" --on-failure "$policy" --max-rate "$MAX_RATE"
		sleep 0.2
		start_hogs $((total + 1))
		echo "start $(now_ms)" >"$events"
		sleep 2
		echo "stop $(now_ms)" >>"$events"
		kill -STOP "$rpid"
		sleep "$STOPPED"
		kill -CONT "$rpid"
		echo "cont $(now_ms)" >>"$events"
		wait_pair
		stop_hogs
		if [ ! -s "$tmp/stop.$policy.1" ] || [ ! -s "$tmp/stop.$policy.2" ]; then
			stops+=("$(printf '%-6s an instance failed (its error is above)' "$policy")")
			continue
		fi
		stops+=("$(awk -v policy="$policy" -v iv=100 '
		FNR == NR { ev[$1] = $2; next }
		{
			t = $0; sub(/.*"t_ms":/, "", t); sub(/[,}].*/, "", t); t += 0
			# An interval ending up to one interval after the stop
			# holds decisions made before it.
			if (t <= ev["stop"] + iv || t > ev["cont"]) next
			n = split("allowed denied degraded errors max_us p99_us", f, " ")
			for (i = 1; i <= n; i++) {
				v = $0; if (!sub(".*\"" f[i] "\":", "", v)) { v = 0 } else { sub(/[,}].*/, "", v) }
				val[f[i]] = v + 0
			}
			dec += val["allowed"] + val["denied"]; al += val["allowed"]; dg += val["degraded"]; er += val["errors"]
			if (val["max_us"] > mx) mx = val["max_us"]
			if (val["p99_us"] > p99) p99 = val["p99_us"]
		}
		END {
			printf "%-6s %9d %9d %9d %6d %10.1fms %10.1fms", policy, dec, al, dg, er, p99 / 1000, mx / 1000
		}' "$events" "$tmp/stop.$policy.tl1" "$tmp/stop.$policy.tl2")")
	done

	printf '\nLoaded machine: 2 instances × %d callers on one Redis, %d CPU hogs, %ds, a limit of 100/min\n' \
		$((LOADED_CLIENTS / 2)) "$HOGS" "$LOADED_SECS"
	printf '%-13s %-6s %9s %9s %7s %9s %6s %6s %6s %6s %8s %11s %6s\n' algorithm policy admitted nominal ratio degraded slow hard failed late breaker slowest load
	for r in "${rows[@]}"; do echo "$r"; done
	printf '\nLoaded machine, Redis SIGSTOPped for %ds (token bucket 100/min, 10,000 keys): decisions while stopped\n' "$STOPPED"
	printf '%-6s %9s %9s %9s %6s %12s %12s\n' policy decisions allowed degraded errors "p99 (worst)" slowest
	for r in "${stops[@]}"; do echo "$r"; done
fi
