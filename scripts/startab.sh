#!/bin/bash
# startab.sh OLD NEW N FILE...: the start-up of two coordinator builds side
# by side. For each FILE it runs `BIN -max-iter 1 FILE` (embedded server,
# 2 in-process workers, one evaluation) with the two binaries alternated N
# times, and prints per binary the medians of the log's first_gradient
# (from the coordinator's start of work to the gradient at 0) and of the
# process's wall time, start to exit.
set -uo pipefail
old=${1:?usage: startab.sh OLD NEW N FILE...}; new=${2:?}; n=${3:?}; shift 3
model=$(mktemp); log=$(mktemp)
trap 'rm -f "$model" "$log"' EXIT
for f in "$@"; do
	for i in $(seq "$n"); do
		for b in "$old" "$new"; do
			s=$(date +%s%N)
			OSGM_LOG_FORMAT=json "$b" -max-iter 1 "$f" "$model" 2>"$log" || { echo "$b failed on $f" >&2; exit 1; }
			e=$(date +%s%N)
			fg=$(grep '"trained"' "$log" | grep -o '"first_gradient":[0-9.e-]*' | cut -d: -f2)
			echo "$b $fg $(((e - s) / 1000))"
		done
	done | python3 -c "
import sys, statistics as st
r = {}
for l in sys.stdin:
    b, fg, w = l.split(); r.setdefault(b, []).append((float(fg) * 1000, int(w) / 1000))
print('$(basename "$f")', '  '.join('%s: first gradient %.1f ms, wall %.1f ms' % (b, st.median(x[0] for x in v), st.median(x[1] for x in v)) for b, v in r.items()))"
done
