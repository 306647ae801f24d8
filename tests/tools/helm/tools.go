//go:build tools

// Package tools pins the helm client that scripts/control-plane-binaries
// builds; go mod tidy keeps its dependencies.
package tools

import (
	_ "helm.sh/helm/v3/cmd/helm"
)
