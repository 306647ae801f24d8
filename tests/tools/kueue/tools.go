//go:build tools

// Package tools pins the kueue controller manager that
// scripts/control-plane-binaries builds; go mod tidy keeps its dependencies.
package tools

import (
	_ "sigs.k8s.io/kueue/cmd/kueue"
)
