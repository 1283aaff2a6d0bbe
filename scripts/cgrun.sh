#!/bin/bash
# cgrun.sh LIMIT_MIB FILE [coordinator flags]: trains FILE with a
# nats-server and two `worker -parallel 1` processes, each in a memory
# cgroup of its own limited to LIMIT_MIB (made under this shell's own
# group; needs root, cgroup v1 or v2); with ONE=1 only worker 1 is
# limited, with LIMIT_MIB 0 neither. Prints the coordinator's exit
# status, objective, training time and peak memory, and for each worker
# its peak (or that it was killed) and its "loaded shards" line
# (shard_bytes, compact).
# BINDIR (default /tmp/bin) holds coordinator, worker and nats-server;
# WORKER_FLAGS go to both workers (e.g. -compact=false).
set -uo pipefail
lim=$1; f=$2; shift 2
bin=${BINDIR:-/tmp/bin}
if v1=$(grep -E '^[0-9]+:([^:]*,)?memory(,[^:]*)?:' /proc/self/cgroup | cut -d: -f3) && [ -d /sys/fs/cgroup/memory ]; then
	base=/sys/fs/cgroup/memory$v1/osgm-cgrun
	limit() { mkdir -p "$1" && echo $((lim << 20)) >"$1/memory.limit_in_bytes"; }
	peak() { echo "group peak $(($(cat "$1/memory.max_usage_in_bytes") >> 20)) MiB"; }
else
	base=/sys/fs/cgroup$(grep '^0::' /proc/self/cgroup | cut -d: -f3)/osgm-cgrun
	limit() { mkdir -p "$1" && echo $((lim << 20)) >"$1/memory.max"; }
	peak() { echo "group peak $(($(cat "$1/memory.peak" 2>/dev/null || echo 0) >> 20)) MiB"; }
fi
logs=$(mktemp -d "${TMPDIR:-/tmp}/cgrun.XXXX")
port=$((20000 + RANDOM % 10000))
"$bin/nats-server" -p "$port" >/dev/null 2>&1 &
ns=$!
sleep 0.3
pids=()
for i in 1 2; do
	run="exec $bin/worker ${WORKER_FLAGS:-} -nats nats://127.0.0.1:$port -parallel 1"
	if [ "$lim" != 0 ] && { [ "$i" = 1 ] || [ -z "${ONE:-}" ]; }; then
		limit "$base$i" || exit 1
		run="echo \$\$ > $base$i/cgroup.procs; $run"
	fi
	sh -c "$run" 2>"$logs/worker$i" &
	pids+=($!)
done
sleep 0.3
/usr/bin/time -o "$logs/time" -f "%M" timeout "${TIMEOUT:-180}" "$bin/coordinator" -nats "nats://127.0.0.1:$port" -min-workers 2 "$@" "$f" "$logs/model" 2>"$logs/coordinator"
echo "coordinator exit $?, $(grep -o '"objective":\[[^]]*\]' "$logs/coordinator"), $(grep -o '"train":[0-9.]*' "$logs/coordinator"), peak $(tail -1 "$logs/time") KB"
for i in 1 2; do
	p=${pids[$((i - 1))]}
	echo "worker $i: $(grep VmHWM /proc/"$p"/status 2>/dev/null || echo "gone (killed)"), $([ -d "$base$i" ] && peak "$base$i"), $(grep -o '"msg":"loaded shards".*' "$logs/worker$i" | grep -o '"count":[0-9]*\|"shard_bytes":[0-9]*\|"compact":[0-9]*' | tr '\n' ' ')"
done
kill "${pids[@]}" 2>/dev/null
kill $ns
wait 2>/dev/null
rmdir "$base"1 "$base"2 2>/dev/null
echo "logs in $logs"
