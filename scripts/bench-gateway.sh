#!/usr/bin/env bash
# Measures the gateway against NGINX on loopback, in one run, with wrk.
#
# A fast upstream (NGINX answering from memory, one worker) stands behind
#   - a bare Go reverse proxy (httputil.ReverseProxy, a tuned transport),
#   - floodgate serve on each engine (--engine fast, --engine net/http),
#     admin and ops listeners off,
#   - NGINX with limit_req and proxy_pass with keepalive.
# Two jobs: pass-through (a per-address token bucket that never binds, the
# RateLimit fields on every answer) and the 429 path (a per-client-address
# limit of one request a minute, burst 1, spent first: every answer is 429,
# the upstream is never reached; NGINX limits $binary_remote_addr the same
# way and does not log its rejections). A bare fasthttp server answering
# every request with the same 429 (benchgw fixed429), set up as the edge
# engine's (its buffers, timeouts, streamed request bodies), is the floor
# under the edge engine's 429 path; the same answer from a goroutine per
# connection with no HTTP library (benchgw conn429) and from event loops
# (benchgw loop429) show what the engine itself costs, and the gateway's
# own flow over the same reject.yaml on those event loops, with a head
# parser of their own and its answers written as bytes (benchgw flowloop),
# what an engine of the gateway's own would cost there; the same flow on a
# goroutine per connection (benchgw flowconn), as the edge engine's front
# reads and answers, which also forwards what the flow passes with no HTTP
# library (the head as it came, its Host the upstream's, X-Forwarded-For
# added; the answer copied back with the flow's fields): what a
# forwarding path of the front's own would cost at least, on both jobs.
# Three floors under the pass-through,
# none doing a gateway's work: a bare fasthttp proxy set up the same way
# (benchgw fastproxy); a goroutine per connection over net.Conn passing
# requests as they came, with no HTTP library (benchgw connproxy); and the
# same from event loops of its own driving epoll (benchgw loopproxy).
#
# ROUNDS rounds, each measuring every server once in turn (the order
# rotates from round to round), so that a busy machine weighs on all
# alike; the table gives the median of the rounds. Then the p99 latency at
# HIGH_CONNECTIONS connections, in HIGH_ROUNDS rounds of its own (the order
# rotating the same way; the median), of the gateway on both engines, NGINX,
# and the 429 path's floors of a goroutine per connection and of event
# loops with and without the flow (how much of the gateway's tail there
# belongs to serving a connection on a goroutine, whatever the work a
# request), and the memory each server spends per idle
# kept-alive connection (the growth of its resident memory while
# IDLE_CONNECTIONS of them are held open, divided by their number).
#
# It prints requests/s, p99 latency, CPU time per request (the measured
# server's processes only: robust on a busy machine, where requests/s
# mostly measures what the other processes leave) with its user-space
# part (the rest is the kernel's: system calls, the network stack,
# context switches), how often a request its threads were preempted
# (taken off a CPU while they could still run: on a machine shared with
# wrk, mostly by the wrk thread that the server's answer woke), and the
# ratios to NGINX: goals 0.8x NGINX's req/s on both jobs, p99 at
# HIGH_CONNECTIONS within 1.5 times NGINX's, at most 8 KiB per idle
# connection. Each job's req/s ratio is also given round by round, with a
# warning when NGINX's own rounds spread by more than 15% (the ratio of
# medians is then unsteady, and CPU per request the figure to compare).
# On the 429 path every answer must be a 429: a request let through (a
# 2xx, which is also what a degraded decision that fails open answers) is
# counted and reported.
#
# Installs nginx and wrk from Debian's packages when they are missing.
# Everything listens on 127.0.0.1; every process this script starts is
# stopped by its PID when it ends.
#
# The idle connections are measured after IDLE_WAIT seconds of idleness:
# the edge engine parks a kept-alive connection idle for a second or two
# (it then holds no read buffer, no request context and, on Linux, no
# goroutine), and once many were parked and none for 25 seconds it returns
# what they gave back to the system (gateway/edge/park.go), so the default
# waits for that.
#
# Each row also says how often the load generator slept a request (wrk's
# voluntary context switches over the run, from GNU time): a server's
# answer to a wrk thread asleep in epoll_wait has the kernel wake that
# thread, from the server's write, at a cost of a few microseconds counted
# in the server's CPU. A server slower than wrk finds it asleep at most of
# its answers, a faster one seldom: CPU per request counts part of that
# difference twice.
#
# PIN=1 pins the measured servers to SERVER_CPUS (0; the Go servers with
# GOMAXPROCS set to their number, NGINX with as many workers) and wrk and
# the upstream to LOAD_CPUS (1), with THREADS 1 by default: no server is
# taken off its CPU by wrk, and CPU per request and req/s vary less from
# round to round on a small machine. Unpinned (the default) is the setup
# of the table in docs/engines.md.
#
# Environment: DURATION (default 10s), ROUNDS (3), CONNECTIONS (50),
# HIGH_CONNECTIONS (400), HIGH_ROUNDS (ROUNDS), IDLE_CONNECTIONS (10000, fewer when the file
# descriptor limit does not allow them), IDLE_WAIT (35), THREADS (2, 1 with PIN=1),
# PIN, SERVER_CPUS, LOAD_CPUS, BASE_PORT (18100). GOGC, when set, reaches the Go programs alike.
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-10s}
ROUNDS=${ROUNDS:-3}
CONNECTIONS=${CONNECTIONS:-50}
HIGH_CONNECTIONS=${HIGH_CONNECTIONS:-400}
HIGH_ROUNDS=${HIGH_ROUNDS:-$ROUNDS}
IDLE_CONNECTIONS=${IDLE_CONNECTIONS:-10000}
IDLE_WAIT=${IDLE_WAIT:-35}
PIN=${PIN:-}
SERVER_CPUS=${SERVER_CPUS:-0}
LOAD_CPUS=${LOAD_CPUS:-1}
if [ -n "$PIN" ] && [ "$PIN" != 0 ]; then
	THREADS=${THREADS:-1}
