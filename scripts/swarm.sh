#!/usr/bin/env bash
# A Docker Swarm of several nodes on one machine, to try deploy/stack.yaml
# (and for e2e/swarm's tests): this host's engine is the manager, and each
# further node is a dockerd of its own in a network namespace, reached
# over a bridge on 10.250.0.0/24, so that a node can be cut off
# (`ip link set ... down`) as a host's network would fail.
#
#   scripts/swarm.sh up [N]     # N more nodes (default 3), joined, images loaded, labelled
#   scripts/swarm.sh cut NODE   # NODE (h1, h2, ...) loses its network; heal gives it back
#   scripts/swarm.sh heal NODE
#   scripts/swarm.sh env NODE   # prints DOCKER_HOST=... for talking to NODE's own engine
#   scripts/swarm.sh why        # the stack's tasks that do not run, and why
#   scripts/swarm.sh down       # removes the nodes (and the swarm, if up made it)
#
# Labels: the manager (this host) gets osgm.nats=true and
# osgm.coordinator=true, the other nodes osgm.worker=true. The images
# loaded on every node are $OSGM_IMAGE and $NATS_IMAGE (default
# osgm:scratch and osgm-nats:scratch, from scripts/images.sh): there is
# no registry to pull them from. Needs root, iproute2, util-linux
# (nsenter, unshare) and fuse-overlayfs where the host's engine uses it.
set -euo pipefail
trap 'echo "swarm.sh: failed (exit $?) at line $LINENO: $BASH_COMMAND" >&2' ERR

state=${OSGM_SWARM_DIR:-/var/lib/osgm-swarm}
run=/run/osgm-swarm
bridge=osgmsw0
net=10.250.0
manager=$net.1

# node_sock is the API socket of node $1's engine.
node_sock() { echo "unix://$run/$1/docker.sock"; }
ndocker() {
	local n=$1
	shift
	DOCKER_HOST=$(node_sock "$n") docker "$@"
}
nodes() { [ -d "$state" ] && find "$state" -mindepth 1 -maxdepth 1 -type d -name 'h*' -printf '%f\n' | sort -V; }

bridge_up() {
	ip link show "$bridge" >/dev/null 2>&1 && return
	ip link add "$bridge" type bridge
	ip addr add "$manager/24" dev "$bridge"
	ip link set "$bridge" up
	# Frames between two nodes cross the bridge, and where the host's
	# engine has made bridged traffic pass iptables (br_netfilter), its
	# FORWARD policy drops them: the nodes' gossip and VXLAN among
	# themselves, not with the manager. DOCKER-USER is where the engine
	# leaves room for rules of one's own.
	if iptables -L DOCKER-USER -n >/dev/null 2>&1; then
		iptables -I DOCKER-USER -i "$bridge" -o "$bridge" -j ACCEPT
	fi
}

bridge_down() {
	iptables -D DOCKER-USER -i "$bridge" -o "$bridge" -j ACCEPT 2>/dev/null || true
	ip link del "$bridge" 2>/dev/null || true
}

# node_up starts node $1 (h1, h2, ...) with address $2: its namespace,
# its link to the bridge, and its engine. The engine shares the host's
# containerd under a namespace of its own; `ip netns exec` would remount
# /sys, after which dockerd finds no devices cgroup, so nsenter enters
# the network alone (and unshare gives the node a hostname of its own,
# which `docker node ls` shows).
node_up() {
	local n=$1 addr=$2 dir=$state/$1
	mkdir -p "$dir/data" "$dir/exec" "$run/$n"
	echo '{}' >"$dir/daemon.json" # the host's daemon.json sets data-root, which a flag may not repeat
	ip netns add "osgm-$n"
	ip link add "sw-$n" type veth peer name eth0 netns "osgm-$n"
	ip link set "sw-$n" master "$bridge" up
	ip -n "osgm-$n" addr add "$addr/24" dev eth0
	ip -n "osgm-$n" link set lo up
	ip -n "osgm-$n" link set eth0 up
	# No default route: the node reaches the others and nothing else, so
	# its engine's pull of an image it already has (which a swarm task
	# tries first) fails at once instead of waiting out a DNS timeout.
	local driver
	driver=$(docker info -f '{{.Driver}}')
	unshare --uts sh -c "hostname $n && exec nsenter --net=/var/run/netns/osgm-$n dockerd \
		--data-root '$dir/data' --exec-root '$dir/exec' -H '$(node_sock "$n")' \
		--pidfile '$run/$n/docker.pid' --config-file '$dir/daemon.json' \
		--storage-driver '$driver' \
		--containerd /var/run/docker/containerd/containerd.sock \
		--containerd-namespace 'osgm-$n' --containerd-plugins-namespace 'osgm-${n}p' \
		--bridge none --iptables=false --ip-masq=false" >"$dir/dockerd.log" 2>&1 &
	local i
	for i in $(seq 100); do
		ndocker "$n" info >/dev/null 2>&1 && return
		sleep 0.2
	done
	echo "swarm.sh: the engine of $n did not start; its log: $dir/dockerd.log" >&2
	tail -5 "$dir/dockerd.log" >&2
	return 1
}

