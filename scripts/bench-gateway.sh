#!/usr/bin/env bash
# Measures the gateway on loopback, in one run, with wrk:
#
#   pass-through  (limits never reached): a trivial upstream behind
#                 - a bare Go reverse proxy (httputil.ReverseProxy, same tuned transport),
#                 - floodgate serve (per-address and global token buckets, RateLimit fields),
#                 - NGINX with limit_req (same limits, never reached);
#   mostly rejected (a limit of one request a minute): floodgate serve and
#                 NGINX limit_req, both answering 429.
#
# It prints requests/s and p99 latency of each and the ratios: Floodgate's
# overhead against the bare proxy (goal < 15%) and Floodgate's 429 rate
# against NGINX's (goal >= 70%).
#
# Installs nginx and wrk from Debian's packages when they are missing.
# Everything listens on 127.0.0.1; every process this script starts is
# stopped by its PID when it ends.
#
# Environment: DURATION (default 10s), CONNECTIONS (50), THREADS (2),
# BASE_PORT (18100). GOGC, when set, reaches the Go programs (upstream, bare
# proxy, floodgate) alike.
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-10s}
CONNECTIONS=${CONNECTIONS:-50}
THREADS=${THREADS:-2}
BASE_PORT=${BASE_PORT:-18100}

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
need=()
command -v wrk >/dev/null 2>&1 || need+=(wrk)
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

work=$(mktemp -d /tmp/bench-gateway.XXXXXX)
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

# free_port prints the first port from $1 up that nothing listens on.
free_port() {
	local p=$1
	while (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; do p=$((p + 1)); done
	echo "$p"
}
# pick VAR: set VAR to the next free port (no subshell, so that the
# ports handed out stay distinct).
next=$BASE_PORT
pick() {
	local p
	p=$(free_port "$next")
	next=$((p + 1))
	printf -v "$1" '%s' "$p"
}

# wait_http URL: wait until something answers on URL (any status).
wait_http() {
	for _ in $(seq 1 200); do
		if curl -s -o /dev/null "$1"; then return 0; fi
		sleep 0.05
	done
	echo "bench-gateway: nothing answers on $1" >&2
	exit 1
}

echo "bench-gateway: building" >&2
go build -o "$work/floodgate" ./cmd/floodgate
go build -o "$work/benchgw" ./scripts/benchgw

pick UP
pick BARE
pick FG_PASS
pick FG_REJECT
pick NG_PASS
pick NG_REJECT

"$work/benchgw" upstream -addr "127.0.0.1:$UP" >/dev/null &
pids+=($!)
PID_UP=$!
"$work/benchgw" proxy -addr "127.0.0.1:$BARE" -target "http://127.0.0.1:$UP" >/dev/null &
pids+=($!)
PID_BARE=$!

# Floodgate: the same limits NGINX gets below.
cat >"$work/pass.yaml" <<EOF
version: 1
server:
  admin_listen: "off"
  headers: {ratelimit: true}
routes:
  - name: all
    match: {paths: ["/**"]}
    upstream: http://127.0.0.1:$UP
limits:
  - name: per-ip
    rate: 1000000
    burst: 1000000
    key: client_ip
    scope: global
EOF
cat >"$work/reject.yaml" <<EOF
version: 1
server:
  admin_listen: "off"
  headers: {ratelimit: true}
routes:
  - name: all
    match: {paths: ["/**"]}
    upstream: http://127.0.0.1:$UP
limits:
  - name: tiny
    rate: 1
    per: 1m
    burst: 1
    key: global
    scope: global
EOF
"$work/floodgate" serve --config "$work/pass.yaml" --listen "127.0.0.1:$FG_PASS" --log-level error >/dev/null &
pids+=($!)
PID_FG_PASS=$!
"$work/floodgate" serve --config "$work/reject.yaml" --listen "127.0.0.1:$FG_REJECT" --log-level error >/dev/null &
pids+=($!)
PID_FG_REJECT=$!

user_line=""
[ "$(id -u)" -eq 0 ] && user_line="user root;"
mkdir -p "$work/nginx/logs"
cat >"$work/nginx/nginx.conf" <<EOF
$user_line
worker_processes auto;
pid $work/nginx/nginx.pid;
error_log $work/nginx/logs/error.log error;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path $work/nginx/body;
    proxy_temp_path $work/nginx/proxy;
    fastcgi_temp_path $work/nginx/fastcgi;
    uwsgi_temp_path $work/nginx/uwsgi;
    scgi_temp_path $work/nginx/scgi;
    upstream up { server 127.0.0.1:$UP; keepalive 256; }
    limit_req_zone \$binary_remote_addr zone=pass:10m rate=1000000r/s;
    limit_req_zone \$server_port zone=tiny:1m rate=1r/m;
    limit_req_status 429;
    server {
        listen 127.0.0.1:$NG_PASS;
        location / {
            limit_req zone=pass burst=1000000 nodelay;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_pass http://up;
        }
    }
    server {
        listen 127.0.0.1:$NG_REJECT;
        location / {
            limit_req zone=tiny burst=1 nodelay;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_pass http://up;
        }
    }
}
EOF
"$NGINX" -p "$work/nginx" -c "$work/nginx/nginx.conf" -g 'daemon off;' 2>"$work/nginx/stderr" &
pids+=($!)
PID_NGINX=$!

