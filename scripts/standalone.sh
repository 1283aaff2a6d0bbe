#!/bin/bash
# standalone.sh BINDIR N FILE [coordinator flags]: N trainings of FILE with
# a nats-server and two `worker -parallel 1` processes of their own, the
# coordinator under `timeout 90`. Prints each run's exit status, the
# objective and the workers' peak resident memory (VmHWM); a run that
# hangs gets its workers' goroutines dumped into its worker logs.
# BINDIR holds coordinator, worker and nats-server. Logs: $TMPDIR/standalone.*
# WORKER_FLAGS are added to both workers (e.g. "-memprofile /tmp/w.heap").
set -uo pipefail
bin=$1; n=$2; f=$3; shift 3
logs=$(mktemp -d "${TMPDIR:-/tmp}/standalone.XXXX")
for i in $(seq "$n"); do
	port=$((20000 + RANDOM % 10000))
	"$bin/nats-server" -p "$port" >"$logs/$i.server" 2>&1 &
	ns=$!
	sleep 0.3
	pids=""
	for w in 1 2; do
		"$bin/worker" ${WORKER_FLAGS:-} -nats "nats://127.0.0.1:$port" -parallel 1 >"$logs/$i.worker$w" 2>&1 &
		pids="$pids $!"
	done
	sleep 0.3
	timeout 90 "$bin/coordinator" -nats "nats://127.0.0.1:$port" -min-workers 2 "$@" "$f" "$logs/model" >"$logs/$i.coordinator" 2>&1
	rc=$?
	hwm=""
	for p in $pids; do hwm="$hwm $(awk '/VmHWM|RssAnon|RssFile/{printf "%s %d MB ", $1, $2/1024}' /proc/"$p"/status)"; done
	[ $rc != 0 ] && for p in $pids; do kill -QUIT "$p"; done && sleep 0.5
	echo "run $i: exit $rc, $(grep -o '"objective":\[[^]]*\]' "$logs/$i.coordinator"), worker peaks$hwm"
	for p in $pids; do kill "$p" 2>/dev/null; done
	kill $ns
	wait 2>/dev/null
done
echo "logs in $logs"
