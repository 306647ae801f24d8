//go:build tools

// Package tools pins the Kubernetes commands (control plane and the kubelet) that
// scripts/control-plane-binaries builds; go mod tidy keeps their dependencies.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