else
	PIN=""
	THREADS=${THREADS:-2}
fi
BASE_PORT=${BASE_PORT:-18100}

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
need=()
command -v wrk >/dev/null 2>&1 || need+=(wrk)
[ -x /usr/bin/time ] || need+=(time)
if ! command -v nginx >/dev/null 2>&1 && [ ! -x /usr/sbin/nginx ]; then
	need+=(nginx)
fi
if [ ${#need[@]} -gt 0 ]; then
	echo "bench-gateway: installing ${need[*]}" >&2
	$SUDO apt-get update -qq
	pkgs=()
	for p in "${need[@]}"; do
		if [ "$p" = nginx ]; then
			# nginx-light is enough (limit_req and proxy are built in);
			# fall back to nginx where it does not exist.
			if apt-cache show nginx-light >/dev/null 2>&1; then pkgs+=(nginx-light); else pkgs+=(nginx); fi
		else
			pkgs+=("$p")
		fi
	done
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null
fi
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
# on_server and on_load: what a command runs under, on the servers' CPUs
# or the load's (nothing unpinned). SERVER_PROCS: the Go servers'
# GOMAXPROCS and NGINX's workers (auto unpinned).
on_server=()
on_load=()
SERVER_PROCS=auto
if [ -n "$PIN" ]; then
	command -v taskset >/dev/null 2>&1 || { echo "bench-gateway: PIN=1 needs taskset (util-linux)" >&2; exit 1; }
	SERVER_PROCS=$(taskset -c "$SERVER_CPUS" nproc)
	on_server=(env GOMAXPROCS="$SERVER_PROCS" taskset -c "$SERVER_CPUS")
	on_load=(taskset -c "$LOAD_CPUS")
fi
# The idle connections take a descriptor each in the client and in the
# server (whose processes inherit the limit, and raise their own).
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
fds=$(ulimit -n)
if [ "$fds" != unlimited ] && [ "$IDLE_CONNECTIONS" -gt $((fds - 200)) ]; then
	echo "bench-gateway: ulimit -n is $fds: $((fds - 200)) idle connections, not $IDLE_CONNECTIONS" >&2
	IDLE_CONNECTIONS=$((fds - 200))
fi

NAME=bench-gateway
# shellcheck source=scripts/procs.sh
. scripts/procs.sh
# shellcheck source=scripts/ports.sh
. scripts/ports.sh
build_gateway_bench

pick UP
pick BARE
pick BARE_429
pick BARE_429_CONN
pick BARE_429_LOOP
pick FLOW_429_LOOP
pick FLOW_429_CONN
pick FLOW_PASS_CONN
pick BARE_FAST
pick BARE_CONN
pick BARE_LOOP
pick FAST_PASS
pick FAST_REJECT
pick NET_PASS
pick NET_REJECT
pick NG_PASS
pick NG_REJECT

user_line=""
[ "$(id -u)" -eq 0 ] && user_line="user root;"
# nginx_conf NAME WORKERS SERVERS: an NGINX configuration in $work/NAME.
nginx_conf() {
	mkdir -p "$work/$1/logs"
	cat >"$work/$1/nginx.conf" <<EOF
$user_line
worker_processes $2;
pid $work/$1/nginx.pid;
error_log $work/$1/logs/error.log error;
events { worker_connections 16384; }
http {
    access_log off;
    keepalive_requests 100000000;
    client_body_temp_path $work/$1/body;
    proxy_temp_path $work/$1/proxy;
    fastcgi_temp_path $work/$1/fastcgi;
    uwsgi_temp_path $work/$1/uwsgi;
    scgi_temp_path $work/$1/scgi;
$3
}
EOF
}

# The upstream: NGINX answering from memory.
nginx_conf upstream 1 "    server {
        listen 127.0.0.1:$UP;
        location / { default_type application/json; return 200 '{\"ok\":true}\n'; }
    }"
"${on_load[@]}" "$NGINX" -p "$work/upstream" -c "$work/upstream/nginx.conf" -g 'daemon off;' 2>"$work/upstream/stderr" &
pids+=($!)
PID_UP=$!

"${on_server[@]}" "$work/benchgw" proxy -addr "127.0.0.1:$BARE" -target "http://127.0.0.1:$UP" >/dev/null &
pids+=($!)
PID_BARE=$!
"${on_server[@]}" "$work/benchgw" fixed429 -addr "127.0.0.1:$BARE_429" >/dev/null &
pids+=($!)
PID_BARE_429=$!
"${on_server[@]}" "$work/benchgw" conn429 -addr "127.0.0.1:$BARE_429_CONN" >/dev/null &
pids+=($!)
PID_BARE_429_CONN=$!
"${on_server[@]}" "$work/benchgw" loop429 -addr "127.0.0.1:$BARE_429_LOOP" >/dev/null &
pids+=($!)
PID_BARE_429_LOOP=$!
"${on_server[@]}" "$work/benchgw" fastproxy -addr "127.0.0.1:$BARE_FAST" -target "http://127.0.0.1:$UP" >/dev/null &
pids+=($!)
PID_BARE_FAST=$!
"${on_server[@]}" "$work/benchgw" connproxy -addr "127.0.0.1:$BARE_CONN" -target "http://127.0.0.1:$UP" >/dev/null &
pids+=($!)
PID_BARE_CONN=$!
"${on_server[@]}" "$work/benchgw" loopproxy -addr "127.0.0.1:$BARE_LOOP" -target "http://127.0.0.1:$UP" >/dev/null &
pids+=($!)
PID_BARE_LOOP=$!

# Floodgate: the same limits NGINX gets below (scripts/bench-gateway/),
# the route pointed at the upstream.
for job in pass reject; do
	sed "s#upstream: http://127.0.0.1:9\$#upstream: http://127.0.0.1:$UP#" "scripts/bench-gateway/$job.yaml" >"$work/$job.yaml"
	grep -q "127.0.0.1:$UP" "$work/$job.yaml" || { echo "bench-gateway: scripts/bench-gateway/$job.yaml names no upstream to point" >&2; exit 1; }
done
declare -A PID
start_floodgate() { # NAME ENGINE CONFIG PORT
	"${on_server[@]}" "$work/floodgate" serve --engine "$2" --config "$work/$3" --listen "127.0.0.1:$4" --log-level error >/dev/null &
	pids+=($!)
	PID[$1]=$!
}
"${on_server[@]}" "$work/benchgw" flowloop -addr "127.0.0.1:$FLOW_429_LOOP" -policy "$work/reject.yaml" >/dev/null &
pids+=($!)
PID_FLOW_429_LOOP=$!
"${on_server[@]}" "$work/benchgw" flowconn -addr "127.0.0.1:$FLOW_429_CONN" -policy "$work/reject.yaml" >/dev/null &
pids+=($!)
PID_FLOW_429_CONN=$!
"${on_server[@]}" "$work/benchgw" flowconn -addr "127.0.0.1:$FLOW_PASS_CONN" -policy "$work/pass.yaml" >/dev/null &
pids+=($!)
PID_FLOW_PASS_CONN=$!
start_floodgate fast-pass fast pass.yaml "$FAST_PASS"
start_floodgate fast-429 fast reject.yaml "$FAST_REJECT"
start_floodgate net-pass net/http pass.yaml "$NET_PASS"
start_floodgate net-429 net/http reject.yaml "$NET_REJECT"

nginx_conf front "$SERVER_PROCS" "    upstream up { server 127.0.0.1:$UP; keepalive 256; }
    limit_req_zone \$binary_remote_addr zone=pass:10m rate=1000000r/s;
    limit_req_zone \$binary_remote_addr zone=tiny:10m rate=1r/m;
    limit_req_status 429;
    # Refusals are logged at limit_req_log_level (by default error, which
    # the error log above takes): at warn neither they nor delays are.
    limit_req_log_level warn;
    server {
        listen 127.0.0.1:$NG_PASS;
        location / {
            limit_req zone=pass burst=1000000 nodelay;
            proxy_http_version 1.1;
            proxy_set_header Connection \"\";
            proxy_pass http://up;
        }
    }
    server {
        listen 127.0.0.1:$NG_REJECT;
        location / {
            limit_req zone=tiny burst=1 nodelay;
            proxy_http_version 1.1;
            proxy_set_header Connection \"\";
            proxy_pass http://up;
        }
    }"
"${on_server[@]}" "$NGINX" -p "$work/front" -c "$work/front/nginx.conf" -g 'daemon off;' 2>"$work/front/stderr" &
pids+=($!)
PID_NGINX=$!

for p in $UP $BARE $BARE_429 $BARE_429_CONN $BARE_429_LOOP $FLOW_429_LOOP $FLOW_429_CONN $FLOW_PASS_CONN $BARE_FAST $BARE_CONN $BARE_LOOP $FAST_PASS $FAST_REJECT $NET_PASS $NET_REJECT $NG_PASS $NG_REJECT; do
	wait_http "http://127.0.0.1:$p/"
done
# The tiny limits: spend the one request, check that all answer 429.
spent_at=$(date +%s)
for p in $FAST_REJECT $NET_REJECT $NG_REJECT $BARE_429 $BARE_429_CONN $BARE_429_LOOP $FLOW_429_LOOP $FLOW_429_CONN; do
	curl -s -o /dev/null "http://127.0.0.1:$p/" || true
	code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$p/")
	if [ "$code" != 429 ]; then
		echo "bench-gateway: port $p answers $code, not 429" >&2
		exit 1
	fi
done
for p in $BARE $BARE_FAST $BARE_CONN $BARE_LOOP $FLOW_PASS_CONN $FAST_PASS $NET_PASS $NG_PASS; do
	code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$p/")
	if [ "$code" != 200 ]; then
		echo "bench-gateway: port $p answers $code, not 200" >&2
		exit 1
	fi
done

# The servers measured: name, URL, PID whose processes are counted.
NAMES=("upstream (direct)" "bare Go proxy" "floodgate fast pass" "floodgate net/http pass" "nginx pass"
	"floodgate fast 429" "floodgate net/http 429" "nginx 429" "bare fasthttp 429"
	"bare goroutine 429" "bare event loop 429" "flow on event loops 429" "flow on goroutines 429" "bare fasthttp proxy" "bare goroutine proxy"
	"bare event loop proxy" "flow on goroutines pass")
declare -A URL=(
	["upstream (direct)"]="http://127.0.0.1:$UP/"
	["bare Go proxy"]="http://127.0.0.1:$BARE/"
	["floodgate fast pass"]="http://127.0.0.1:$FAST_PASS/"
	["floodgate net/http pass"]="http://127.0.0.1:$NET_PASS/"
	["nginx pass"]="http://127.0.0.1:$NG_PASS/"
	["floodgate fast 429"]="http://127.0.0.1:$FAST_REJECT/"
	["floodgate net/http 429"]="http://127.0.0.1:$NET_REJECT/"
	["nginx 429"]="http://127.0.0.1:$NG_REJECT/"
	["bare fasthttp 429"]="http://127.0.0.1:$BARE_429/"
	["bare goroutine 429"]="http://127.0.0.1:$BARE_429_CONN/"
	["bare event loop 429"]="http://127.0.0.1:$BARE_429_LOOP/"
	["flow on event loops 429"]="http://127.0.0.1:$FLOW_429_LOOP/"
	["flow on goroutines 429"]="http://127.0.0.1:$FLOW_429_CONN/"
	["flow on goroutines pass"]="http://127.0.0.1:$FLOW_PASS_CONN/"
	["bare fasthttp proxy"]="http://127.0.0.1:$BARE_FAST/"
	["bare goroutine proxy"]="http://127.0.0.1:$BARE_CONN/"
	["bare event loop proxy"]="http://127.0.0.1:$BARE_LOOP/"
)
declare -A SPID=(
	["upstream (direct)"]=$PID_UP
	["bare Go proxy"]=$PID_BARE
	["floodgate fast pass"]=${PID[fast-pass]}
	["floodgate net/http pass"]=${PID[net-pass]}
	["nginx pass"]=$PID_NGINX
	["floodgate fast 429"]=${PID[fast-429]}
	["floodgate net/http 429"]=${PID[net-429]}
	["nginx 429"]=$PID_NGINX
	["bare fasthttp 429"]=$PID_BARE_429
	["bare goroutine 429"]=$PID_BARE_429_CONN
	["bare event loop 429"]=$PID_BARE_429_LOOP
	["flow on event loops 429"]=$PID_FLOW_429_LOOP
	["flow on goroutines 429"]=$PID_FLOW_429_CONN
	["flow on goroutines pass"]=$PID_FLOW_PASS_CONN
	["bare fasthttp proxy"]=$PID_BARE_FAST
	["bare goroutine proxy"]=$PID_BARE_CONN
	["bare event loop proxy"]=$PID_BARE_LOOP
)

HZ=$(getconf CLK_TCK)

to_ms() {
	# wrk prints latencies as 1.23ms, 456.78us or 1.02s.
	awk -v v="$1" 'BEGIN {
		if (v ~ /us$/) { sub(/us$/, "", v); printf "%.3f", v / 1000 }
		else if (v ~ /ms$/) { sub(/ms$/, "", v); printf "%.3f", v }
		else if (v ~ /s$/) { sub(/s$/, "", v); printf "%.3f", v * 1000 }
		else printf "%s", v }'
}

