#!/bin/bash
# passes.sh SET... : iterations and passes to `-e 1e-4` for every method
# (issue 2's table in BENCHMARKS.md), one markdown row per method:
#   scripts/passes.sh /tmp/data/a9a /tmp/data/w8a /tmp/data/ijcnn1 /tmp/data/dna.scale
# Each cell is `coordinator -local -c 1 -e 1e-4 -method M -max-iter 20000
# SET`'s iterations / passes. METHODS overrides the list; COORDINATOR
# the binary (default: coordinator on PATH).
set -euo pipefail
bin=${COORDINATOR:-coordinator}
model=$(mktemp); trap 'rm -f "$model"' EXIT
for m in ${METHODS:-osgm-h osgm-r osgm-g hdm gd adagrad agd sagd lbfgs gonum-lbfgs newton newton-full}; do
	row="| $m |"
	for set in "$@"; do
		cell=$(OSGM_LOG_FORMAT=json "$bin" -local -c 1 -e 1e-4 -method "$m" -max-iter 20000 "$set" "$model" 2>&1 |
			grep '"trained"' | python3 -c '
import sys, json
d = json.loads(sys.stdin.read())
print("%d / %d%s" % (d["iterations"], d["passes"], "" if d["converged"] == d["problems"] else " (not converged)"))')
		row="$row $cell |"
	done
	echo "$row"
done
