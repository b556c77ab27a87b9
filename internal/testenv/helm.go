package testenv

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// HelmVersion is the Helm that `make helm` builds. It must match HELM_VERSION
// in the Makefile (a test checks that).
const HelmVersion = "v3.22.0"

// HelmEnv names the environment variable holding the path of the helm
// binary; the Makefile's test targets set it.
const HelmEnv = "ENDPOINT_AGGREGATOR_HELM"

// DefaultHelmPath returns where the Makefile builds helm when CACHE_DIR is
// not overridden:
// ${XDG_CACHE_HOME:-$HOME/.cache}/endpoint-aggregator/bin/helm-<ver>/helm.
func DefaultHelmPath() (string, error) {
	bin, err := cacheBinDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(bin, "helm-"+HelmVersion, "helm"), nil
}

// HelmPath returns the helm binary: $ENDPOINT_AGGREGATOR_HELM if set, else
// [DefaultHelmPath]. It checks that the file is executable.
func HelmPath() (string, error) {
	abs, err := envOrDefaultPath(HelmEnv, DefaultHelmPath)
	if err != nil {
		return "", err
	}
	if err := checkExecutable(abs); err != nil {
		return "", fmt.Errorf("helm: %w (run `make helm`, or set %s to a helm %s binary)", err, HelmEnv, HelmVersion)
	}
	return abs, nil
}

// RequireHelm returns HelmPath, or fails the test. Like RequireAssets it
// never skips.
func RequireHelm(t testing.TB) string {
	t.Helper()
	p, err := HelmPath()
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return p
}

// HelmTemplate renders chartDir with `helm template` as release in
// namespace, passing args (e.g. "--set", "replicas=1") through, and returns
// the manifests. Helm runs with throw-away config, cache and data
// directories, so it neither reads nor writes the user's. Any error fails
// the test, with helm's output.
func HelmTemplate(t testing.TB, chartDir, release, namespace string, args ...string) []byte {
	t.Helper()
	out, err := HelmTemplateErr(t, chartDir, release, namespace, args...)
	if err != nil {
		t.Fatalf("helm template %s: %v", chartDir, err)
	}
	return out
}

// HelmTemplateErr is HelmTemplate returning helm's error (with its stderr)
// instead of failing, for tests of values the chart must refuse.
func HelmTemplateErr(t testing.TB, chartDir, release, namespace string, args ...string) ([]byte, error) {
	t.Helper()
	helm := RequireHelm(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	home := t.TempDir()
	cmd := exec.CommandContext(ctx, helm, append([]string{"template", release, chartDir, "--namespace", namespace}, args...)...)
	cmd.Env = append(os.Environ(),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"),
	)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%w\n%s", err, stderr.Bytes())
	}
	return stdout.Bytes(), nil
}
