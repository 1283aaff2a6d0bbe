#!/usr/bin/env bash
# A Kubernetes cluster of N nodes on one machine, to try deploy/helm/osgm
# (and for e2e/k8s's tests), as scripts/swarm.sh makes a swarm. The
# control plane (etcd, kube-apiserver, controller-manager, scheduler and
# CoreDNS as processes) lives in one network namespace with a bridge on
# 10.251.0.1/24; each node (its own containerd, kubelet and kube-proxy) in
# a namespace of its own at 10.251.0.1N, pods on 10.244.N.0/24. Nothing
# listens in the host's namespace: kubectl and helm run in the control
# plane's (`k8s.sh kubectl ...`, `k8s.sh helm ...`).
#
#   scripts/k8s.sh up [N]        # N nodes (default 2), n1 ... nN
#   scripts/k8s.sh load IMAGE... # a local image, given to every node (no registry)
#   scripts/k8s.sh pv NAME DIR [SIZE]  # a PersistentVolume on DIR and its claim NAME
#   scripts/k8s.sh cut NODE      # NODE loses its network; heal gives it back
#   scripts/k8s.sh heal NODE
#   scripts/k8s.sh kubectl ARGS  # also: helm ARGS, exec CMD ARGS
#   scripts/k8s.sh why           # pods that are not running, and why
#   scripts/k8s.sh down          # removes it all
#   scripts/k8s.sh bin           # prints the binaries' directory, built once
#   scripts/k8s.sh built        # succeeds if they are built
#
# Kubernetes v1.34.4 is built from the module proxy (scripts/k8sbuild,
# about 22 CPU-minutes once) into $OSGM_CACHE (/var/cache/osgm), outside
# the clone; etcd and the CNI plugins come from Debian's packages,
# extracted there, not installed. Needs root, cgroup v1 or v2, iproute2,
# util-linux (nsenter), openssl and Debian's containerd (docker.io's).
set -euo pipefail
trap 'echo "k8s.sh: failed (exit $?) at line $LINENO: $BASH_COMMAND" >&2' ERR
export PATH="$PATH:/usr/local/go/bin"

here=$(cd "$(dirname "$0")" && pwd)
cache=${OSGM_CACHE:-/var/cache/osgm}
state=${OSGM_K8S_DIR:-/var/lib/osgm-k8s}
run=/run/osgm-k8s
cp=osgmk-cp # the control plane's network namespace
net=10.251.0
apiserver=$net.1
pause=osgm-pause:3.10

incp() { nsenter --net="/run/netns/$cp" "$@"; }
innode() {
	local n=$1
	shift
	nsenter --net="/run/netns/osgmk-$n" "$@"
}
nodes() { [ -d "$state/nodes" ] && find "$state/nodes" -mindepth 1 -maxdepth 1 -type d -printf '%f\n' | sort -V; }
node_sock() { echo "$run/$1/containerd.sock"; }

