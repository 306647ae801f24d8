//go:build tools

// Package tools pins the etcd server that scripts/control-plane-binaries
// builds (the main package at the root of go.etcd.io/etcd/server/v3);
// go mod tidy keeps its dependencies.
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
)
