#!/usr/bin/env bash
# The export measured from outside, as a user would: a daemon on the
# simulated box (bin/cxlpoold), one granted chunk exported, and
# `poolctl export bench` beside the raw TCP baseline (benchfig raw-bench:
# one connection, one read at a time, like export bench with --conns 1)
# and Redis GET (redis-benchmark -c 1) of the same size, in interleaved
# rounds, so that a change of load falls on all of them alike. Prints
# go test -bench lines (package "outside") for cmd/benchfig; loopback only.
#
# Where the processes run is fixed, the same for all three: on a virtual
# machine the round trip of a small request is mostly the wake-up of the
# CPUs it sleeps on, so a comparison of unpinned runs says where the
# scheduler put each, not what it measured (64 B: ~10 µs on one CPU, ~65
# µs across two, on the same code). The servers run on CPU 0 and the
# clients on CPU 1, as a client on another machine would be; the small
# READs are measured again with the clients on CPU 0 too (names ending
# in Shared). With one CPU nothing is pinned and only the first set runs.
#
#   bench/outside.sh [ROUNDS] [DURATION]     (after make build)
set -euo pipefail
rounds=${1:-5}
dur=${2:-2s}
bin=${BIN:-bin}
tmp=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT

# Ports from the dynamic range, away from the defaults of make run.
base=$((20000 + RANDOM % 20000))
api=127.0.0.1:$base exp=127.0.0.1:$((base + 1)) raw=127.0.0.1:$((base + 2)) redisport=$((base + 3))

"$bin/cxlpoold" --device sim --data "$tmp/data" --listen "$api" --http --export-listen "$exp" >"$tmp/daemon.log" 2>&1 &
pids+=($!)
"$bin/benchfig" raw-serve "$raw" &
pids+=($!)
for _ in $(seq 200); do
	[ -s "$tmp/data/initial-admin-password" ] && curl -sf -o /dev/null "http://$api/redfish/v1" && break
	sleep 0.1
done
export HOME=$tmp POOLCTL_SERVER=http://$api
POOLCTL_PASSWORD=$(cat "$tmp/data/initial-admin-password")
export POOLCTL_PASSWORD
poolctl() { "$bin/poolctl" "$@"; }
poolctl --user admin login >/dev/null
poolctl request 256MiB --host Host0 >/dev/null
x=$(poolctl --json export create 1 --client bench)
id=$(jq -r .id <<<"$x")
printf '%s\n' "$(jq -r .token <<<"$x")" >"$tmp/token"

redis=""
if command -v redis-server >/dev/null && command -v redis-benchmark >/dev/null; then
	redis-server --port "$redisport" --bind 127.0.0.1 --save '' --appendonly no >/dev/null &
	pids+=($!)
	for _ in $(seq 100); do redis-cli -p "$redisport" ping >/dev/null 2>&1 && break; sleep 0.1; done
	# GET of a 64-byte value: the key redis-benchmark reads must exist.
	redis-benchmark -p "$redisport" -t set -d 64 -n 1 -c 1 -q >/dev/null
	redis=yes
else
	echo "# note: no redis-server/redis-benchmark (apt-get install redis-server redis-tools): no Redis baseline" 
fi

# on CPU: the clients' placement for this set ("" with one CPU).
on=()
export_bench() { # NAME SIZE
	"${on[@]}" "$bin/poolctl" --json export bench --export "$id" --token-file "$tmp/token" --server "$exp" \
		--size "$2" --conns 1 --duration "$dur" | "$bin/benchfig" poolctl "$1"
}
raw_bench() { "${on[@]}" "$bin/benchfig" raw-bench -addr "$raw" -size "$2" -duration "$dur" -name "$1"; }
redis_bench() { # NAME SIZE: about as many GETs as the others make in DURATION
	"${on[@]}" redis-benchmark -p "$redisport" -t get -d "$2" -c 1 -n 20000 --csv | "$bin/benchfig" redis "$1" "$2"
}

small=(export_bench raw_bench)
[ -n "$redis" ] && small+=(redis_bench)
names=([0]=Export64 [1]=Raw64 [2]=Redis64)
placements=(1)
if [ "$(nproc)" -ge 2 ] && command -v taskset >/dev/null; then
	# Every thread of every server (the daemon's too) onto CPU 0.
	for p in "${pids[@]}"; do taskset -a -p -c 0 "$p" >/dev/null; done
	placements=(1 0)
else
	echo "# note: one CPU (or no taskset): nothing pinned"
fi
for cpu in "${placements[@]}"; do
	suffix=""
	((cpu == 0)) && suffix=Shared
	on=()
	((${#placements[@]} > 1)) && on=(taskset -c "$cpu")
	for r in $(seq "$rounds"); do
		# who goes first rotates
		for k in $(seq 0 $((${#small[@]} - 1))); do
			i=$(((k + r) % ${#small[@]}))
			"${small[$i]}" "${names[$i]}$suffix" 64
		done
		[ -n "$suffix" ] && continue
		if ((r % 2)); then
			export_bench Export1M 1048576; raw_bench Raw1M 1048576
		else
			raw_bench Raw1M 1048576; export_bench Export1M 1048576
		fi
	done
done
