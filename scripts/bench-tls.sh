#!/usr/bin/env bash
# Measures TLS on the gateway listener against NGINX with the same
# certificate (an ECDSA P-256 one made here with openssl), on loopback.
#
# A fast upstream (benchgw upstream) stands behind floodgate serve on each
# engine (server.tls, a per-address limit that never binds) and behind
# NGINX (ssl, limit_req, proxy_pass with keepalive). Two jobs, by benchgw
# tls with CLIENTS clients for DURATION:
#   - handshake: a full TLS handshake per new connection (no session
#     resumption), then the connection closed;
#   - request: HTTP/1.1 GETs on kept-alive TLS connections.
# First, on servers that have served nothing yet, the memory each spends
# per idle kept-alive TLS connection: IDLE_CONNECTIONS of them (each after
# one request) held IDLE_WAIT seconds to each server at once, the growth
# of its resident memory divided by their number (the edge engine parks
# an idle connection and, once at least 1,024 were parked and none for 25
# seconds, returns what they gave back to the system: the defaults are
# past both; with fewer connections the figure holds what the Go runtime
# has not given back yet).
# ROUNDS rounds, each measuring every server once in turn (the order
# rotates), so that a busy machine weighs on all alike; the table gives
# the median of the rounds: operations a second, p50 and p99 in µs, and
# CPU time per operation of the measured server's processes (robust on a
# busy machine), with the ratios to NGINX.
#
# Environment: DURATION (default 5s), ROUNDS (3), CLIENTS (8),
# IDLE_CONNECTIONS (3000, fewer when the file descriptor limit does not
# allow them; 0: no idle phase), IDLE_WAIT (35), BASE_PORT (18300).
# Everything listens on 127.0.0.1; every process this script starts is
# stopped by its PID when it ends.
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-5s}
ROUNDS=${ROUNDS:-3}
CLIENTS=${CLIENTS:-8}
IDLE_CONNECTIONS=${IDLE_CONNECTIONS:-3000}
IDLE_WAIT=${IDLE_WAIT:-35}
BASE_PORT=${BASE_PORT:-18300}
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
[ -x "$NGINX" ] || { echo "bench-tls: NGINX is not installed (apt-get install nginx-light)" >&2; exit 1; }

NAME=bench-tls
# shellcheck source=scripts/procs.sh
. scripts/procs.sh

# The idle connections take a descriptor each in the client and in the
# server (whose processes inherit the limit, and raise their own).
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
fds=$(ulimit -n)
if [ "$IDLE_CONNECTIONS" -gt 0 ] && [ "$fds" != unlimited ] && [ "$IDLE_CONNECTIONS" -gt $((fds - 200)) ]; then
	echo "bench-tls: ulimit -n is $fds: $((fds - 200)) idle connections, not $IDLE_CONNECTIONS" >&2
	IDLE_CONNECTIONS=$((fds - 200))
fi

# shellcheck source=scripts/ports.sh
. scripts/ports.sh
pick UP
pick FAST
pick NET
pick NG

build_gateway_bench
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 -subj /CN=bench.example \
	-addext "subjectAltName=DNS:bench.example,IP:127.0.0.1" -keyout "$work/key.pem" -out "$work/cert.pem" 2>/dev/null

"$work/benchgw" upstream -addr "127.0.0.1:$UP" >/dev/null &
pids+=($!)

cat >"$work/gw.yaml" <<EOF
version: 1
server:
  admin_listen: "off"
  ops_listen: "off"
  tls:
    certs: [{cert: cert.pem, key: key.pem}]
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
declare -A PID
"$work/floodgate" serve --engine fast --config "$work/gw.yaml" --listen "127.0.0.1:$FAST" --log-level error >/dev/null &
pids+=($!)
PID[fast]=$!
"$work/floodgate" serve --engine net/http --config "$work/gw.yaml" --listen "127.0.0.1:$NET" --log-level error >/dev/null &
pids+=($!)
PID[net]=$!

user_line=""
[ "$(id -u)" -eq 0 ] && user_line="user root;"
mkdir -p "$work/nginx/logs"
cat >"$work/nginx/nginx.conf" <<EOF
$user_line
worker_processes auto;
pid $work/nginx/nginx.pid;
error_log $work/nginx/logs/error.log error;
events { worker_connections 16384; }
http {
    access_log off;
    keepalive_requests 100000000;
    client_body_temp_path $work/nginx/body;
    proxy_temp_path $work/nginx/proxy;
    fastcgi_temp_path $work/nginx/fastcgi;
    uwsgi_temp_path $work/nginx/uwsgi;
    scgi_temp_path $work/nginx/scgi;
    upstream up { server 127.0.0.1:$UP; keepalive 256; }
    limit_req_zone \$binary_remote_addr zone=pass:10m rate=1000000r/s;
    server {
        listen 127.0.0.1:$NG ssl;
        ssl_certificate $work/cert.pem;
        ssl_certificate_key $work/key.pem;
        ssl_protocols TLSv1.2 TLSv1.3;
        location / {
            limit_req zone=pass burst=1000000 nodelay;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_pass http://up;
        }
    }
}
EOF
"$NGINX" -p "$work/nginx" -c "$work/nginx/nginx.conf" -g 'daemon off;' 2>"$work/nginx/stderr" &
pids+=($!)
PID[nginx]=$!

