//go:build tools

// Package tools records the commands built from this module: the Prometheus
// server and promtool that the monitoring tests run (`make prometheus`). The
// module is separate from the main one, hack/tools and hack/coredns so
// Prometheus's dependency graph enters none of them.
package tools

import (
	_ "github.com/prometheus/prometheus/cmd/prometheus"
	_ "github.com/prometheus/prometheus/cmd/promtool"
)
