package testenv

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestEnvoyGatewayVersionMatches keeps EnvoyGatewayVersion and the
// Makefile in step: the version names the cache directory.
func TestEnvoyGatewayVersionMatches(t *testing.T) {
	mk, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^ENVOY_GATEWAY_VERSION\s*[:?]?=\s*(\S+)\s*$`).FindSubmatch(mk)
	if m == nil {
		t.Fatalf("Makefile does not set ENVOY_GATEWAY_VERSION")
	}
	if string(m[1]) != EnvoyGatewayVersion {
		t.Errorf("Makefile ENVOY_GATEWAY_VERSION = %s, testenv says %s", m[1], EnvoyGatewayVersion)
	}
}

func TestEnvoyGatewayPath(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "envoy-gateway")
	t.Setenv(EnvoyGatewayEnv, bin)
	if _, err := EnvoyGatewayPath(); !errors.Is(err, ErrNoAssets) || !strings.Contains(err.Error(), "make envoy-gateway") {
		t.Fatalf("EnvoyGatewayPath() with a missing binary: err = %v", err)
	}
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := EnvoyGatewayPath(); !errors.Is(err, ErrNoAssets) || !strings.Contains(err.Error(), "no CRDs") {
		t.Fatalf("EnvoyGatewayPath() without its CRDs: err = %v", err)
	}
	if err := os.Mkdir(filepath.Join(dir, "crds"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "crds", "gatewayapi-crds.yaml"), []byte("---\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if p, err := EnvoyGatewayPath(); err != nil || p != bin {
		t.Fatalf("EnvoyGatewayPath() = %q, %v; want %q", p, err, bin)
	}
}

// TestIREndpoints reads endpoints wherever the IR nests them, keeps a
// draining one apart, and ignores lists named otherwise.
func TestIREndpoints(t *testing.T) {
	ir := `{"http":[{"name":"shop/gw/http","routes":[{"name":"r0","destination":{"name":"d0","settings":[
		{"name":"s0","endpoints":[{"host":"10.1.0.1","port":8080},{"host":"10.1.0.4","port":8080,"draining":true}]},
		{"name":"s1","endpoints":[{"host":"fd00::1","port":8080}]}]}}]}],
		"backendClusters":[{"name":"b0","endpoints":[{"host":"10.2.0.1","port":8080},{"host":"10.1.0.1","port":8080}]}],
		"hosts":[{"host":"not-an-endpoint","port":1}]}`
	serving, draining, err := irEndpoints([]byte(ir))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"10.1.0.1:8080", "10.2.0.1:8080", "[fd00::1]:8080"}; !slices.Equal(serving, want) {
		t.Errorf("serving = %v, want %v", serving, want)
	}
	if want := []string{"10.1.0.4:8080"}; !slices.Equal(draining, want) {
		t.Errorf("draining = %v, want %v", draining, want)
	}
	if _, _, err := irEndpoints([]byte("not json")); err == nil {
		t.Error("irEndpoints(not json): no error")
	}
}

func TestEnvoyGatewayConfig(t *testing.T) {
	got := envoyGatewayConfig(19123)
	for _, want := range []string{"controllerName: " + EnvoyGatewayControllerName, "type: Kubernetes", "gateway-api: debug", "encoder: JSON", "port: 19123", "disabled: true"} {
		if !strings.Contains(got, want) {
			t.Errorf("config lacks %q:\n%s", want, got)
		}
	}
}
