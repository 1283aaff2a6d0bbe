#!/usr/bin/env bash
# peaks.sh FILE...: each process's peak RSS (GNU time) when the coordinator
# trains FILE (default flags, -c 1 -e 0.01) over a nats-server and WORKERS
# (default 2) standalone `worker -parallel 1` processes on this machine;
# and the run's wall time. BINDIR (default /tmp/bin) holds coordinator,
# worker and nats-server (go build -o /tmp/bin/ ./cmd/...
# github.com/nats-io/nats-server/v2).
set -uo pipefail
bin=${BINDIR:-/tmp/bin}; workers=${WORKERS:-2}
printf '%-14s %8s %16s %-20s %14s\n' file seconds coordinator_MB workers_MB nats_server_MB
for f in "$@"; do
	tmp=$(mktemp -d); port=$((20000 + RANDOM % 10000)); url=nats://127.0.0.1:$port
	/usr/bin/time -f '%M' -o "$tmp/server" "$bin/nats-server" -a 127.0.0.1 -p "$port" >/dev/null 2>&1 &
	server=$!
	sleep 0.5
	pids=()
	for w in $(seq "$workers"); do
		/usr/bin/time -f '%M' -o "$tmp/w$w" "$bin/worker" -q -nats "$url" -parallel 1 >/dev/null 2>&1 &
		pids+=($!)
	done
	/usr/bin/time -f '%e %M' -o "$tmp/c" "$bin/coordinator" -q -nats "$url" -min-workers "$workers" -c 1 -e 0.01 "$f" "$tmp/model" >/dev/null 2>"$tmp/err" ||
		{ echo "coordinator failed on $f:"; tail -3 "$tmp/err"; }
	# time's children, not time itself: it writes the peak when they end.
	for p in "${pids[@]}"; do pkill -TERM -P "$p"; done
	wait "${pids[@]}" 2>/dev/null
	pkill -TERM -P "$server"; wait "$server" 2>/dev/null
	read -r secs coord <"$tmp/c"
	ws=$(for w in $(seq "$workers"); do awk '{printf "%.1f ", $1/1024}' "$tmp/w$w"; done)
	printf '%-14s %8.2f %16.1f %-20s %14.1f\n' "$(basename "$f" | cut -c1-14)" "$secs" "$(awk '{print $1/1024}' <<<"$coord")" \
		"$ws" "$(awk '{print $1/1024}' "$tmp/server")"
	rm -rf "$tmp"
done
