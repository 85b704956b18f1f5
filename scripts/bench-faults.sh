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
# Environment: FLOODGATE (a floodgate binary; default: built from this
# tree), RATE (1000), SATURATING (64 callers), MAX_RATE (100000), HEALTHY (5s), FAULT (3s per
# fault phase), INTERVAL_MS (50), STORE_TIMEOUT (passed to --store-timeout
# when set), POLICIES ("allow deny local"). Stops what it started by PID.
set -euo pipefail
cd "$(dirname "$0")/.."

RATE=${RATE:-1000}
SATURATING=${SATURATING:-64}
HEALTHY=${HEALTHY:-5}
FAULT=${FAULT:-3}
INTERVAL_MS=${INTERVAL_MS:-50}
POLICIES=${POLICIES:-allow deny local}
MAX_RATE=${MAX_RATE:-100000}

for bin in redis-server redis-cli go; do
	command -v "$bin" >/dev/null 2>&1 || { echo "bench-faults: $bin not found" >&2; exit 1; }
done

tmp=$(mktemp -d)
rpid=""
bpid=""
cleanup() {
	[ -n "$bpid" ] && kill "$bpid" 2>/dev/null || true
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
	try=$((20000 + RANDOM % 40000))
	if start_redis "$try"; then port=$try; break; fi
	kill "$rpid" 2>/dev/null || true
	wait "$rpid" 2>/dev/null || true
	rpid=""
done
[ -n "$port" ] || { echo "bench-faults: could not start redis-server" >&2; exit 1; }
echo "bench-faults: redis-server on 127.0.0.1:$port; $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2

now_ms() { date +%s%3N; }
callers=$((2 * SATURATING))
total=$((HEALTHY + 4 * FAULT + 1))
st=()
[ -n "${STORE_TIMEOUT:-}" ] && st=(--store-timeout "$STORE_TIMEOUT")

for policy in $POLICIES; do
	redis-cli -p "$port" FLUSHALL >/dev/null
	events="$tmp/events.$policy"
	: >"$events"
	echo "bench-faults: $policy: $callers callers, ${total}s" >&2
	"$fg" bench --store "redis://127.0.0.1:$port" --prefix "fault:$policy:" --algorithm token_bucket \
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
