#!/bin/bash
# cgrun.sh LIMIT_MIB FILE [coordinator flags]: trains FILE with a
# nats-server and two `worker -parallel 1` processes, worker 1 in a memory
# cgroup limited to LIMIT_MIB (made under this shell's own group; needs
# root, cgroup v1 or v2), worker 2 outside it. Prints the coordinator's
# exit status, objective and training time, worker 1's peak (or that it
# was killed) and its "loaded shards" line (shard_bytes, compact).
# BINDIR (default /tmp/bin) holds coordinator, worker and nats-server;
# WORKER_FLAGS go to both workers (e.g. -compact=false).
set -uo pipefail
lim=$1; f=$2; shift 2
bin=${BINDIR:-/tmp/bin}
if v1=$(grep -E '^[0-9]+:([^:]*,)?memory(,[^:]*)?:' /proc/self/cgroup | cut -d: -f3) && [ -d /sys/fs/cgroup/memory ]; then
	cg=/sys/fs/cgroup/memory$v1/osgm-cgrun
	mkdir -p "$cg" && echo $((lim << 20)) >"$cg/memory.limit_in_bytes" || exit 1
	peak() { echo "group peak $(($(cat "$cg/memory.max_usage_in_bytes") >> 20)) MiB"; }
else
	cg=/sys/fs/cgroup$(grep '^0::' /proc/self/cgroup | cut -d: -f3)/osgm-cgrun
	mkdir -p "$cg" && echo $((lim << 20)) >"$cg/memory.max" || exit 1
	peak() { cat "$cg/memory.peak" 2>/dev/null; }
fi
logs=$(mktemp -d "${TMPDIR:-/tmp}/cgrun.XXXX")
port=$((20000 + RANDOM % 10000))
"$bin/nats-server" -p "$port" >/dev/null 2>&1 &
ns=$!
sleep 0.3
sh -c "echo \$\$ > $cg/cgroup.procs; exec $bin/worker ${WORKER_FLAGS:-} -nats nats://127.0.0.1:$port -parallel 1" 2>"$logs/worker1" &
w1=$!
"$bin/worker" ${WORKER_FLAGS:-} -nats "nats://127.0.0.1:$port" -parallel 1 2>"$logs/worker2" &
w2=$!
sleep 0.3
timeout 180 "$bin/coordinator" -nats "nats://127.0.0.1:$port" -min-workers 2 "$@" "$f" "$logs/model" 2>"$logs/coordinator"
echo "coordinator exit $?, $(grep -o '"objective":\[[^]]*\]' "$logs/coordinator"), $(grep -o '"train":[0-9.]*' "$logs/coordinator")"
grep VmHWM /proc/$w1/status 2>/dev/null || echo "worker 1 is gone (killed)"
peak
grep -o '"msg":"loaded shards".*' "$logs/worker1" | grep -o '"count":[0-9]*\|"shard_bytes":[0-9]*\|"compact":[0-9]*' | tr '\n' ' '
echo
kill $w1 $w2 2>/dev/null
kill $ns
wait 2>/dev/null
rmdir "$cg" 2>/dev/null
echo "logs in $logs"
