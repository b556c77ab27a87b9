package testenv

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Release is a release of this tree as `make release` builds it (`hack/image
// release`), without the CLI archives: the image index of linux/amd64 and
// linux/arm64 and the packaged chart, both pushed to a Registry, the chart
// defaulting to the pushed image.
type Release struct {
	// Version is vX.Y.Z, the image tag and the chart's appVersion;
	// ChartVersion is X.Y.Z.
	Version, ChartVersion string
	// Dir holds what the release wrote (image/, the chart, SHA256SUMS);
	// Chart is the packaged chart in it.
	Dir, Chart string
	// ChartRef is the chart in the registry, oci://HOST/charts/endpoint-aggregator
	// (helm install ChartRef --version ChartVersion).
	ChartRef string
	// Image is HOST/endpoint-aggregator:Version, the chart's default image;
	// IndexDigest (sha256:...) is its image index.
	Image, IndexDigest string
}

// BuildRelease builds release version (vX.Y.Z) of this tree and pushes it
// to r. Docker and Helm run with throw-away configuration, so nothing of
// the user's is read or written. Any error fails the test.
func BuildRelease(t testing.TB, r *Registry, version string) *Release {
	t.Helper()
	bin, err := hackImage()
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	helm := RequireHelm(t)
	root, err := moduleRoot()
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	tmp := t.TempDir()
	rel := &Release{
		Version: version, ChartVersion: strings.TrimPrefix(version, "v"),
		Dir:      filepath.Join(tmp, "release"),
		ChartRef: "oci://" + r.Host + "/charts/endpoint-aggregator",
		Image:    r.Host + "/endpoint-aggregator:" + version,
	}
	rel.Chart = filepath.Join(rel.Dir, "endpoint-aggregator-"+rel.ChartVersion+".tgz")
	cmd := exec.Command(bin, "release", "-version", version, "-no-cli", "-source", root, "-o", rel.Dir,
		"-helm", helm, "-registry", r.Host, "-ca-file", r.CAFile)
	cmd.Env = append(os.Environ(), HelmEnvHome(filepath.Join(tmp, "home"))...)
	cmd.Env = append(cmd.Env, "DOCKER_CONFIG="+filepath.Join(tmp, "docker"), "GOOS=", "GOARCH=")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("testenv: hack/image release %s: %v\n%s", version, err, out)
	}
	b, err := os.ReadFile(filepath.Join(rel.Dir, "image", "index.json"))
	if err != nil {
		t.Fatalf("testenv: release %s: %v", version, err)
	}
	var layout struct{ Manifests []struct{ Digest string } }
	if err := json.Unmarshal(b, &layout); err != nil || len(layout.Manifests) != 1 {
		t.Fatalf("testenv: release %s: image/index.json %s: %v", version, b, err)
	}
	rel.IndexDigest = layout.Manifests[0].Digest
	return rel
}

// HelmEnvHome is the environment that gives helm its configuration, cache,
// data and registry login file under home instead of the user's.
func HelmEnvHome(home string) []string {
	return []string{
		"HELM_CONFIG_HOME=" + filepath.Join(home, "config"),
		"HELM_CACHE_HOME=" + filepath.Join(home, "cache"),
		"HELM_DATA_HOME=" + filepath.Join(home, "data"),
		"HELM_REGISTRY_CONFIG=" + filepath.Join(home, "registry.json"),
	}
}

// String is the release as a test log names it.
func (r *Release) String() string { return fmt.Sprintf("%s (index %s)", r.Image, r.IndexDigest) }
