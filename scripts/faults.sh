#!/usr/bin/env bash
# faults.sh [N] [FIRST_SEED]: e2e/swarm's TestSwarmRandomFaults with N
# seeds (default 10) of OSGM_FAULTS faults (default 8: every kind once,
# the rest drawn) from FIRST_SEED (default 1), one after another, as
# root on a machine whose Docker engine is in no swarm (scripts/swarm.sh
# makes one). Prints each seed's PASS or FAIL and, last:
#   N seeds: P passed, F failed (seeds ...)
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"
n=${1:-10}
first=${2:-1}
# eval "$(...)" would hide images.sh's failure: eval of nothing succeeds.
images=$(scripts/images.sh -env) || exit 1
eval "$images"
pass=0 failed=()
for seed in $(seq "$first" $((first + n - 1))); do
	log=$(mktemp "${TMPDIR:-/tmp}/faults.$seed.XXXX")
	if OSGM_FAULT_SEED=$seed OSGM_FAULTS=${OSGM_FAULTS:-8} OSGM_CONTAINER_TESTS=require go test -count=1 -timeout 30m -run '^TestSwarmRandomFaults$' -v ./e2e/swarm/ >"$log" 2>&1; then
		pass=$((pass + 1))
		echo "seed $seed: PASS"
		rm -f "$log"
	else
		failed+=("$seed")
		echo "seed $seed: FAIL (log $log)"
	fi
done
echo "$n seeds: $pass passed, ${#failed[@]} failed${failed:+ (seeds ${failed[*]})}"
[ ${#failed[@]} = 0 ]