up() {
	local count=${1:-3} osgm=${OSGM_IMAGE:-osgm:scratch} natsimg=${NATS_IMAGE:-osgm-nats:scratch} img
	for img in "$osgm" "$natsimg"; do
		docker image inspect "$img" >/dev/null 2>&1 ||
			{ echo "swarm.sh: no image $img here: build it first (scripts/images.sh)" >&2; exit 1; }
	done
	mkdir -p "$state"
	bridge_up
	if [ "$(docker info -f '{{.Swarm.LocalNodeState}}')" != active ]; then
		docker swarm init --advertise-addr "$manager" --listen-addr "$manager:2377" >/dev/null
		touch "$state/made-swarm"
	fi
	docker node update --label-add osgm.nats=true --label-add osgm.coordinator=true "$(docker info -f '{{.Swarm.NodeID}}')" >/dev/null
	local token i n
	token=$(docker swarm join-token -q worker)
	for i in $(seq "$count"); do
		n=h$i
		[ -d "$state/$n" ] && { echo "swarm.sh: $n is up already (swarm.sh down first)" >&2; exit 1; }
		node_up "$n" "$net.$((10 + i))"
		ndocker "$n" swarm join --token "$token" "$manager:2377" >/dev/null
		# No registry: every node is given the images.
		docker save "$osgm" "$natsimg" | ndocker "$n" load -q >/dev/null
		docker node update --label-add osgm.worker=true "$(ndocker "$n" info -f '{{.Swarm.NodeID}}')" >/dev/null
	done
	docker node ls
}

down() {
	local n pid
	for n in $(nodes); do
		ndocker "$n" swarm leave --force >/dev/null 2>&1 || true
		pid=$(cat "$run/$n/docker.pid" 2>/dev/null || true)
		if [ -n "$pid" ]; then
			kill "$pid" 2>/dev/null || true
			for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
		fi
		# What the engine mounted and left (its containers' file systems,
		# its networks' namespaces), deepest first.
		awk -v a="$state/$n/" -v b="$run/$n/" 'index($2, a) == 1 || index($2, b) == 1 { print $2 }' /proc/self/mounts |
			sort -r | xargs -r umount -l 2>/dev/null || true
		ip netns del "osgm-$n" 2>/dev/null || true
		ip link del "sw-$n" 2>/dev/null || true
		rm -rf "${state:?}/$n" "${run:?}/$n"
	done
	# The manager forgets the nodes it can no longer reach.
	docker node ls -q -f role=worker | xargs -r docker node rm --force >/dev/null 2>&1 || true
	if [ -e "$state/made-swarm" ]; then
		docker swarm leave --force >/dev/null
		rm -f "$state/made-swarm"
	fi
	bridge_down
}

# why lists, for every service, the tasks that are not running and why,
# once per reason: a constraint no node meets ("no suitable node"), an
# image a node lacks, a bind mount's source missing (a rejected task is
# shut down and replaced, so its reason is in the task's history).
why() {
	docker service ls --format '{{.Name}} {{.Replicas}}'
	docker service ls -q | xargs -r docker service ps --no-trunc \
		--format '{{.Name}}|{{.Node}}|{{.CurrentState}}|{{.Error}}' |
		awk -F'|' '$3 !~ /^(Running|Complete|Shutdown)/ || $4 != "" {
			sub(/ [0-9a-z ]+ ago$/, "", $3); key = $1 $4
			if (!(key in seen)) { seen[key] = 1; n++; printf "%s on %s: %s %s\n", $1, $2, $3, $4 } }
			END { if (!n) print "every task desired is running" }'
}

case ${1:-} in
up) up "${2:-3}" ;;
down) down ;;
cut) ip -n "osgm-$2" link set eth0 down ;;
heal) ip -n "osgm-$2" link set eth0 up ;;
env) echo "export DOCKER_HOST=$(node_sock "$2")" ;;
why) why ;;
*)
	sed -n '2,/^set -e/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
	exit 2
	;;
esac
