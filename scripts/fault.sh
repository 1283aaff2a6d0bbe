#!/bin/bash
# fault.sh restart|leave|kill BINDIR FILE [coordinator flags]: trains FILE with
# a nats-server and two `worker -parallel 1` processes, and once training
# has run for AFTER seconds (default 2):
#   restart  kills the server (SIGKILL) and starts a new one on the same
#            port DOWN seconds later (default 1); prints when the clients
#            were cut off and back, and when the round went out again;
#   leave    stops worker 2 with SIGTERM, as a scale-down does; prints
#            when the coordinator saw it go and gave its shards away;
#   kill     the same with SIGKILL, as the OOM killer does.
# Times are in seconds from the fault; then the objective and the training
# time. BINDIR holds coordinator, worker and nats-server. Logs:
# $TMPDIR/fault.*
set -uo pipefail
mode=$1; bin=$2; f=$3; shift 3
logs=$(mktemp -d "${TMPDIR:-/tmp}/fault.XXXX")
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
sleep "${AFTER:-2}"
case $mode in
restart)
	kill -9 $ns
	at=$(date +%s.%N)
	sleep "${DOWN:-1}"
	"$bin/nats-server" -a 127.0.0.1 -p "$port" >"$logs/server2" 2>&1 &
	ns=$!
	events='reconnected|disconnected|again|back on|lost|worker back'
	;;
leave | kill)
	sig=TERM
	[ "$mode" = kill ] && sig=KILL
	kill -$sig ${pids##* }
	at=$(date +%s.%N)
	events='"worker (left|lost)"|"shard reassigned"'
	;;
*)
	echo "fault.sh: restart, leave or kill, not $mode" >&2
	exit 2
	;;
esac
wait $co
echo "exit $?"
cat "$logs"/worker* "$logs/coordinator" | grep -E "$events" |
	awk -v k="$at" '{ if (match($0, /"ts":[0-9.]+/)) printf "%6.2f s %s\n", substr($0, RSTART+5, RLENGTH-5) - k, $0 }' |
	sort -n | head -12 | cut -c1-220
grep -o '"objective":\[[^]]*\]\|"train":[0-9.]*' "$logs/coordinator"
for p in $pids; do kill "$p" 2>/dev/null; done
kill $ns
wait 2>/dev/null
echo "logs in $logs"
