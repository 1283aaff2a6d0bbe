#!/usr/bin/env bash
# resumeloop.sh [N] [FILE]: the interrupt/resume loop of issue 71. Trains
# FILE (default news20.t, from ../shared/data) with one-vs-rest classes
# placed whole on two worker processes over a nats-server
# (-place classes), N times (default 1000): each run is interrupted
# (SIGINT) 0-105 ms after its first checkpoint, resumed with -resume,
# and its model compared with the uninterrupted `-local` model's bytes.
# Prints each wrong cycle (its logs are kept), a count every 50 and, last:
#   N cycles: W wrong models, E ended before the interruption
# Exits non-zero if any model was wrong. SIGNAL=TERM or KILL sends that
# signal instead (KILL resumes from the last due checkpoint).
# Binaries are built into $BINDIR (default a temporary folder); nats-server
# from the module go.mod pins.
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"
n=${1:-1000}
f=${2:-}
work=$(mktemp -d "${TMPDIR:-/tmp}/resumeloop.XXXX")
bin=${BINDIR:-$work/bin}
sig=${SIGNAL:-INT}
if [ -z "$f" ]; then
	f=$work/news20.t
	bzip2 -dc ../shared/data/news20.t.bz2 >"$f" || exit 1
fi
if [ ! -x "$bin/coordinator" ]; then
	mkdir -p "$bin"
	go build -o "$bin/" ./cmd/coordinator ./cmd/worker || exit 1
	go build -o "$bin/nats-server" github.com/nats-io/nats-server/v2 || exit 1
fi
port=$((20000 + RANDOM % 10000))
url=nats://127.0.0.1:$port
"$bin/nats-server" -a 127.0.0.1 -p "$port" >"$work/server" 2>&1 &
pids=($!)
trap 'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null' EXIT
sleep 0.3
for w in 1 2; do
	"$bin/worker" -nats "$url" -name "loop$w" -parallel 1 >"$work/worker$w" 2>&1 &
	pids+=($!)
done
"$bin/coordinator" -local "$f" "$work/want" >/dev/null 2>&1 || { echo "the -local run failed" >&2; exit 1; }

wrong=0 early=0
for i in $(seq 1 "$n"); do
	d=$work/cycle
	rm -rf "$d" && mkdir -p "$d"
	args=(-nats "$url" -min-workers 2 -place classes -checkpoint "$d/ck" -checkpoint-every 100 "$f" "$d/model")
	"$bin/coordinator" "${args[@]}" >"$d/first" 2>&1 &
	co=$!
	until [ -e "$d/ck" ] || ! kill -0 "$co" 2>/dev/null; do sleep 0.005; done
	sleep "0.$(printf '%03d' $((RANDOM % 106)))"
	kill -"$sig" "$co" 2>/dev/null
	wait "$co"
	if [ -e "$d/model" ]; then
		early=$((early + 1))
		continue
	fi
	"$bin/coordinator" -resume "${args[@]}" >"$d/resumed" 2>&1
	if ! cmp -s "$d/model" "$work/want"; then
		wrong=$((wrong + 1))
		mv "$d" "$work/wrong$i"
		echo "cycle $i: the resumed model differs (logs in $work/wrong$i)"
	fi
	[ $((i % 50)) = 0 ] && echo "$i cycles so far: $wrong wrong models, $early ended before the interruption"
done
echo "$n cycles: $wrong wrong models, $early ended before the interruption"
[ "$wrong" = 0 ] && rm -rf "$work"
[ "$wrong" = 0 ]
