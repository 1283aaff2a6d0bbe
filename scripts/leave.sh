#!/bin/bash
# leave.sh BINDIR FILE [coordinator flags]: trains FILE with a nats-server
# and two `worker -parallel 1` processes, stops worker 2 with SIGTERM (as
# a scale-down does) once training has run for TERM_AFTER seconds
# (default 1), and prints, in seconds from the signal, when the
# coordinator saw it go and gave its shards away, then the objective and
# the training time. BINDIR holds coordinator, worker and nats-server.
# Logs: $TMPDIR/leave.*
set -uo pipefail
bin=$1; f=$2; shift 2
logs=$(mktemp -d "${TMPDIR:-/tmp}/leave.XXXX")
port=$((20000 + RANDOM % 10000))
url="nats://127.0.0.1:$port"
"$bin/nats-server" -a 127.0.0.1 -p "$port" >"$logs/server" 2>&1 &
ns=$!
sleep 0.3
"$bin/worker" -nats "$url" -parallel 1 >"$logs/worker1" 2>&1 &
w1=$!
"$bin/worker" -nats "$url" -parallel 1 >"$logs/worker2" 2>&1 &
w2=$!
"$bin/coordinator" -nats "$url" -min-workers 2 "$@" "$f" "$logs/model" >"$logs/coordinator" 2>&1 &
co=$!
until grep -q '"msg":"loaded"' "$logs/coordinator"; do sleep 0.05; done
sleep "${TERM_AFTER:-1}"
kill -TERM $w2
termed=$(date +%s.%N)
wait $co
echo "exit $?"
since() { awk -v k="$termed" '{ if (match($0, /"ts":[0-9.]+/)) printf "%6.2f s %s\n", substr($0, RSTART+5, RLENGTH-5) - k, $0 }'; }
grep -E '"worker (left|lost)"|"shard reassigned"' "$logs/coordinator" | since | sort -n | sed -n '1,2p' | cut -c1-160
grep -o '"objective":\[[^]]*\]\|"train":[0-9.]*' "$logs/coordinator"
kill $w1 $ns 2>/dev/null
wait 2>/dev/null
echo "logs in $logs"
