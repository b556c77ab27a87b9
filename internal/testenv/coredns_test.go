package testenv

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestCoreDNSVersionMatches keeps CoreDNSVersion, the Makefile and
// hack/coredns/go.mod in step: the version names the cache directory.
func TestCoreDNSVersionMatches(t *testing.T) {
	mk, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^COREDNS_VERSION\s*[:?]?=\s*(\S+)\s*$`).FindSubmatch(mk)
	if m == nil {
		t.Errorf("Makefile does not set COREDNS_VERSION")
	} else if string(m[1]) != CoreDNSVersion {
		t.Errorf("Makefile COREDNS_VERSION = %s, testenv says %s", m[1], CoreDNSVersion)
	}
	gomod, err := os.ReadFile("../../hack/coredns/go.mod")
	if err != nil {
		t.Fatal(err)
	}
	if req := "github.com/coredns/coredns " + CoreDNSVersion; !bytes.Contains(gomod, []byte(req)) {
		t.Errorf("hack/coredns/go.mod does not require %s", req)
	}
}

func TestCoreDNSPath(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "coredns")
	t.Setenv(CoreDNSEnv, missing)
	if _, err := CoreDNSPath(); !errors.Is(err, ErrNoAssets) || !strings.Contains(err.Error(), "make coredns") {
		t.Fatalf("CoreDNSPath() with a missing binary: err = %v", err)
	}
	if err := os.WriteFile(missing, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if p, err := CoreDNSPath(); err != nil || p != missing {
		t.Fatalf("CoreDNSPath() = %q, %v; want %q", p, err, missing)
	}

	t.Setenv(CoreDNSEnv, "")
	t.Setenv("XDG_CACHE_HOME", "/cache")
	p, err := DefaultCoreDNSPath()
	if want := "/cache/endpoint-aggregator/bin/coredns-" + CoreDNSVersion + "/coredns"; err != nil || p != want {
		t.Fatalf("DefaultCoreDNSPath() = %q, %v; want %q", p, err, want)
	}
}

func TestCoreDNSCorefile(t *testing.T) {
	got := CoreDNSCorefile("/k/kubeconfig", "hub", 5353, 8181)
	for _, want := range []string{
		".:5353 {",
		"bind 127.0.0.1",
		"ready 127.0.0.1:8181",
		"kubernetes cluster.local clusterset.local {",
		"kubeconfig /k/kubeconfig hub",
		"multicluster clusterset.local",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("Corefile lacks %q:\n%s", want, got)
		}
	}
}

// The Corefile of StartCoreDNSZoneAt serves the MCS names under its zone
// alone: clusterset.local is nowhere in it.
func TestCoreDNSCorefileOfAnotherZone(t *testing.T) {
	got := corefileAt("fd00:250:1::1", "clusterset.example", "/k/kubeconfig", "hub", 5353, 8181)
	for _, want := range []string{
		"bind fd00:250:1::1",
		"kubernetes cluster.local clusterset.example {",
		"multicluster clusterset.example",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("Corefile lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, ClusterSetZone) {
		t.Errorf("Corefile names %s:\n%s", ClusterSetZone, got)
	}
}
