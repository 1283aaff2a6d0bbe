#!/usr/bin/env bash
# helm.sh: prints the path of Helm's command, built once from its module
# at the pinned version into the cache outside the clone (as the S3
# server is), for deploy/helm's tests and scripts/k8s.sh. No registry or
# download site is needed: only the Go module proxy.
set -euo pipefail
export PATH="$PATH:/usr/local/go/bin"
version=v4.3.2
dir=${OSGM_CACHE:-/var/cache/osgm}/helm-$version
if ! [ -x "$dir/helm" ]; then
	mkdir -p "$dir"
	echo "helm.sh: building Helm $version into $dir (a few minutes, once)" >&2
	GOBIN="$dir" CGO_ENABLED=0 go install -trimpath \
		-ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=$version" "helm.sh/helm/v4/cmd/helm@$version" >&2
fi
echo "$dir/helm"
