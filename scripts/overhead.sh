#!/bin/sh
# Per-pass time of the embedded NATS run against the in-process run
# (-local) on one file, alternated N times; prints the medians and ratio.
#   scripts/overhead.sh FILE [N] [COORDINATOR]
# OVERHEAD_ITERS sets the iterations (200; sub-millisecond passes want
# more, e.g. 2000 on dna.scale).
# HDM makes exactly one pass per iteration, so train/passes is a pass.
set -e
f=${1:?usage: overhead.sh FILE [N] [COORDINATOR]}; n=${2:-5}; bin=${3:-coordinator}
model=$(mktemp)
trap 'rm -f "$model"' EXIT
for i in $(seq "$n"); do
	for m in nats local; do
		flag=""
		[ "$m" = local ] && flag="-local"
		OSGM_LOG_FORMAT=json "$bin" $flag -method hdm -max-iter ${OVERHEAD_ITERS:-200} -e 1e-12 "$f" "$model" 2>&1 |
			grep '"trained"' | python3 -c "
import sys, json
d = json.loads(sys.stdin.read()); print('$m', d['train'] / d['passes'] * 1000)"
	done
done | python3 -c "
import sys, statistics as st
r = {}
for l in sys.stdin:
    m, v = l.split(); r.setdefault(m, []).append(float(v))
a, b = st.median(r['nats']), st.median(r['local'])
print('nats %.3g ms/pass  local %.3g ms/pass  ratio %.3f' % (a, b, a / b))
print('runs: nats', ' '.join('%.3g' % x for x in r['nats']), '/ local', ' '.join('%.3g' % x for x in r['local']))"
