package testenv

import (
	"os"
	"regexp"
	"testing"
)

// TestHelmVersionMatchesMakefile keeps HelmVersion and the Makefile's
// HELM_VERSION in step: both name the cached binary.
func TestHelmVersionMatchesMakefile(t *testing.T) {
	mk, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^HELM_VERSION\s*[:?]?=\s*(\S+)\s*$`).FindSubmatch(mk)
	if m == nil {
		t.Fatal("Makefile does not set HELM_VERSION")
	}
	if string(m[1]) != HelmVersion {
		t.Errorf("Makefile HELM_VERSION = %s, testenv says %s", m[1], HelmVersion)
	}
}
