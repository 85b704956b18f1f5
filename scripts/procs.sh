# Sourced by the bench scripts: every process a script starts (its PID
# appended to pids) is stopped by that PID when the script ends, however it
# ends, and its scratch directory ($work, made here) removed; wait_http
# waits for a server it started, cpu_ticks reads a server's CPU time,
# rss_kib its resident memory and idle_kib what an idle connection costs
# it, and build_gateway_bench builds what the gateway benches run. The
# script sets NAME (for its messages) before sourcing this.

work=$(mktemp -d "/tmp/$NAME.XXXXXX")
pids=()
cleanup() {
	for pid in "${pids[@]}"; do
		kill "$pid" 2>/dev/null || true
	done
	for pid in "${pids[@]}"; do
		wait "$pid" 2>/dev/null || true
	done
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# wait_http URL: wait until something answers on URL (any status).
wait_http() {
	for _ in $(seq 1 200); do
		if curl -s -o /dev/null "$1"; then return 0; fi
		sleep 0.05
	done
	echo "$NAME: nothing answers on $1" >&2
	exit 1
}

# build_gateway_bench: floodgate and the bench helper (scripts/benchgw),
# built from this tree into $work.
build_gateway_bench() {
	echo "$NAME: building" >&2
	go build -o "$work/floodgate" ./cmd/floodgate
	go build -o "$work/benchgw" ./scripts/benchgw
}

# tree PID: PID and its children that are still running (NGINX's
# workers): the processes a server's figures are summed over.
tree() {
	# shellcheck disable=SC2046 # one word a process
	echo "$1" $(pgrep -P "$1" 2>/dev/null || true)
}

# stat_ticks PID EXPR: the sum over tree PID of an awk expression of the
# fields of /proc/PID/stat after the command name (which may hold spaces):
# $12 is the user time, $13 the system time, in clock ticks.
stat_ticks() {
	local total=0 p
	for p in $(tree "$1"); do
		if [ -r "/proc/$p/stat" ]; then
			total=$((total + $(sed 's/.*) //' "/proc/$p/stat" | awk "{print $2}")))
		fi
	done
	echo "$total"
}

# cpu_ticks PID: CPU time (user+system, in clock ticks) of tree PID.
cpu_ticks() { stat_ticks "$1" '$12 + $13'; }

# user_ticks PID: the user-space part of cpu_ticks (the rest is the
# kernel's: system calls, the network stack, context switches).
user_ticks() { stat_ticks "$1" '$12'; }

# preemptions PID: how many times the threads of tree PID were taken off
# a CPU while they could still run (involuntary context switches), so far.
preemptions() {
	local total=0 p f
	for p in $(tree "$1"); do
		for f in /proc/"$p"/task/*/status; do
			[ -r "$f" ] || continue
			total=$((total + $(awk '/^nonvoluntary_ctxt_switches:/ {print $2}' "$f")))
		done
	done
	echo "$total"
}

# rss_kib PID: resident memory (KiB) of tree PID.
rss_kib() {
	local total=0 p
	for p in $(tree "$1"); do
		if [ -r "/proc/$p/status" ]; then
			total=$((total + $(awk '/^VmRSS:/ {print $2}' "/proc/$p/status")))
		fi
	done
	echo "$total"
}

# idle_kib N WAIT "FLAGS" "LABEL|PID|URL"...: the memory each server spends
# per idle kept-alive connection: N connections to each server at once
# (benchgw idle, with FLAGS, each client its own process; each connection
# after one request), held WAIT seconds; prints "LABEL|KIB" for each, the
# growth of the server's resident memory (PID and its children) divided
# by N. The clients hold their connections until their standard input
# (one FIFO for all) ends.
idle_kib() {
	local n=$1 wait=$2 flags=$3 spec label pid url after i
	shift 3
	local -a labels=() spids=() before=() clients=()
	mkfifo "$work/idle-fifo"
	for spec in "$@"; do
		IFS='|' read -r label pid url <<<"$spec"
		i=${#labels[@]}
		labels[i]=$label
		spids[i]=$pid
		before[i]=$(rss_kib "$pid")
		# shellcheck disable=SC2086 # FLAGS are words
		"$work/benchgw" idle -target "$url" -n "$n" $flags <"$work/idle-fifo" >"$work/idle-$i.out" &
		clients[i]=$!
	done
	exec 4>"$work/idle-fifo"
	for i in "${!labels[@]}"; do
		for _ in $(seq 1 1200); do
			grep -q ready "$work/idle-$i.out" 2>/dev/null && break
			kill -0 "${clients[i]}" 2>/dev/null || break
			sleep 0.1
		done
		grep -q ready "$work/idle-$i.out" 2>/dev/null ||
			echo "$NAME: the idle connections to ${labels[i]} did not open: $(cat "$work/idle-$i.out")" >&2
	done
	echo "$NAME: $n idle connections to each server, held ${wait}s" >&2
	sleep "$wait"
	for i in "${!labels[@]}"; do
		after=$(rss_kib "${spids[i]}")
		echo "$NAME: ${labels[i]}: resident memory ${before[i]} -> $after KiB" >&2
		printf '%s|%s\n' "${labels[i]}" "$(awk -v a="$after" -v b="${before[i]}" -v n="$n" 'BEGIN {printf "%.1f", (a - b) / n}')"
	done
	exec 4>&-
	for i in "${!labels[@]}"; do
		wait "${clients[i]}" || true
	done
	rm -f "$work/idle-fifo"
}
