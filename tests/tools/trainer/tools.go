//go:build tools

// Package tools pins the trainer controller manager that
// scripts/control-plane-binaries builds; go mod tidy keeps its dependencies.
package tools

import (
	_ "github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager"
)
