#!/usr/bin/env bash
# weed.sh VERSION OUT: builds SeaweedFS's weed binary (the S3-compatible
# server the tests train from) at module VERSION into OUT. Its module
# carries replace directives, so go install refuses it: it is built as
# its own main module from the module's source. About 4 minutes and
# 230 MB; .ci/run keeps OUT outside the checkout, keyed by VERSION.
set -euo pipefail
version=${1:?usage: weed.sh VERSION OUT}
out=${2:?usage: weed.sh VERSION OUT}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
dir=$(go mod download -json "github.com/seaweedfs/seaweedfs@$version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
[ -n "$dir" ] || { echo "weed.sh: no module source for $version" >&2; exit 1; }
cp -r "$dir" src
chmod -R u+w src
mkdir -p "$(dirname "$out")"
(cd src && CGO_ENABLED=0 go build -o "$out.tmp" ./weed) # static: an empty image can run it
mv "$out.tmp" "$out"
echo "built $out"
