//go:build tools

// Package tools pins kustomize, which renders the ecosystem controllers' own
// config/ folders (CRDs, webhooks) for the tests; scripts/control-plane-binaries
// builds it and go mod tidy keeps its dependencies.
package tools

import (
	_ "sigs.k8s.io/kustomize/kustomize/v5"
)
