#!/bin/bash
# kernelratio.sh N FILE... : target 2 of issue 4. Builds
# ../shared/bench/fused_kernel.c (gcc -O3) and the shard test binary, runs
# them alternately N times on each FILE, and prints per file the best pass
# of each side in Mnnz/s (w = 0, one thread) and Go's share of C's, e.g.
#   scripts/kernelratio.sh 5 /tmp/data/a9a /tmp/data/ijcnn1
# Both sides report their fastest pass (the C program prints only that;
# BenchmarkEval's best-Mnnz/s is the same measure), best over N runs,
# because this machine's noise is one-sided: slow passes.
set -euo pipefail
n=$1; shift
here=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
gcc -O3 -o "$tmp/fk" "$here/../shared/bench/fused_kernel.c" -lm
(cd "$here" && go test -c -o "$tmp/shard.test" ./pkg/shard)
for _ in $(seq "$n"); do for f in "$@"; do
  "$tmp/fk" "$f" 300 | awk -v f="$f" '/^w=0/{print f, "C", $(NF-2)}'
  OSGM_BENCH_FILES=$f "$tmp/shard.test" -test.run '^$' -test.bench 'BenchmarkEval$' -test.benchtime 0.3s |
    awk -v f="$f" '/best-Mnnz/{print f, "Go", $(NF-1)}'
done; done | awk '{k=$1" "$2; if(!(k in b) || $3>b[k]) b[k]=$3; fs[$1]=1}
  END{printf "%-28s %10s %10s %6s\n", "file", "C Mnnz/s", "Go Mnnz/s", "ratio";
      for(f in fs) printf "%-28s %10.0f %10.0f %6.2f\n", f, b[f" C"], b[f" Go"], b[f" Go"]/b[f" C"]}'
