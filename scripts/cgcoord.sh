#!/bin/bash
# cgcoord.sh LIMIT_MIB BINDIR [coordinator flags] FILE MODEL: trains with
# BINDIR/coordinator (embedded server, in-process workers) in a memory
# cgroup of its own limited to LIMIT_MIB (made under this shell's group;
# needs root, cgroup v1 or v2). Prints how the run ended (killed or the
# trained line's problems at a time, passes and training time), its peak
# resident memory and the group's peak.
set -uo pipefail
lim=$1; bin=$2; shift 2
if v1=$(grep -E '^[0-9]+:([^:]*,)?memory(,[^:]*)?:' /proc/self/cgroup | cut -d: -f3) && [ -d /sys/fs/cgroup/memory ]; then
	g=/sys/fs/cgroup/memory$v1/osgm-cgcoord$$
	mkdir -p "$g" && echo $((lim << 20)) >"$g/memory.limit_in_bytes" || exit 1
	peak() { echo $(($(cat "$g/memory.max_usage_in_bytes") >> 20)); }
else
	g=/sys/fs/cgroup$(grep '^0::' /proc/self/cgroup | cut -d: -f3)/osgm-cgcoord$$
	mkdir -p "$g" && echo $((lim << 20)) >"$g/memory.max" || exit 1
	peak() { echo $(($(cat "$g/memory.peak" 2>/dev/null || echo 0) >> 20)); }
fi
out=$(/usr/bin/time -f 'exit %x, %e s, peak RSS %M KB' sh -c "echo \$\$ > $g/cgroup.procs; exec $bin/coordinator $*" 2>&1)
echo "$out" | grep -o '"problems_at_a_time":[0-9]*\|"passes":[0-9]*\|"train":[0-9.]*\|Command terminated by signal [0-9]*\|^exit .*' | tr '\n' ' '
echo "group peak $(peak) MiB"
sleep 0.2
rmdir "$g"
