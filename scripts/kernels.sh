#!/bin/bash
# kernels.sh N FILES BENCH TEST... : alternates test binaries (go test -c
# -o X ./pkg/shard) N times on FILES (colon-separated) and prints each
# binary's best Mnnz/s (a run's mean pass) per benchmark matching BENCH, e.g.
#   scripts/kernels.sh 6 /tmp/data/ijcnn1:/tmp/data/a9a 'Benchmark(Eval|HessVec)' /tmp/old.test /tmp/new.test
# Best-of-N, because this machine's noise is one-sided: slow runs.
set -euo pipefail
n=$1; files=$2; bench=$3; shift 3
for _ in $(seq "$n"); do for t in "$@"; do
  OSGM_BENCH_FILES=$files "$t" -test.run '^$' -test.bench "$bench" -test.benchtime 0.3s |
    awk -v t="$t" '/Mnnz/{for(i=2;i<=NF;i++) if($i=="Mnnz/s") print t, $1, $(i-1)}'
done; done | sort -k1,2 -k3,3gr | awk '{k=$1" "$2; if(!(k in s)){s[k]=1; print}}'