for p in $FAST $NET $NG; do
	for _ in $(seq 1 200); do
		if curl -s -o /dev/null --cacert "$work/cert.pem" --resolve "bench.example:$p:127.0.0.1" "https://bench.example:$p/"; then break; fi
		sleep 0.05
	done
	code=$(curl -s -o /dev/null -w '%{http_code}' --cacert "$work/cert.pem" --resolve "bench.example:$p:127.0.0.1" "https://bench.example:$p/")
	[ "$code" = 200 ] || { echo "bench-tls: port $p answers $code, not 200" >&2; exit 1; }
done

HZ=$(getconf CLK_TCK)

NAMES=(fast net nginx)
declare -A PORT=([fast]=$FAST [net]=$NET [nginx]=$NG)
declare -A LABEL=([fast]="floodgate fast" [net]="floodgate net/http" [nginx]="nginx")

declare -A IDLE
if [ "$IDLE_CONNECTIONS" -gt 0 ]; then
	specs=()
	for name in "${NAMES[@]}"; do
		specs+=("$name|${PID[$name]}|https://127.0.0.1:${PORT[$name]}/")
	done
	while IFS='|' read -r name kib; do
		IDLE[$name]=$kib
	done < <(idle_kib "$IDLE_CONNECTIONS" "$IDLE_WAIT" "-ca $work/cert.pem -server-name bench.example" "${specs[@]}")
fi
declare -A RES
for round in $(seq 1 "$ROUNDS"); do
	for mode in handshake request; do
		for i in 0 1 2; do
			name=${NAMES[$(((i + round) % 3))]}
			before=$(cpu_ticks "${PID[$name]}")
			read -r n rate p50 p99 failed < <("$work/benchgw" tls -target "https://127.0.0.1:${PORT[$name]}/" -ca "$work/cert.pem" \
				-server-name bench.example -mode "$mode" -c "$CLIENTS" -d "$DURATION")
			after=$(cpu_ticks "${PID[$name]}")
			cpu_us=$(awk -v t=$((after - before)) -v hz="$HZ" -v n="$n" 'BEGIN { printf "%.1f", t / hz * 1e6 / n }')
			RES[$mode,$name]+="$rate $p50 $p99 $cpu_us $failed;"
			echo "bench-tls: round $round $mode ${LABEL[$name]}: $rate/s p50 ${p50}µs p99 ${p99}µs cpu ${cpu_us}µs/op failed $failed" >&2
		done
	done
done

# median COLUMN "v v v;v v v;...": the median of a column over the rounds.
median() {
	echo "$2" | tr ';' '\n' | awk -v c="$1" 'NF { print $c }' | sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'
}
printf '\n%-10s %-20s %10s %9s %9s %12s %10s %10s\n' mode server "ops/s" "p50 µs" "p99 µs" "cpu µs/op" "x nginx/s" "x nginx cpu"
for mode in handshake request; do
	ng_rate=$(median 1 "${RES[$mode,nginx]}")
	ng_cpu=$(median 4 "${RES[$mode,nginx]}")
	for name in fast net nginx; do
		r=${RES[$mode,$name]}
		rate=$(median 1 "$r")
		cpu=$(median 4 "$r")
		printf '%-10s %-20s %10s %9s %9s %12s %10s %10s\n' "$mode" "${LABEL[$name]}" "$rate" "$(median 2 "$r")" "$(median 3 "$r")" "$cpu" \
			"$(awk -v a="$rate" -v b="$ng_rate" 'BEGIN { printf "%.2f", a / b }')" "$(awk -v a="$cpu" -v b="$ng_cpu" 'BEGIN { printf "%.2f", a / b }')"
	done
done
if [ "$IDLE_CONNECTIONS" -gt 0 ]; then
	printf '\nKiB per idle kept-alive TLS connection (%s held %ss): ' "$IDLE_CONNECTIONS" "$IDLE_WAIT"
	for name in "${NAMES[@]}"; do
		printf '%s %s; ' "${LABEL[$name]}" "${IDLE[$name]}"
	done
	echo
fi
