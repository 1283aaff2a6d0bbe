#!/usr/bin/env bash
# Builds the two images deploy/compose.yaml runs, without a registry: the
# osgm binaries (static, CGO_ENABLED=0) and nats-server at the version
# go.mod pins, each on an empty (scratch) base; busybox-static from
# Debian's archive is the nats image's wget. deploy/Dockerfile builds the
# same osgm image, but from golang and distroless images it pulls.
#
#   scripts/images.sh            # builds osgm:scratch and osgm-nats:scratch
#                                # (and osgm-weed:scratch, where scripts/weed.sh built weed)
#   eval "$(scripts/images.sh -env)"   # ... and exports OSGM_IMAGE, NATS_IMAGE (WEED_IMAGE)
#   scripts/images.sh -arm64     # builds osgm:scratch-arm64, for arm64 hosts
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"
# Every failure says which step failed: with -env the output is eval'd,
# and an empty one would otherwise set nothing without a word.
trap 'echo "images.sh: failed (exit $?) at line $LINENO: $BASH_COMMAND" >&2' ERR
command -v docker >/dev/null || { echo "images.sh: docker is not installed" >&2; exit 1; }

if [ "${1:-}" = -arm64 ]; then
  # The binaries alone: a scratch base needs nothing run at build time,
  # so any host builds it. (The nats image's busybox is the host's.)
  ctx=$(mktemp -d)
  trap 'rm -rf "$ctx"' EXIT
  GOARCH=arm64 CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o "$ctx/" ./cmd/coordinator ./cmd/worker ./cmd/predict ./cmd/svmgen
  docker build -q --platform linux/arm64 -t "${OSGM_IMAGE:-osgm:scratch-arm64}" -f deploy/offline/osgm.Dockerfile "$ctx" >&2
  exit 0
fi

osgm=${OSGM_IMAGE:-osgm:scratch}
natsimg=${NATS_IMAGE:-osgm-nats:scratch}

# Debian's busybox-static installs a static /bin/busybox (the dynamic
# busybox package installs one that an empty image cannot run).
busybox=${BUSYBOX:-/bin/busybox}
if ! [ -x "$busybox" ] || ldd "$busybox" >/dev/null 2>&1; then
  echo "images.sh: needs a static $busybox: apt-get install busybox-static" >&2
  exit 1
fi

ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
mkdir "$ctx/osgm" "$ctx/nats"
CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o "$ctx/osgm/" ./cmd/coordinator ./cmd/worker ./cmd/predict ./cmd/svmgen
CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o "$ctx/nats/nats-server" github.com/nats-io/nats-server/v2
cp "$busybox" "$ctx/nats/busybox"
docker build -q -t "$osgm" -f deploy/offline/osgm.Dockerfile "$ctx/osgm" >&2
docker build -q -t "$natsimg" -f deploy/offline/nats.Dockerfile "$ctx/nats" >&2
# SeaweedFS for compose.s3.yaml, where scripts/weed.sh has built it
# ($OSGM_WEED, or .ci/run's cache); without it only the S3 stack lacks
# its image.
weed=${OSGM_WEED:-}
if [ -z "$weed" ]; then
  for f in /var/cache/osgm/weed-*; do [ -x "$f" ] && weed=$f; done
fi
weedimg=${WEED_IMAGE:-osgm-weed:scratch}
if [ -n "$weed" ] && [ -x "$weed" ]; then
  mkdir "$ctx/weed"
  cp "$weed" "$ctx/weed/weed"
  cp "$busybox" "$ctx/weed/busybox"
  docker build -q -t "$weedimg" -f deploy/offline/weed.Dockerfile "$ctx/weed" >&2
else
  echo "images.sh: no SeaweedFS binary${weed:+ at $weed} (scripts/weed.sh VERSION OUT, then OSGM_WEED=OUT): $weedimg, the S3 stack's server, not built" >&2
  weedimg=
fi
if [ "${1:-}" = -env ]; then
  echo "export OSGM_IMAGE=$osgm NATS_IMAGE=$natsimg${weedimg:+ WEED_IMAGE=$weedimg}"
else
  echo "built $osgm and $natsimg: OSGM_IMAGE=$osgm NATS_IMAGE=$natsimg docker-compose -f deploy/compose.yaml up" >&2
fi
