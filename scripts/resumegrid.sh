#!/usr/bin/env bash
# resumegrid.sh: the whole grid of TestResumeGrid (pkg/osgm): every
# stateful method interrupted at every round, together, in batches and
# side by side with placed problems, and resumed to the uninterrupted
# result's bits. CI runs every fifth round from a random offset.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"
OSGM_RESUME_GRID=full go test -count=1 -run '^TestResumeGrid$' -v ./pkg/osgm/ | grep -E '^(--- |ok|FAIL|PASS)|grid_test'