# measure NAME CONNS: run wrk on NAME; appends "rps p99 cpu_us user_us
# preempted_per_request wrk_sleeps_per_request" to $work/results/NAME-CONNS
# and prints the line.
mkdir -p "$work/results"
measure() {
	local name=$1 conns=$2 url pid out before after ubefore uafter pbefore pafter reqs rps p99 cpu user pre non2xx file sleeps
	url=${URL[$name]}
	pid=${SPID[$name]}
	# A short warm-up opens the connections.
	"${on_load[@]}" wrk -t"$THREADS" -c"$conns" -d2s "$url" >/dev/null 2>&1 || true
	before=$(cpu_ticks "$pid")
	ubefore=$(user_ticks "$pid")
	pbefore=$(preemptions "$pid")
	out=$("${on_load[@]}" /usr/bin/time -f %w -o "$work/wrk-waits" wrk -t"$THREADS" -c"$conns" -d"$DURATION" --latency "$url")
	after=$(cpu_ticks "$pid")
	uafter=$(user_ticks "$pid")
	pafter=$(preemptions "$pid")
	reqs=$(awk '/requests in/ {print $1}' <<<"$out")
	sleeps=$(awk -v n="$reqs" 'END {printf "%.3f", $1 / n}' "$work/wrk-waits")
	rps=$(awk '/^Requests\/sec:/ {printf "%.0f", $2}' <<<"$out")
	p99=$(to_ms "$(awk '$1 == "99%" {print $2}' <<<"$out")")
	cpu=$(awk -v t=$((after - before)) -v hz="$HZ" -v n="$reqs" 'BEGIN {printf "%.1f", t / hz * 1e6 / n}')
	user=$(awk -v t=$((uafter - ubefore)) -v hz="$HZ" -v n="$reqs" 'BEGIN {printf "%.1f", t / hz * 1e6 / n}')
	pre=$(awk -v c=$((pafter - pbefore)) -v n="$reqs" 'BEGIN {printf "%.3f", c / n}')
	non2xx=$(awk '/Non-2xx or 3xx responses:/ {print $5}' <<<"$out")
	errors=$(awk '/Socket errors:/ {print $0}' <<<"$out")
	file="$work/results/$(tr ' /' '__' <<<"$name")-$conns"
	echo "$rps $p99 $cpu $user $pre $sleeps" >>"$file"
	case $name in
	*429) # every answer must be a 429: count the others
		echo "$name $((reqs - ${non2xx:-0}))" >>"$work/results/passed" ;;
	esac
	printf '  %-26s c=%-4s %8s req/s   p99 %8s ms   %6s us CPU/req (user %s)   preempted %s/req   wrk slept %s/req   non-2xx %s %s\n' "$name" "$conns" "$rps" "$p99" "$cpu" "$user" "$pre" "$sleeps" "${non2xx:-0}" "$errors"
}
# median NAME CONNS FIELD: the median of a result's field over the rounds.
median() {
	local file
	file="$work/results/$(tr ' /' '__' <<<"$1")-$2"
	awk -v f="$3" '{print $f}' "$file" | sort -g | awk '{v[NR] = $1} END {if (NR % 2) print v[(NR + 1) / 2]; else printf "%.3f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2}'
}

