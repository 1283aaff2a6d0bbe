#!/bin/bash
# kernelab.sh REV N FILE... : the shard kernels of this checkout against
# those of git revision REV. Builds both shard test binaries, runs each
# benchmark below on each FILE alternately N times, and prints the best
# Mnnz/s of each side and this checkout's share of REV's, e.g.
#   scripts/kernelab.sh 61dc9cd 5 /tmp/data/a9a /tmp/data/news20.t
# BENCH overrides the benchmarks (a -test.bench regexp).
set -euo pipefail
rev=$1 n=$2; shift 2
bench=${BENCH:-'BenchmarkEval$|BenchmarkHessVec$|BenchmarkEvalMulti$|BenchmarkHessVecMulti$|BenchmarkEvalDiagMulti$|BenchmarkEvalHess$'}
here=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d); trap 'git -C "$here" worktree remove --force "$tmp/old" 2>/dev/null; rm -rf "$tmp"' EXIT
git -C "$here" worktree add -q --detach "$tmp/old" "$rev"
(cd "$tmp/old" && go test -c -o "$tmp/old.test" ./pkg/shard)
(cd "$here" && go test -c -o "$tmp/new.test" ./pkg/shard)
for _ in $(seq "$n"); do for f in "$@"; do for side in old new; do
  OSGM_BENCH_FILES=$f "$tmp/$side.test" -test.run '^$' -test.bench "$bench" -test.benchtime 0.3s |
    awk -v f="$(basename "$f")" -v s=$side '/best-Mnnz/{print f, $1, s, $(NF-1)}'
done; done; done | awk '{k=$1" "$2" "$3; if(!(k in b)||$4>b[k]) b[k]=$4; ks[$1" "$2]=1}
  END{for(k in ks) printf "%-44s %s %8.0f  this %8.0f  ratio %.3f\n", k, "REV", b[k" old"], b[k" new"], b[k" new"]/b[k" old"]}' | sort
