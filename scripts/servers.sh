#!/bin/bash
# servers.sh FILE WORKERS [SERVERS...]: what each NATS server sends in a
# training over several servers. For each server count S (default 1 3) it
# starts S nats-server processes routed into one cluster, WORKERS
# standalone `worker -parallel 1` processes (worker i on server i mod S,
# given that server's URL alone) and
#   coordinator -nats URL0 -min-workers WORKERS -points POINTS -method hdm -max-iter 100 -e 1e-12 FILE
# on server 0, then reads every server's out_bytes from its monitoring
# port (/varz) and prints MB a round per server, server 0 first, with what
# the coordinator sent and received (its bus line) and the model's digest
# (the same for every S). POINTS is broadcast by default.
# BINDIR (default /tmp/bin) holds coordinator, worker and nats-server.
set -uo pipefail
f=${1:?usage: servers.sh FILE WORKERS [SERVERS...]}; w=${2:?usage: servers.sh FILE WORKERS [SERVERS...]}
shift 2
counts=${*:-1 3}
bin=${BINDIR:-/tmp/bin}
points=${POINTS:-broadcast}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
for s in $counts; do
	base=$((20000 + RANDOM % 10000))
	routes=""
	for i in $(seq 0 $((s - 1))); do routes="$routes${routes:+,}nats://127.0.0.1:$((base + 100 + i))"; done
	pids=""
	for i in $(seq 0 $((s - 1))); do
		"$bin/nats-server" -a 127.0.0.1 -p $((base + i)) -m $((base + 200 + i)) -n "s$i" \
			--cluster_name osgm --cluster "nats://127.0.0.1:$((base + 100 + i))" --routes "$routes" >"$tmp/server$i" 2>&1 &
		pids="$pids $!"
	done
	sleep 1 # the routes form, and interest spreads, within it
	for i in $(seq 0 $((w - 1))); do
		"$bin/worker" -nats "nats://127.0.0.1:$((base + i % s))" -parallel 1 >>"$tmp/workers" 2>&1 &
		pids="$pids $!"
	done
	OSGM_LOG_FORMAT=json timeout 600 "$bin/coordinator" -nats "nats://127.0.0.1:$base" -min-workers "$w" -points "$points" \
		-method hdm -max-iter 100 -e 1e-12 "$f" "$tmp/model" >"$tmp/log" 2>&1 ||
		{ echo "S=$s failed:"; tail -5 "$tmp/log"; }
	bus=$(grep -h '"bus"' "$tmp/log" | python3 -c 'import sys, json; d = json.loads(sys.stdin.read()); print(d["rounds"], d["bytes_down"], d["bytes_up"])')
	out=""
	for i in $(seq 0 $((s - 1))); do
		out="$out $(curl -s "http://127.0.0.1:$((base + 200 + i))/varz" | python3 -c 'import sys, json; print(json.load(sys.stdin)["out_bytes"])')"
	done
	# shellcheck disable=SC2086
	kill $pids 2>/dev/null
	wait 2>/dev/null
	echo "$s $bus $(sha256sum <"$tmp/model" | cut -c1-16)$out"
done | python3 -c '
import sys
print("servers  rounds  model             MB a round: coordinator sends, receives; each server sends (server 0, the coordinator'"'"'s, first)")
for line in sys.stdin:
    f = line.split()
    if not f[0].isdigit():
        print(line, end=""); continue
    s, rounds, down, up, digest, out = int(f[0]), int(f[1]), int(f[2]), int(f[3]), f[4], [int(x) for x in f[5:]]
    mb = lambda b: "%.2f" % (b / rounds / 1e6)
    print("%7d  %6d  %s  %s, %s;  %s" % (s, rounds, digest, mb(down), mb(up), "  ".join(mb(b) for b in out)))'