# bin builds the binaries once and prints their directory; the key is the
# build module's contents, so a change to it builds again.
# bindir is where the binaries of this build module go, keyed by its
# contents; hashed once a run, not at every kubectl.
bindir() {
	[ -n "${bindir_:-}" ] || bindir_=$cache/k8s-$(cd "$here/k8sbuild" && cat go.mod go.sum ./*/*.go tools.go | sha256sum | cut -c1-12)
	echo "$bindir_"
}
built() { [ -x "$(bindir)/kubelet" ] && [ -x "$(bindir)/etcd" ]; }
bin() {
	local dir
	dir=$(bindir)
	# One build at a time: a second caller (CI's tests, while .ci/run
	# builds in the background) waits for the first's.
	mkdir -p "$cache"
	exec 9>"$cache/k8s.lock"
	flock 9
	if ! built; then
		echo "k8s.sh: building Kubernetes v1.34.4 into $dir (about 22 CPU-minutes, once)" >&2
		mkdir -p "$dir.tmp"
		local v=v1.34.4 ld="-s -w" p
		for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
			ld="$ld -X $p.gitVersion=$v -X $p.gitMajor=1 -X $p.gitMinor=34 -X $p.gitTreeState=clean"
		done
		(cd "$here/k8sbuild" && CGO_ENABLED=0 go build -trimpath -ldflags "$ld" -o "$dir.tmp/" \
			k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
			k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubelet \
			k8s.io/kubernetes/cmd/kube-proxy k8s.io/kubernetes/cmd/kubectl \
			sigs.k8s.io/cri-tools/cmd/crictl ./pause ./coredns) >&2
		debs "$dir.tmp"
		rm -rf "$dir"
		mv "$dir.tmp" "$dir"
	fi
	echo "$dir"
}

# debs extracts etcd and the CNI plugins from Debian's packages into $1.
debs() {
	local work
	work=$(mktemp -d)
	(cd "$work" && { apt-get download etcd-server containernetworking-plugins >/dev/null 2>&1 ||
		{ apt-get update -qq && apt-get download etcd-server containernetworking-plugins >/dev/null; }; })
	local deb
	for deb in "$work"/*.deb; do dpkg -x "$deb" "$work/x"; done
	cp "$work/x/usr/bin/etcd" "$1/etcd"
	mkdir -p "$1/cni"
	cp "$work"/x/usr/lib/cni/* "$1/cni/"
	rm -rf "$work"
}

# cert NAME CN [O] [SANS]: a key and a certificate signed by the
# cluster's CA, in $state/pki.
cert() {
	local name=$1 cn=$2 o=${3:-} sans=${4:-} pki=$state/pki subj
	subj="/CN=$cn"
	[ -n "$o" ] && subj="/O=$o$subj"
	openssl req -new -newkey rsa:2048 -nodes -keyout "$pki/$name-key.pem" -out "$pki/$name.csr" -subj "$subj" 2>/dev/null
	local ext=$pki/$name.ext
	echo "keyUsage=critical,digitalSignature,keyEncipherment" >"$ext"
	echo "extendedKeyUsage=serverAuth,clientAuth" >>"$ext"
	[ -n "$sans" ] && echo "subjectAltName=$sans" >>"$ext"
	openssl x509 -req -in "$pki/$name.csr" -CA "$pki/ca.pem" -CAkey "$pki/ca-key.pem" -CAcreateserial \
		-days 30 -extfile "$ext" -out "$pki/$name.pem" 2>/dev/null
}

# kubeconfig NAME: a kubeconfig with NAME's certificate, in $state.
kubeconfig() {
	cat >"$state/$1.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters: [{name: osgm, cluster: {server: "https://$apiserver:6443", certificate-authority: "$state/pki/ca.pem"}}]
users: [{name: $1, user: {client-certificate: "$state/pki/$1.pem", client-key: "$state/pki/$1-key.pem"}}]
contexts: [{name: osgm, context: {cluster: osgm, user: $1}}]
current-context: osgm
EOF
}

pki() {
	local pki=$state/pki
	mkdir -p "$pki"
	openssl req -x509 -newkey rsa:2048 -nodes -keyout "$pki/ca-key.pem" -out "$pki/ca.pem" \
		-days 30 -subj "/CN=osgm-k8s-ca" 2>/dev/null
	cert apiserver kube-apiserver "" \
		"DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,IP:10.96.0.1,IP:127.0.0.1,IP:$apiserver"
	cert admin admin system:masters
	cert apiserver-kubelet kube-apiserver-kubelet-client system:masters
	cert controller-manager system:kube-controller-manager
	cert scheduler system:kube-scheduler
	cert kube-proxy system:kube-proxy
	openssl genrsa -out "$pki/sa-key.pem" 2048 2>/dev/null
	openssl rsa -in "$pki/sa-key.pem" -pubout -out "$pki/sa.pem" 2>/dev/null
	local k
	for k in admin controller-manager scheduler kube-proxy; do kubeconfig "$k"; done
}

# plane starts the control plane in its namespace, behind the bridge.
plane() {
	local b=$1 log=$state/log
	mkdir -p "$log" "$run/cp"
	ip netns add "$cp"
	ip -n "$cp" link set lo up
	ip -n "$cp" link add osgmk0 type bridge
	ip -n "$cp" addr add "$apiserver/24" dev osgmk0
	ip -n "$cp" link set osgmk0 up
	incp sysctl -qw net.ipv4.ip_forward=1
	spawn cp etcd "$b/etcd" --data-dir "$state/etcd" --listen-client-urls http://127.0.0.1:2379 \
		--advertise-client-urls http://127.0.0.1:2379 --listen-peer-urls http://127.0.0.1:2380
	local pki=$state/pki
	spawn cp kube-apiserver "$b/kube-apiserver" --etcd-servers http://127.0.0.1:2379 \
		--advertise-address "$apiserver" --bind-address "$apiserver" --secure-port 6443 \
		--service-cluster-ip-range 10.96.0.0/16 --client-ca-file "$pki/ca.pem" \
		--tls-cert-file "$pki/apiserver.pem" --tls-private-key-file "$pki/apiserver-key.pem" \
		--kubelet-client-certificate "$pki/apiserver-kubelet.pem" --kubelet-client-key "$pki/apiserver-kubelet-key.pem" \
		--service-account-key-file "$pki/sa.pem" --service-account-signing-key-file "$pki/sa-key.pem" \
		--service-account-issuer https://kubernetes.default.svc.cluster.local \
		--authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction \
		--kubelet-preferred-address-types InternalIP
	wait_for "the API server" incp "$b/kubectl" --kubeconfig "$state/admin.kubeconfig" get --raw /readyz
	# A lost node is noticed in 20 s (the default is 40 s), so a cut
	# node's pods move within a test's patience; a claim made just before
	# its pod binds in 2 s, not 15.
	spawn cp kube-controller-manager "$b/kube-controller-manager" --kubeconfig "$state/controller-manager.kubeconfig" \
		--leader-elect=false --use-service-account-credentials --service-account-private-key-file "$pki/sa-key.pem" \
		--root-ca-file "$pki/ca.pem" --cluster-signing-cert-file "$pki/ca.pem" --cluster-signing-key-file "$pki/ca-key.pem" \
		--node-monitor-grace-period 20s --pvclaimbinder-sync-period 2s --controllers '*,-cloud-node-lifecycle'
	spawn cp kube-scheduler "$b/kube-scheduler" --kubeconfig "$state/scheduler.kubeconfig" --leader-elect=false
	cat >"$state/Corefile" <<EOF
.:53 {
    errors
    health 127.0.0.1:8081
    ready 127.0.0.1:8181
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig $state/admin.kubeconfig osgm
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }
    cache 5
    loadbalance
}
EOF
	spawn cp coredns "$b/coredns" -conf "$state/Corefile"
}

# spawn WHERE NAME CMD...: CMD in the namespace of WHERE (cp or a node),
# in the background, its log in $state/log/NAME.log and its pid in
# $run/WHERE/NAME.pid.
spawn() {
	local where=$1 name=$2 ns
	shift 2
	ns=$cp
	[ "$where" != cp ] && ns=osgmk-$where
	mkdir -p "$run/$where"
	nsenter --net="/run/netns/$ns" "$@" >"$state/log/$name.log" 2>&1 &
	echo $! >"$run/$where/$name.pid"
}

# wait_for WHAT CMD...: polls CMD until it succeeds (60 s at most).
wait_for() {
	local what=$1 i
	shift
	for i in $(seq 300); do
		"$@" >/dev/null 2>&1 && return
		sleep 0.2
	done
	echo "k8s.sh: $what did not come up in 60 s; logs in $state/log" >&2
	return 1
}


# node_up starts node $1 (n1, n2, ...), the $2-th: its namespace and link
# to the bridge, cgroups, containerd, kubelet and kube-proxy.
node_up() {
	local n=$1 i=$2 b=$3 dir=$state/nodes/$1 addr=$net.1$2 pki=$state/pki
	mkdir -p "$dir/cni" "$run/$n"
	ip netns add "osgmk-$n"
	ip -n "$cp" link add "k-$n" type veth peer name eth0 netns "osgmk-$n"
	ip -n "$cp" link set "k-$n" master osgmk0 up
	ip -n "osgmk-$n" addr add "$addr/24" dev eth0
	ip -n "osgmk-$n" link set lo up
	ip -n "osgmk-$n" link set eth0 up
	# Nothing lies beyond the control plane: the default route is for
	# Service addresses, which kube-proxy rewrites on the way out.
	ip -n "osgmk-$n" route add default via "$apiserver"
	ip -n "$cp" route add "10.244.$i.0/24" via "$addr"
	innode "$n" sysctl -qw net.ipv4.ip_forward=1
	local h
	for h in /sys/fs/cgroup/*/; do
		[ "$(basename "$h")" = unified ] && continue
		mkdir -p "$h/k8s-$n"
		if [ -e "$h/cpuset.cpus" ]; then
			cat "$h/cpuset.cpus" >"$h/k8s-$n/cpuset.cpus"
			cat "$h/cpuset.mems" >"$h/k8s-$n/cpuset.mems"
		fi
	done
	cat >"$dir/cni/10-osgmk.conflist" <<EOF
{"cniVersion": "0.4.0", "name": "osgmk", "plugins": [{"type": "bridge", "bridge": "cni0",
  "isGateway": true, "ipMasq": false, "hairpinMode": true,
  "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.244.$i.0/24"}]],
    "routes": [{"dst": "0.0.0.0/0"}], "dataDir": "$dir/ipam"}}]}