for p in $UP $BARE $FG_PASS $FG_REJECT $NG_PASS $NG_REJECT; do
	wait_http "http://127.0.0.1:$p/"
done
# The tiny limits: spend the one request, check that both answer 429.
for p in $FG_REJECT $NG_REJECT; do
	curl -s -o /dev/null "http://127.0.0.1:$p/" || true
	code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$p/")
	if [ "$code" != 429 ]; then
		echo "bench-gateway: port $p answers $code, not 429" >&2
		exit 1
	fi
done
for p in $BARE $FG_PASS $NG_PASS; do
	code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$p/")
	if [ "$code" != 200 ]; then
		echo "bench-gateway: port $p answers $code, not 200" >&2
		exit 1
	fi
done

# cpu_ticks PID: CPU time (user+system, in clock ticks) of PID and its
# children that are still running (NGINX's workers).
cpu_ticks() {
	local total=0 p
	for p in $1 $(pgrep -P "$1" 2>/dev/null || true); do
		if [ -r "/proc/$p/stat" ]; then
			# Fields 14 and 15 after the command name (which may hold spaces).
			total=$((total + $(sed 's/.*) //' "/proc/$p/stat" | awk '{print $12 + $13}')))
		fi
	done
	echo "$total"
}
HZ=$(getconf CLK_TCK)

# measure NAME URL PID: run wrk; print requests/s, p99, and the CPU time
# the server process(es) spent per request (robust on a busy machine,
# where requests/s mostly measures what the other processes leave).
declare -A RPS P99 CPU
to_ms() {
	# wrk prints latencies as 1.23ms, 456.78us or 1.02s.
	awk -v v="$1" 'BEGIN {
		if (v ~ /us$/) { sub(/us$/, "", v); printf "%.3f", v / 1000 }
		else if (v ~ /ms$/) { sub(/ms$/, "", v); printf "%.3f", v }
		else if (v ~ /s$/) { sub(/s$/, "", v); printf "%.3f", v * 1000 }
		else printf "%s", v }'
}
measure() {
	local name=$1 url=$2 pid=$3 out before after reqs
	# A short warm-up opens the connections.
	wrk -t"$THREADS" -c"$CONNECTIONS" -d2s "$url" >/dev/null 2>&1 || true
	before=$(cpu_ticks "$pid")
	out=$(wrk -t"$THREADS" -c"$CONNECTIONS" -d"$DURATION" --latency "$url")
	after=$(cpu_ticks "$pid")
	reqs=$(awk '/requests in/ {print $1}' <<<"$out")
	RPS[$name]=$(awk '/^Requests\/sec:/ {printf "%.0f", $2}' <<<"$out")
	P99[$name]=$(to_ms "$(awk '$1 == "99%" {print $2}' <<<"$out")")
	CPU[$name]=$(awk -v t=$((after - before)) -v hz="$HZ" -v n="$reqs" 'BEGIN {printf "%.1f", t / hz * 1e6 / n}')
	local non2xx
	non2xx=$(awk '/Non-2xx or 3xx responses:/ {print $5}' <<<"$out")
	printf '%-24s %8s req/s   p99 %8s ms   %6s us CPU/req   non-2xx %s\n' "$name" "${RPS[$name]}" "${P99[$name]}" "${CPU[$name]}" "${non2xx:-0}"
}

echo "wrk -t$THREADS -c$CONNECTIONS -d$DURATION on $(nproc) CPUs; nginx $("$NGINX" -v 2>&1 | sed 's/.*nginx\///'), $(go version | awk '{print $3}')"
echo "(CPU/req counts the measured server only: the proxies' upstream is not included)"
measure "upstream (direct)" "http://127.0.0.1:$UP/" "$PID_UP"
measure "bare Go reverse proxy" "http://127.0.0.1:$BARE/" "$PID_BARE"
measure "floodgate pass-through" "http://127.0.0.1:$FG_PASS/" "$PID_FG_PASS"
measure "nginx limit_req pass" "http://127.0.0.1:$NG_PASS/" "$PID_NGINX"
measure "floodgate 429" "http://127.0.0.1:$FG_REJECT/" "$PID_FG_REJECT"
measure "nginx limit_req 429" "http://127.0.0.1:$NG_REJECT/" "$PID_NGINX"

awk -v fg="${RPS[floodgate pass-through]}" -v bare="${RPS[bare Go reverse proxy]}" \
	-v ngp="${RPS[nginx limit_req pass]}" -v fr="${RPS[floodgate 429]}" -v nr="${RPS[nginx limit_req 429]}" \
	-v cfg="${CPU[floodgate pass-through]}" -v cbare="${CPU[bare Go reverse proxy]}" \
	-v cfr="${CPU[floodgate 429]}" -v cnr="${CPU[nginx limit_req 429]}" 'BEGIN {
	printf "\nfloodgate pass-through vs bare proxy: %.1f%% fewer req/s, %.1f%% more CPU per request (goal < 15%%)\n", (1 - fg / bare) * 100, (cfg / cbare - 1) * 100
	printf "floodgate pass-through vs nginx limit_req: %.0f%% of its req/s\n", fg / ngp * 100
	printf "floodgate 429 path vs nginx limit_req 429: %.0f%% of its req/s, %.0f%% of its requests per CPU second (goal >= 70%%)\n", fr / nr * 100, cnr / cfr * 100
}'
