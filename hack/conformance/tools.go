//go:build tools

// Package tools records the test binary built from this module.
package tools

import _ "sigs.k8s.io/mcs-api/conformance"
