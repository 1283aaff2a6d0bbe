#!/bin/bash
# scaling.sh FILE [N] [WORKERS...]: time a pass with more workers. For each
# worker count W (default 1 2) it starts a nats-server and W standalone
# `worker -parallel 1` processes (one core each), runs
#   coordinator -nats URL -min-workers W -method hdm -max-iter 100 -e 1e-12 FILE
# (HDM makes exactly one value+gradient pass per iteration), and takes the
# log's train/passes. The counts are alternated N times (default 3); it
# prints per count the median ms a pass, the speed-up over the first count,
# the bytes down and up a round (the coordinator's bus line), and whether
# every run wrote the same model bits.
# BINDIR (default /tmp/bin) holds coordinator, worker and nats-server.
# ITERS (default 100) sets -max-iter; REDUCE (default tree) the
# coordinator's -reduce: tree (workers add the sums among themselves) or
# star (each sends its own to the coordinator); POINTS (default auto) its
# -points. CONTAINERS=1 runs the same on
# deploy/compose.yaml instead, with W worker containers and the
# coordinator in a container (images from OSGM_IMAGE and NATS_IMAGE, for
# example from scripts/images.sh): what the container network costs.
# With CONTAINERS=1, SERVERS=3 layers deploy/compose.cluster.yaml (workers
# spread over three NATS servers), and SHAPE=RATE (say 1gbit; needs root
# and tc) shapes every container's link both ways with a token bucket
# (tc tbf on each end of its veth) before the coordinator starts; the
# table then also gives the MB the busiest NATS server sends a round.
set -uo pipefail
f=${1:?usage: scaling.sh FILE [N] [WORKERS...]}; n=${2:-3}; shift $(($# < 2 ? $# : 2))
counts=${*:-1 2}
bin=${BINDIR:-/tmp/bin}
iters=${ITERS:-100}
reduce=${REDUCE:-tree}
points=${POINTS:-auto}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
deploy=$(cd "$(dirname "$0")/../deploy" && pwd)

# shape ID: a token bucket of $SHAPE on both ends of each veth of the
# container ID, so that its link carries $SHAPE each way. netem, which
# would add the link's delay, is not in every kernel; tbf is.
shape() {
	local pid dev peer host
	pid=$(docker inspect -f '{{.State.Pid}}' "$1")
	[ "$pid" != 0 ] || return 0
	nsenter -t "$pid" -n ip -o link show | sed -n 's/^[0-9]*: \(eth[0-9]*\)@if\([0-9]*\):.*/\1 \2/p' |
		while read -r dev peer; do
			host=$(ip -o link show | sed -n "s/^$peer: \([^@:]*\).*/\1/p")
			nsenter -t "$pid" -n tc qdisc replace dev "$dev" root tbf rate "$SHAPE" burst 256kb latency 400ms
			tc qdisc replace dev "$host" root tbf rate "$SHAPE" burst 256kb latency 400ms
		done
}

# containers W: the run on compose, the coordinator's log in $tmp/log and
# a line {"msg": "servers", "out": [bytes each NATS server sent]} after it.
containers() {
	local w=$1 base data urls="nats://nats:4222" files=(-f "$deploy/compose.yaml")
	base=$(basename "$f"); data=$(cd "$(dirname "$f")" && pwd)
	if [ "${SERVERS:-1}" = 3 ]; then
		urls="nats://nats:4222,nats://nats-2:4222,nats://nats-3:4222"
		files+=(-f "$deploy/compose.cluster.yaml")
	fi
	mkdir -p "$tmp/out"
	cat >"$tmp/scale.yaml" <<-EOF
	services:
	  worker-check:
	    command: ["worker", "-check", "-nats", "$urls", "-user", "worker"]
	  check:
	    command: ["coordinator", "-check", "-nats", "$urls", "-user", "coordinator", "/data/$base", "/out/model"]
	  worker:
	    command: ["worker", "-nats", "$urls", "-user", "worker", "-parallel", "1"]
	  coordinator:
	    command: ["coordinator", "-nats", "$urls", "-user", "coordinator", "-min-workers", "$w", "-reduce", "$reduce", "-points", "$points", "-method", "hdm", "-max-iter", "$iters", "-e", "1e-12", "/data/$base", "/out/model"]
	EOF
	local dc=(env COORDINATOR_PASSWORD=scale WORKER_PASSWORD=scale DATA_DIR="$data" OUT_DIR="$tmp/out"
		OSGM_USER="$(id -u):$(id -g)" NATS_PUBLISH="127.0.0.1:$((20000 + RANDOM % 10000))"
		docker-compose -p osgmscale "${files[@]}" -f "$tmp/scale.yaml")
	"${dc[@]}" up -d --scale worker="$w" worker check >"$tmp/up" 2>&1 || { echo "W=$w: compose up failed"; tail -5 "$tmp/up"; }
	local id c
	if [ -n "${SHAPE:-}" ]; then
		for c in $("${dc[@]}" ps -q); do shape "$c"; done
	fi
	"${dc[@]}" up -d --no-deps coordinator >/dev/null 2>&1
	id=$("${dc[@]}" ps -q coordinator)
	[ -n "${SHAPE:-}" ] && shape "$id"
	timeout 900 docker wait "$id" >/dev/null
	docker logs "$id" >"$tmp/log" 2>&1
	printf '{"msg": "servers", "out": [%s]}\n' "$(for c in nats nats-2 nats-3; do
		c=$("${dc[@]}" ps -q "$c" 2>/dev/null) || continue
		docker exec "$c" wget -q -O - http://127.0.0.1:8222/varz | sed -n 's/^ *"out_bytes": \([0-9]*\),/\1/p'
	done | paste -sd,)" >>"$tmp/log"
	cp "$tmp/out/model" "$tmp/model"
	"${dc[@]}" down -v -t 2 >/dev/null 2>&1
}

for i in $(seq "$n"); do
	for w in $counts; do
		if [ -n "${CONTAINERS:-}" ]; then
			containers "$w"
			digest=$(sha256sum <"$tmp/model" | cut -c1-16)
			grep -h '"trained"\|"bus"\|"servers"' "$tmp/log" | sed "s/^/$w $digest /"
			continue
		fi
		port=$((20000 + RANDOM % 10000))
		"$bin/nats-server" -a 127.0.0.1 -p "$port" >"$tmp/server" 2>&1 &
		pids=$!
		for _ in $(seq "$w"); do
			"$bin/worker" -nats "nats://127.0.0.1:$port" -parallel 1 >>"$tmp/workers" 2>&1 &
			pids="$pids $!"
		done
		OSGM_LOG_FORMAT=json timeout 600 "$bin/coordinator" -nats "nats://127.0.0.1:$port" -min-workers "$w" \
			-reduce "$reduce" -points "$points" -method hdm -max-iter "$iters" -e 1e-12 "$f" "$tmp/model" >"$tmp/log" 2>&1 ||
			{ echo "W=$w run $i failed:"; tail -5 "$tmp/log"; }
		# shellcheck disable=SC2086
		kill $pids 2>/dev/null
		wait 2>/dev/null
		digest=$(sha256sum <"$tmp/model" | cut -c1-16)
		grep -h '"trained"\|"bus"' "$tmp/log" | sed "s/^/$w $digest /"
	done
done | python3 -c '
import sys, json, statistics as st
per, down, up, hops, served, rounds, sums = {}, {}, {}, {}, {}, {}, set()
for line in sys.stdin:
    if line.startswith("W="):
        print(line, end=""); continue
    w, digest, rest = line.split(" ", 2)
    w, d = int(w), json.loads(rest)
    sums.add(digest)
    if d["msg"] == "trained":
        per.setdefault(w, []).append(d["train"] / d["passes"] * 1000)
    elif d["msg"] == "servers":
        served[w] = max(d["out"] or [0]) / rounds[w]
    else:
        rounds[w] = d["rounds"]
        down[w], up[w], hops[w] = d["bytes_down"] / d["rounds"], d["bytes_up"] / d["rounds"], d.get("tree_hops", 0)
base = None
print("workers  ms/pass  speed-up  MB down/round  MB up/round  hops  busiest server MB out/round (whole run)  runs")
for w in sorted(per):
    m = st.median(per[w]); base = base or m
    print("%7d  %7.2f  %8.2f  %13.2f  %11.2f  %4d  %39s  %s" % (w, m, base / m, down.get(w, 0) / 1e6, up.get(w, 0) / 1e6, hops.get(w, 0),
          "%.2f" % (served[w] / 1e6) if w in served else "-", " ".join("%.1f" % x for x in per[w])))
print("model bits:", "identical, sha256 " + sums.pop() if len(sums) == 1 else "DIFFER (%d)" % len(sums))
'