EOF
	# restrict_oom_score_adj: root here lacks CAP_SYS_RESOURCE, and runc
	# fails every sandbox that would lower its score.
	cat >"$dir/containerd.toml" <<EOF
version = 2
root = "$dir/containerd"
state = "$run/$n/containerd"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = "$(node_sock "$n")"
[ttrpc]
  address = "$(node_sock "$n").ttrpc"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "docker.io/library/$pause"
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$b/cni"
    conf_dir = "$dir/cni"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
      SystemdCgroup = false
      Root = "$run/$n/runc"
EOF
	spawn "$n" "containerd-$n" containerd --config "$dir/containerd.toml"
	wait_for "$n's containerd" ctr -a "$(node_sock "$n")" version
	docker image inspect "$pause" >/dev/null 2>&1 ||
		printf 'FROM scratch\nCOPY pause /pause\nENTRYPOINT ["/pause"]\n' | docker build -q -t "$pause" -f - "$b" >"$state/log/pause-image.log" 2>&1
	load_on "$n" "$pause"
	cert "node-$n" "system:node:$n" system:nodes "IP:$addr"
	kubeconfig "node-$n"
	cat >"$dir/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /k8s-$n
failSwapOn: false
address: $addr
healthzBindAddress: 127.0.0.1
readOnlyPort: 0
containerRuntimeEndpoint: unix://$(node_sock "$n")
authentication: {anonymous: {enabled: false}, webhook: {enabled: true}, x509: {clientCAFile: $pki/ca.pem}}
authorization: {mode: Webhook}
clusterDNS: [$apiserver]
clusterDomain: cluster.local
podLogsDir: $dir/pod-logs
evictionHard: {nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%", memory.available: "100Mi"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
nodeStatusUpdateFrequency: 4s
EOF
	spawn "$n" "kubelet-$n" "$b/kubelet" --config "$dir/kubelet.yaml" --kubeconfig "$state/node-$n.kubeconfig" \
		--root-dir "$dir/kubelet" --cert-dir "$dir/kubelet-pki" --hostname-override "$n" --node-ip "$addr"
	cat >"$dir/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $state/kube-proxy.kubeconfig}
mode: iptables
clusterCIDR: 10.244.0.0/16
hostnameOverride: $n
bindAddress: $addr
metricsBindAddress: 127.0.0.1:10249
healthzBindAddress: 127.0.0.1:10256
# Leave the machine's conntrack sysctls alone: they are not per node.
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
EOF
	spawn "$n" "kube-proxy-$n" "$b/kube-proxy" --config "$dir/kube-proxy.yaml"
}

