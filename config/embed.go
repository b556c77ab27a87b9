// Package config holds the manifests under config/: the mcs-api CRDs, the
// member-side RBAC and a sample registration Secret. Go code reads the
// member-side RBAC from here, so that `endpoint-aggregator register` creates
// exactly what `kubectl apply -k config/rbac` would.
package config

import "embed"

// RBAC is config/rbac. The member identity is what rbac/kustomization.yaml
// lists; the hub-*.yaml files are rendered by the Helm chart instead.
//
//go:embed rbac/*.yaml
var RBAC embed.FS
