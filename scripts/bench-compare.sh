#!/usr/bin/env bash
# Compares the hot-path benchmarks of two commits on this machine, in one run:
# the benchmarks of each package are compiled once from each tree (go test -c),
# then run in ROUNDS interleaved rounds (the older first in odd rounds, the
# newer first in even ones), so that a busy machine weighs on both alike; then
# benchstat gives medians, the change and its p-value.
#
#   scripts/bench-compare.sh BASE [NEW]     (commits; NEW defaults to HEAD)
#
# The benchmarks: algo's Decide of every algorithm; the embedded store's keyed
# decisions and three limits through the engine; the gateway's middleware
# (pass and 429), a policy file through it and the reverse proxy over
# loopback; the edge engine's 429 path; the Envoy RLS service on the embedded
# store and on a local Redis (the Redis benchmark starts its own
# redis-server). A benchmark that moved to another package between the commits
# is found in either (the edge engine moved from gateway to gateway/edge).
#
# Environment: ROUNDS (6), BENCHTIME (1s), CPU (2). Needs benchstat
# (go install golang.org/x/perf/cmd/benchstat@latest) and redis-server.
set -euo pipefail
cd "$(dirname "$0")/.."

base=${1:?usage: bench-compare.sh BASE [NEW]}
new=${2:-HEAD}
ROUNDS=${ROUNDS:-6}
BENCHTIME=${BENCHTIME:-1s}
CPU=${CPU:-2}
benchstat=$(command -v benchstat || echo "$(go env GOPATH)/bin/benchstat")
[ -x "$benchstat" ] || { echo "bench-compare: benchstat not found" >&2; exit 1; }

tmp=$(mktemp -d)
trap 'git worktree remove --force "$tmp/base" >/dev/null 2>&1 || true; git worktree remove --force "$tmp/new" >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT INT TERM
git worktree add --detach -q "$tmp/base" "$base"
git worktree add --detach -q "$tmp/new" "$new"

# package directory | benchmark pattern
jobs=(
	"algo|^BenchmarkDecide$"
	"limiter|^Benchmark(Check|CheckAllowed|CheckDegraded|ReserveSettle)$"
	"store/memstore|^Benchmark(Keyed|KeyedFresh|ThreeHits)$"
	"gateway|^Benchmark(MiddlewarePass|MiddlewareReject|PolicyPass|ProxyFloodgate)$"
	"gateway|^BenchmarkEdgeReject$"
	"gateway/edge|^BenchmarkEdgeReject$"
	"rls|^BenchmarkShouldRateLimit(Redis)?$"
)

build() { # build TREE: compiles each job's package of the tree into $tmp/bin-TREE
	mkdir -p "$tmp/bin-$1"
	for j in "${jobs[@]}"; do
		pkg=${j%%|*}
		bin="$tmp/bin-$1/$(echo "$pkg" | tr / _).test"
		[ -e "$bin" ] && continue
		if [ -d "$tmp/$1/$pkg" ]; then
			(cd "$tmp/$1" && go test -c -o "$bin" "./$pkg" >/dev/null) || rm -f "$bin"
		fi
	done
}
echo "bench-compare: building $base and $new" >&2
build base
build new

run() { # run TREE: one round of every job with the tree's binaries, appended to $tmp/TREE.txt
	for j in "${jobs[@]}"; do
		pkg=${j%%|*} pat=${j#*|}
		bin="$tmp/bin-$1/$(echo "$pkg" | tr / _).test"
		[ -x "$bin" ] || continue
		# From the package's own directory, for its testdata.
		(cd "$tmp/$1/$pkg" && "$bin" -test.run '^$' -test.bench "$pat" -test.benchtime "$BENCHTIME" -test.cpu "$CPU" -test.benchmem 2>/dev/null) |
			grep -E '^Benchmark' >>"$tmp/$1.txt" || true
	done
}
for r in $(seq 1 "$ROUNDS"); do
	echo "bench-compare: round $r of $ROUNDS" >&2
	if [ $((r % 2)) -eq 1 ]; then run base; run new; else run new; run base; fi
done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
"$benchstat" "base=$tmp/base.txt" "new=$tmp/new.txt"
