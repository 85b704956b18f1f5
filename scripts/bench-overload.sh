#!/usr/bin/env bash
# The overload benchmark (issue 22): floodgate serve in front of an upstream
# whose capacity is known and changes, with no limit, a fixed concurrency
# limit and the adaptive limit, in one run.
#
# Builds floodgate and scripts/benchoverload and runs the latter, which
# starts the upstream in its own process on loopback (WORKERS workers that
# each sleep SERVICE per request, behind a bounded queue: a capacity of
# WORKERS/SERVICE requests a second whatever the CPU does, so that the
# numbers mean something on a busy two-core machine), measures the no-load
# latency through the gateway, and then for each case and configuration
# starts one floodgate serve on free loopback ports and sends it open-loop
# load (fixed arrival instants, several tenants, the three tiers mixed):
#   - 0.5x, 1x, 2x and 3x the capacity, DURATION each;
#   - a step: STEP_LOAD times the capacity while the upstream's workers are
#     halved for the middle 20 s of 50 s;
#   - tenants: three tenants at their share (a quarter of the capacity
#     each), alone and beside a fourth offering 20 times its share.
# It prints Markdown tables (goodput, latency of admitted requests,
# refusals by tier and tenant, the limit, and the issue's goals checked)
# and writes docs/img/overload-step.svg and overload-3x.svg (SVG_DIR).
# The full run takes about ten minutes; QUICK=1 takes two, to check the
# setup. Every process it starts is stopped by its PID when it ends.
#
# Environment: QUICK (unset), CONFIGS ("none,fixed,adaptive"), CASES
# ("load,step,tenant"), WORKERS (16), SERVICE (50ms), DURATION (15s),
# STEP_LOAD (1.5), SVG_DIR (docs/img; "" writes no pictures). Further
# flags of benchoverload (see -h) go after the script's name.
set -euo pipefail
cd "$(dirname "$0")/.."

CONFIGS=${CONFIGS:-none,fixed,adaptive}
CASES=${CASES:-load,step,tenant}
WORKERS=${WORKERS:-16}
SERVICE=${SERVICE:-50ms}
DURATION=${DURATION:-15s}
STEP_LOAD=${STEP_LOAD:-1.5}
SVG_DIR=${SVG_DIR-docs/img}

work=$(mktemp -d /tmp/bench-overload.XXXXXX)
pid=""
cleanup() {
	if [ -n "$pid" ]; then
		kill "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	fi
	rm -rf "$work"
}
trap cleanup EXIT INT TERM

echo "bench-overload: building" >&2
go build -o "$work/floodgate" ./cmd/floodgate
go build -o "$work/benchoverload" ./scripts/benchoverload
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

args=(-floodgate "$work/floodgate" -configs "$CONFIGS" -cases "$CASES" -workers "$WORKERS"
	-service "$SERVICE" -duration "$DURATION" -step-load "$STEP_LOAD" -svg "$SVG_DIR")
[ -n "${QUICK:-}" ] && args+=(-quick)
echo "bench-overload: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg), $(go version | awk '{print $3}'), commit $(git rev-parse --short HEAD)" >&2
# benchoverload stops the floodgate processes it starts; this script stops
# benchoverload if it is interrupted.
"$work/benchoverload" "${args[@]}" "$@" &
pid=$!
wait "$pid"
pid=""
