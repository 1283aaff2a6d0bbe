//go:build tools

// Package k8sbuild pins the commands scripts/k8s.sh builds: Kubernetes'
// own (v1.34.4, the last minor that runs on cgroup v1 and containerd
// 1.6), and crictl to clean up a node's pods. It is a module of its own
// so that none of this reaches the trainer's go.mod.
package k8sbuild

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
	_ "sigs.k8s.io/cri-tools/cmd/crictl"
)
