#!/bin/sh
# Broadcast points against own points (-points broadcast|own) with W
# in-process workers, alternated N times: prints, per run, W, the mode,
# passes, training seconds, and the bytes a round the coordinator sent
# and the server sent on; then the medians. The model files must agree.
#   scripts/ownpoints.sh FILE N W... [COORDINATOR in $BIN]
set -e
f=${1:?usage: ownpoints.sh FILE N W...}; n=${2:?}; shift 2
bin=${BIN:-coordinator}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
for i in $(seq "$n"); do
	for w in "$@"; do
		for mode in broadcast own; do
			OSGM_LOG_FORMAT=json "$bin" -points $mode -workers "$w" -e 1e-3 "$f" "$dir/$mode.model" 2>&1 |
				grep -E '"trained"|"bus"' | python3 -c "
import sys, json
d = {}
for line in sys.stdin: d.update(json.loads(line))
print($w, '$mode', d['passes'], d['train'], d['bytes_down'] / d['rounds'] / 1e6, d['bytes_to_workers'] / d['rounds'] / 1e6)"
		done
		cmp -s "$dir/broadcast.model" "$dir/own.model" || echo "W=$w: the models differ" >&2
	done
done | tee "$dir/runs" | python3 -c "
import sys, statistics as st, collections
runs = collections.defaultdict(list)
for line in sys.stdin:
    print(line, end='')
    w, mode, passes, train, down, to = line.split()
    runs[(int(w), mode)].append((float(train), float(down), float(to)))
for (w, mode), r in sorted(runs.items()):
    print('W=%d %-9s train %.3f s  MB a round: sent %.2f, to workers %.2f' % (w, mode, st.median(x[0] for x in r), r[0][1], r[0][2]))
"