# routes lets every node reach every other's pods.
routes() {
	local n m i j
	for n in $(nodes); do
		i=${n#n}
		for m in $(nodes); do
			j=${m#n}
			[ "$i" = "$j" ] || ip -n "osgmk-$n" route replace "10.244.$j.0/24" via "$net.1$j"
		done
	done
}

load_on() {
	docker save "$2" | ctr -a "$(node_sock "$1")" -n k8s.io images import - >/dev/null
}

up() {
	local count=${1:-2} b i
	[ -e "/run/netns/$cp" ] && { echo "k8s.sh: a cluster is up already (k8s.sh down first)" >&2; exit 1; }
	b=$(bin)
	mkdir -p "$state/nodes" "$state/log" "$run"
	# The kubelet sets these machine-wide; down puts them back.
	sysctl -n vm.overcommit_memory kernel.panic kernel.panic_on_oops | paste -sd' ' >"$state/sysctls"
	local p
	for p in /var/lib/kubelet /var/log/containers /var/log/pods /var/lib/cni; do
		[ -e "$p" ] || echo "$p" >>"$state/made-paths"
	done
	pki
	plane "$b"
	for i in $(seq "$count"); do node_up "n$i" "$i" "$b"; done
	routes
	for i in $(seq "$count"); do
		wait_for "node n$i" incp "$b/kubectl" --kubeconfig "$state/admin.kubeconfig" wait --for=condition=Ready "node/n$i" --timeout=1s
	done
	kctl get nodes -o wide
}

kctl() { incp "$(bindir)/kubectl" --kubeconfig "$state/admin.kubeconfig" "$@"; }

# stop NAME...: each process started as NAME (its pid in $run), then
# waits for it to end.
stop() {
	local f pid
	for f in "$@"; do
		[ -e "$f" ] || continue
		pid=$(cat "$f")
		kill "$pid" 2>/dev/null || true
		for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		kill -9 "$pid" 2>/dev/null || true
		rm -f "$f"
	done
}

down() {
	local b n
	b=$(bindir)
	for n in $(nodes); do
		stop "$run/$n/kube-proxy-$n.pid" "$run/$n/kubelet-$n.pid"
		# Every pod's sandbox: CNI's DEL, its mounts and namespace.
		innode "$n" "$b/crictl" -r "unix://$(node_sock "$n")" rmp -fa >/dev/null 2>&1 || true
		stop "$run/$n/containerd-$n.pid"
		pkill -f "containerd-shim-runc-v2 .*-address $(node_sock "$n")" 2>/dev/null || true
	done
	stop "$run"/cp/*.pid
	awk -v a="$state/" -v b="$run/" 'index($2, a) == 1 || index($2, b) == 1 { print $2 }' /proc/self/mounts |
		sort -r | xargs -r umount -l 2>/dev/null || true
	for n in $(nodes); do
		ip netns del "osgmk-$n" 2>/dev/null || true
		find /sys/fs/cgroup/*/"k8s-$n" -depth -type d -exec rmdir {} + 2>/dev/null || true
	done
	ip netns del "$cp" 2>/dev/null || true
	if [ -e "$state/sysctls" ]; then
		read -r oc panic oops <"$state/sysctls"
		sysctl -qw vm.overcommit_memory="$oc" kernel.panic="$panic" kernel.panic_on_oops="$oops"
	fi
	[ -e "$state/made-paths" ] && xargs -r rm -rf <"$state/made-paths"
	docker rmi "$pause" >/dev/null 2>&1 || true
	rm -rf "${state:?}" "${run:?}"
}

# why says, for every pod that is not running and ready, what the
# cluster last warned about it (a Secret, an image or a claim missing, no
# node with room) and, if it runs, its last words (a worker that cannot
# reach NATS says so in its log, not in its probe's event).
why() {
	local ns name phase ready n=0
	while read -r ns name phase ready; do
		[ "$phase" = Succeeded ] && continue
		[ "$phase" = Running ] && [[ $ready != *false* ]] && continue
		n=$((n + 1))
		echo "$ns/$name: $phase"
		kctl get pod -n "$ns" "$name" -o jsonpath='{range .status.conditions[?(@.status=="False")]}{.type}: {.message}{"\n"}{end}{range .status.containerStatuses[*].state.waiting}{.reason}: {.message}{"\n"}{end}' |
			grep -v ': $' | sed 's/^/  /'
		kctl get events -n "$ns" --field-selector "involvedObject.name=$name,type=Warning" \
			-o 'jsonpath={range .items[*]}{.reason}: {.message}{"\n"}{end}' | sort | uniq | tail -4 | sed 's/^/  /'
		if [ "$phase" = Running ]; then
			kctl logs -n "$ns" "$name" --all-containers --tail=2 2>&1 | sed 's/^/  log: /'
		fi
		[ "$phase" = Pending ] && claims "$ns" "$name"
	done < <(kctl get pods -A -o jsonpath='{range .items[*]}{.metadata.namespace} {.metadata.name} {.status.phase} {.status.containerStatuses[*].ready}{"\n"}{end}')
	[ "$n" -gt 0 ] || echo "every pod runs and is ready"
}

# claims says which of pod $2's claims are not bound, and why: the
# scheduler's own event does not name them.
claims() {
	local c phase
	for c in $(kctl get pod -n "$1" "$2" -o jsonpath='{.spec.volumes[*].persistentVolumeClaim.claimName}'); do
		if ! phase=$(kctl get pvc -n "$1" "$c" -o jsonpath='{.status.phase}' 2>/dev/null); then
			echo "  claim $c: not found"
		elif [ "$phase" != Bound ]; then
			echo "  claim $c: $phase"
			kctl get events -n "$1" --field-selector "involvedObject.name=$c,type=Warning" \
				-o 'jsonpath={range .items[*]}{.reason}: {.message}{"\n"}{end}' | sort | uniq | tail -2 | sed 's/^/    /'
		fi
	done
}

# pv NAME DIR [SIZE]: a PersistentVolume on the directory DIR (every node
# sees the machine's files) bound to the claim NAME, and the claim. DIR
# is given to the user the chart's pods run as.
pv() {
	local name=$1 dir=$2 size=${3:-10Gi}
	mkdir -p "$dir"
	chown 65532:65532 "$dir"
	kctl apply -f - >/dev/null <<EOF
apiVersion: v1
kind: PersistentVolume
metadata: {name: $name}
spec:
  capacity: {storage: $size}
  accessModes: [ReadWriteOnce, ReadOnlyMany, ReadWriteMany]
  persistentVolumeReclaimPolicy: Retain
  claimRef: {namespace: default, name: $name}
  hostPath: {path: $dir, type: Directory}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: $name, namespace: default}
spec:
  accessModes: [ReadWriteOnce]
  volumeName: $name
  storageClassName: ""
  resources: {requests: {storage: $size}}
EOF
}

case ${1:-} in
up) up "${2:-2}" ;;
down) down ;;
bin) bin ;;
built) built || { echo "not built: $(bindir)"; exit 1; } ;;
load)
	shift
	for img in "$@"; do for n in $(nodes); do load_on "$n" "$img"; done; done
	;;
pv) pv "$2" "$3" "${4:-}" ;;
cut) ip -n "osgmk-$2" link set eth0 down ;;
heal)
	ip -n "osgmk-$2" link set eth0 up
	ip -n "osgmk-$2" route replace default via "$apiserver"
	routes
	;;
kubectl)
	shift
	kctl "$@"
	;;
helm)
	shift
	KUBECONFIG=$state/admin.kubeconfig incp "$("$here/helm.sh")" "$@"
	;;
exec)
	shift
	KUBECONFIG=$state/admin.kubeconfig PATH="$(bindir):$PATH" incp "$@"
	;;
why) why ;;
*)
	sed -n '2,/^set -e/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
	exit 2
	;;
esac
