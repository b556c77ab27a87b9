package testenv

import (
	"bytes"
	"os"
	"regexp"
	"testing"
)

// TestPrometheusVersionMatches keeps PrometheusVersion, the Makefile and
// hack/prometheus/go.mod in step: the version names the cache directory.
func TestPrometheusVersionMatches(t *testing.T) {
	mk, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^PROMETHEUS_VERSION\s*[:?]?=\s*(\S+)\s*$`).FindSubmatch(mk)
	if m == nil {
		t.Errorf("Makefile does not set PROMETHEUS_VERSION")
	} else if string(m[1]) != PrometheusVersion {
		t.Errorf("Makefile PROMETHEUS_VERSION = %s, testenv says %s", m[1], PrometheusVersion)
	}
	gomod, err := os.ReadFile("../../hack/prometheus/go.mod")
	if err != nil {
		t.Fatal(err)
	}
	if req := "github.com/prometheus/prometheus " + PrometheusVersion; !bytes.Contains(gomod, []byte(req)) {
		t.Errorf("hack/prometheus/go.mod does not require %s", req)
	}
}
