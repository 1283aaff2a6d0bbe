#!/bin/bash
# restart.sh BINDIR FILE [coordinator flags]: trains FILE with a
# nats-server and two `worker -parallel 1` processes, kills the server
# with SIGKILL once training has run for KILL_AFTER seconds (default 2)
# and starts a new one on the same port DOWN seconds later (default 1).
# Prints when the clients were cut off and reconnected, when the round
# under way went out again, the objective and the training time, each
# in seconds from the kill. BINDIR holds coordinator, worker and
# nats-server. Logs: $TMPDIR/restart.*
set -uo pipefail
bin=$1; f=$2; shift 2
logs=$(mktemp -d "${TMPDIR:-/tmp}/restart.XXXX")
port=$((20000 + RANDOM % 10000))
url="nats://127.0.0.1:$port"
"$bin/nats-server" -a 127.0.0.1 -p "$port" >"$logs/server1" 2>&1 &
ns=$!
sleep 0.3
pids=""
for w in 1 2; do
	"$bin/worker" -nats "$url" -parallel 1 >"$logs/worker$w" 2>&1 &
	pids="$pids $!"
done
"$bin/coordinator" -nats "$url" -min-workers 2 "$@" "$f" "$logs/model" >"$logs/coordinator" 2>&1 &
co=$!
until grep -q '"msg":"loaded"' "$logs/coordinator"; do sleep 0.05; done
sleep "${KILL_AFTER:-2}"
kill -9 $ns
killed=$(date +%s.%N)
sleep "${DOWN:-1}"
"$bin/nats-server" -a 127.0.0.1 -p "$port" >"$logs/server2" 2>&1 &
ns=$!
wait $co
echo "exit $?"
since() { awk -v k="$killed" '{ if (match($0, /"ts":[0-9.]+/)) printf "%6.2f s %s\n", substr($0, RSTART+5, RLENGTH-5) - k, $0 }'; }
cat "$logs"/worker* "$logs/coordinator" | grep -E 'reconnected|disconnected|again|back on|lost|worker back' | since | sort -n | cut -c1-220
grep -o '"objective":\[[^]]*\]\|"train":[0-9.]*' "$logs/coordinator"
for p in $pids; do kill "$p" 2>/dev/null; done
kill $ns
wait 2>/dev/null
echo "logs in $logs"