# Memory per idle kept-alive connection, measured first, on servers that
# have served nothing yet but the checks above: IDLE_CONNECTIONS to each
# server at once (each client its own process), held IDLE_WAIT seconds.
declare -A IDLE
specs=()
for name in "floodgate fast pass" "floodgate net/http pass" "nginx pass"; do
	specs+=("$name|${SPID[$name]}|${URL[$name]}")
done
while IFS='|' read -r name kib; do
	IDLE[$name]=$kib
	echo "  $name: ${IDLE[$name]} KiB an idle connection ($IDLE_CONNECTIONS held ${IDLE_WAIT}s)"
done < <(idle_kib "$IDLE_CONNECTIONS" "$IDLE_WAIT" "" "${specs[@]}")

pinned="unpinned"
[ -n "$PIN" ] && pinned="servers on CPUs $SERVER_CPUS ($SERVER_PROCS), wrk and the upstream on CPUs $LOAD_CPUS"
echo "wrk -t$THREADS -d$DURATION, $ROUNDS interleaved rounds at -c$CONNECTIONS, $HIGH_ROUNDS at -c$HIGH_CONNECTIONS; $(nproc) CPUs, $pinned;" \
	"nginx $("$NGINX" -v 2>&1 | sed 's/.*nginx\///'), $(go version | awk '{print $3}'); load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "(CPU/req counts the measured server only: the proxies' upstream is not included)"
# rounds COUNT CONNS LABEL NAME...: COUNT rounds measuring every NAME once
# at CONNS connections, the order rotating by one from round to round.
rounds() {
	local count=$1 conns=$2 label=$3 round i
	shift 3
	local names=("$@")
	local k=${#names[@]}
	for round in $(seq 1 "$count"); do
		echo "${label}round $round"
		for i in $(seq 0 $((k - 1))); do
			measure "${names[$(((i + round - 1) % k))]}" "$conns"
		done
	done
}
rounds "$ROUNDS" "$CONNECTIONS" "" "${NAMES[@]}"
rounds "$HIGH_ROUNDS" "$HIGH_CONNECTIONS" "at -c$HIGH_CONNECTIONS, " \
	"floodgate fast pass" "floodgate net/http pass" "nginx pass" "floodgate fast 429" "floodgate net/http 429" "nginx 429" \
	"bare goroutine 429" "bare event loop 429" "flow on event loops 429"

m() { median "$1" "$2" "$3"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }
echo
echo "| server | job | req/s (c=$CONNECTIONS) | vs nginx | CPU per request | vs nginx | of it in user space | preempted a request | wrk slept a request | p99 c=$CONNECTIONS | p99 c=$HIGH_CONNECTIONS | KiB per idle connection |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
row() { # NAME JOB NGINX-NAME
	local name=$1 rps p99 cpu user pre sleeps hp99 idle vs vsc
	rps=$(m "$name" "$CONNECTIONS" 1)
	p99=$(m "$name" "$CONNECTIONS" 2)
	cpu=$(m "$name" "$CONNECTIONS" 3)
	user=$(m "$name" "$CONNECTIONS" 4)
	pre=$(m "$name" "$CONNECTIONS" 5)
	sleeps=$(m "$name" "$CONNECTIONS" 6)
	hp99="-"
	[ -f "$work/results/$(tr ' /' '__' <<<"$name")-$HIGH_CONNECTIONS" ] && hp99="$(m "$name" "$HIGH_CONNECTIONS" 2) ms"
	idle=${IDLE[$name]:--}
	vs="-"
	vsc="-"
	if [ -n "$3" ]; then
		vs="$(ratio "$rps" "$(m "$3" "$CONNECTIONS" 1)")x"
		vsc="$(ratio "$cpu" "$(m "$3" "$CONNECTIONS" 3)")x"
	fi
	printf '| %s | %s | %.0f | %s | %s us | %s | %s us | %s | %s | %s ms | %s | %s |\n' "$name" "$2" "$rps" "$vs" "$cpu" "$vsc" "$user" "$pre" "$sleeps" "$p99" "$hp99" "$idle"
}
row "floodgate fast 429" "429 path" "nginx 429"
row "floodgate net/http 429" "429 path" "nginx 429"
row "bare fasthttp 429" "429 path" "nginx 429"
row "bare goroutine 429" "429 path" "nginx 429"
row "bare event loop 429" "429 path" "nginx 429"
row "flow on event loops 429" "429 path" "nginx 429"
row "flow on goroutines 429" "429 path" "nginx 429"
row "nginx 429" "429 path" ""
row "floodgate fast pass" "pass-through" "nginx pass"
row "floodgate net/http pass" "pass-through" "nginx pass"
row "bare Go proxy" "pass-through" "nginx pass"
row "bare fasthttp proxy" "pass-through" "nginx pass"
row "bare goroutine proxy" "pass-through" "nginx pass"
row "bare event loop proxy" "pass-through" "nginx pass"
row "flow on goroutines pass" "pass-through" "nginx pass"
row "nginx pass" "pass-through" ""
row "upstream (direct)" "upstream" ""
echo
awk -v f4="$(m "floodgate fast 429" "$CONNECTIONS" 1)" -v n4="$(m "nginx 429" "$CONNECTIONS" 1)" \
	-v fp="$(m "floodgate fast pass" "$CONNECTIONS" 1)" -v np="$(m "nginx pass" "$CONNECTIONS" 1)" \
	-v f4c="$(m "floodgate fast 429" "$CONNECTIONS" 3)" -v n4c="$(m "nginx 429" "$CONNECTIONS" 3)" \
	-v fpc="$(m "floodgate fast pass" "$CONNECTIONS" 3)" -v npc="$(m "nginx pass" "$CONNECTIONS" 3)" \
	-v f4h="$(m "floodgate fast 429" "$HIGH_CONNECTIONS" 2)" -v n4h="$(m "nginx 429" "$HIGH_CONNECTIONS" 2)" \
	-v fph="$(m "floodgate fast pass" "$HIGH_CONNECTIONS" 2)" -v nph="$(m "nginx pass" "$HIGH_CONNECTIONS" 2)" 'BEGIN {
	printf "fast engine, 429 path: %.2fx nginx limit_req req/s (goal 0.8x), %.2fx its requests per CPU second\n", f4 / n4, n4c / f4c
	printf "fast engine, pass-through: %.2fx nginx proxy_pass req/s (goal 0.8x), %.2fx its requests per CPU second\n", fp / np, npc / fpc
	printf "p99 at c='"$HIGH_CONNECTIONS"': 429 path %.2fx nginx, pass-through %.2fx nginx (goal at most 1.5x)\n", f4h / n4h, fph / nph
}'
# The 429 path's floors at HIGH_CONNECTIONS: a goroutine per connection
# doing no HTTP work at all against event loops, and the flow on loops.
awk -v g="$(m "bare goroutine 429" "$HIGH_CONNECTIONS" 2)" -v l="$(m "bare event loop 429" "$HIGH_CONNECTIONS" 2)" \
	-v fl="$(m "flow on event loops 429" "$HIGH_CONNECTIONS" 2)" -v n="$(m "nginx 429" "$HIGH_CONNECTIONS" 2)" 'BEGIN {
	printf "p99 at c='"$HIGH_CONNECTIONS"', 429 path floors: a goroutine per connection %.2fx nginx, event loops %.2fx, the flow on event loops %.2fx\n", g / n, l / n, fl / n
}'
# The req/s ratio of each round (the two servers measured minutes apart at
# most), and a warning when NGINX's own rounds spread by more than 15%:
# then the ratio of the medians says more about the machine than about the
# servers, and CPU per request is the figure to compare.
result_file() { echo "$work/results/$(tr ' /' '__' <<<"$1")-$2"; }
per_round() { # NAME NGINX-NAME LABEL
	paste -d' ' "$(result_file "$1" "$CONNECTIONS")" "$(result_file "$2" "$CONNECTIONS")" |
		awk -v label="$3" '{n = $(NF / 2 + 1); r = r sep sprintf("%.2f", $1 / n); sep = ", "; v[NR] = n}
		END {
			lo = v[1]; hi = v[1]
			for (i in v) { if (v[i] < lo) lo = v[i]; if (v[i] > hi) hi = v[i] }
			printf "%s: the rounds %s", label, r
			if (lo > 0 && hi / lo > 1.15) printf "; nginx'"'"'s own rounds ranged %d-%d req/s: compare CPU per request", lo, hi
			printf "\n"
		}'
}
per_round "floodgate fast 429" "nginx 429" "fast engine, 429 path vs nginx req/s"
per_round "floodgate fast pass" "nginx pass" "fast engine, pass-through vs nginx req/s"
# NGINX must not have logged its refusals (a write a refusal, which
# Floodgate does not make): say so loudly if it did.
if logged=$(grep -c 'limiting requests' "$work/front/logs/error.log" 2>/dev/null) && [ "$logged" -gt 0 ]; then
	echo "bench-gateway: NGINX logged $logged refusals: its 429 path was measured with a log write each" >&2
fi
printf 'fast engine, memory per idle connection: %s KiB (nginx %s KiB; goal at most 8 KiB), %s connections held %ss\n' \
	"${IDLE[floodgate fast pass]}" "${IDLE[nginx pass]}" "$IDLE_CONNECTIONS" "$IDLE_WAIT"
# Requests let through on the 429 path (a 2xx): the limit lets one a
# minute through; more would be a limit that did not bind, or a degraded
# decision failing open. The bare 429 servers answer 429 to all and limit
# nothing: they have no line.
awk -v minutes="$((($(date +%s) - spent_at + 59) / 60))" '{v = $NF; $NF = ""; sub(/ $/, ""); n[$0] += v} END {
	for (k in n) {
		if (k ~ /^bare /) continue
		printf "let through on the 429 path, %s: %d (the limit lets %d through in %d minutes)%s\n", k, n[k], minutes, minutes, (n[k] > minutes ? "  <- more than the limit lets through" : "")
	}
}' "$work/results/passed" | sort
