#!/bin/bash
# reach.sh FILE [coordinator flags...]: the first -e in 1e-1, 1e-2, ...
# at which an in-process run gets within 1e-6 (relative) of the objective
# a -e 1e-10 run reaches, with its passes and training time.
# COORDINATOR names the binary (default: coordinator in PATH).
set -euo pipefail
c=${COORDINATOR:-coordinator}
f=$1; shift
model=$(mktemp)
trap 'rm -f "$model"' EXIT
field() { grep -o "\"$1\":\[\?[0-9.e+-]*" | head -1 | sed 's/.*[:[]//'; }
best=$("$c" -local -e 1e-10 -max-iter 3000 "$@" "$f" "$model" 2>&1 | field objective)
for e in 1e-1 1e-2 1e-3 1e-4 1e-5 1e-6 1e-7 1e-8; do
  log=$("$c" -local -e $e "$@" "$f" "$model" 2>&1)
  obj=$(echo "$log" | field objective)
  if python3 -c "import sys; sys.exit(0 if ($obj - $best) / $best <= 1e-6 else 1)"; then
    echo "$(basename "$f") $*: -e $e, $(echo "$log" | field passes) passes, training $(echo "$log" | field train) s"
    exit 0
  fi
done
echo "$(basename "$f") $*: not within 1e-6 at -e 1e-8"
