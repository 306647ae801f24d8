//go:build tools

// Package tools pins the kwok controller that scripts/control-plane-binaries
// builds; go mod tidy keeps its dependencies.
package tools

import (
	_ "sigs.k8s.io/kwok/cmd/kwok"
)
