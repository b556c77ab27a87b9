package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	cdx "github.com/CycloneDX/cyclonedx-go"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The release the tests build once: the real daemon for the image's
// platforms (one CLI archive, linux/amd64, to keep the test short),
// pushed to an in-memory registry on loopback that serves HTTPS only, with
// its certificate given as -ca-file (so helm push must not use plain HTTP).
const (
	testVersion  = "v0.1.0-rc.1"
	testRevision = "0123456789abcdef0123456789abcdef01234567"
	helmEnv      = "ENDPOINT_AGGREGATOR_HELM"
)

var testCreated = time.Unix(1700000000, 0).UTC()

type testRelease struct {
	opts     ReleaseOptions
	res      *ReleaseResult
	registry string
	// transport trusts the registry's certificate.
	transport http.RoundTripper
}

var (
	releaseOnce sync.Once
	releaseRes  *testRelease
	releaseErr  error
	// cleanups run after all tests (TestMain).
	cleanups []func()
)

func buildTestRelease(t *testing.T) *testRelease {
	t.Helper()
	releaseOnce.Do(func() {
		helm, err := helmBinary()
		if err != nil {
			releaseErr = err
			return
		}
		tmp, err := os.MkdirTemp("", "hack-image-release-")
		if err != nil {
			releaseErr = err
			return
		}
		cleanups = append(cleanups, func() { _ = os.RemoveAll(tmp) })
		srv := httptest.NewTLSServer(registry.New(registry.Logger(discardLogger())))
		cleanups = append(cleanups, srv.Close)
		u, _ := url.Parse(srv.URL)
		ca := filepath.Join(tmp, "registry-ca.pem")
		if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
			releaseErr = err
			return
		}
		// No Docker or Helm configuration: anonymous pushes, nothing of the user's read or written.
		for k, v := range map[string]string{
			"DOCKER_CONFIG": tmp, "HELM_CONFIG_HOME": filepath.Join(tmp, "helm-config"),
			"HELM_CACHE_HOME": filepath.Join(tmp, "helm-cache"), "HELM_DATA_HOME": filepath.Join(tmp, "helm-data"),
			"HELM_REGISTRY_CONFIG": filepath.Join(tmp, "helm-registry.json"),
		} {
			if err := os.Setenv(k, v); err != nil {
				releaseErr = err
				return
			}
		}
		r := &testRelease{registry: u.Host + "/ea"}
		if r.transport, releaseErr = caTransport(ca); releaseErr != nil {
			return
		}
		r.opts = ReleaseOptions{
			Version:      testVersion,
			Revision:     testRevision,
			Source:       filepath.Join("..", ".."),
			Out:          filepath.Join(tmp, "release"),
			Helm:         helm,
			Registry:     r.registry,
			RegistryCA:   ca,
			Created:      testCreated,
			CLIPlatforms: []Platform{{"linux", "amd64"}},
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		r.res, releaseErr = Release(ctx, r.opts)
		releaseRes = r
	})
	if releaseErr != nil {
		t.Fatalf("release: %v", releaseErr)
	}
	return releaseRes
}

// helmBinary is the helm the release packages the chart with, as the
// chart tests find it (internal/testenv.HelmPath, which this module cannot
// import): $ENDPOINT_AGGREGATOR_HELM, else the one `make helm` builds into
// the cache at the Makefile's HELM_VERSION. A missing helm fails the
// release tests rather than skipping the chart's: `make test` builds it.
func helmBinary() (string, error) {
	if p := os.Getenv(helmEnv); p != "" {
		return filepath.Abs(p)
	}
	mk, err := os.ReadFile(filepath.Join("..", "..", "Makefile"))
	if err != nil {
		return "", err
	}
	m := regexp.MustCompile(`(?m)^HELM_VERSION := (\S+)$`).FindSubmatch(mk)
	if m == nil {
		return "", errors.New("no HELM_VERSION in the Makefile")
	}
	base := os.Getenv("XDG_CACHE_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", err
		}
		base = filepath.Join(home, ".cache")
	}
	p := filepath.Join(base, "endpoint-aggregator", "bin", "helm-"+string(m[1]), "helm")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("helm: %w (run `make helm`, or set %s)", err, helmEnv)
	}
	return p, nil
}

func (r *testRelease) path(name string) string { return filepath.Join(r.opts.Out, name) }

// layerFile returns the content of file in img's only layer.
func layerFile(t *testing.T, img v1.Image, file string) []byte {
	t.Helper()
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers %d (%v), want 1", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rc.Close() }()
	return tarFile(t, rc, file)
}

func tarFile(t *testing.T, r io.Reader, file string) []byte {
	t.Helper()
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			t.Fatalf("no %s in the archive", file)
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Name == file {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
	}
}

func gunzip(t *testing.T, path string) io.Reader {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return zr
}

// The index holds exactly linux/amd64 and linux/arm64, each image's layer
// the daemon built for that machine; the layout and the OCI archive in the
// release hold that index under the release's tag.
func TestReleaseIndexHoldsTheDaemonPerPlatform(t *testing.T) {
	r := buildTestRelease(t)
	im, err := r.res.Index.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if im.MediaType != types.OCIImageIndex {
		t.Errorf("index media type %s, want %s", im.MediaType, types.OCIImageIndex)
	}
	if got := im.Annotations["org.opencontainers.image.version"]; got != testVersion {
		t.Errorf("index version annotation %q, want %q", got, testVersion)
	}
	if got := im.Annotations["org.opencontainers.image.revision"]; got != testRevision {
		t.Errorf("index revision annotation %q, want %q", got, testRevision)
	}
	var platforms []string
	machines := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}
	for _, d := range im.Manifests {
		if d.Platform == nil {
			t.Fatalf("manifest %s has no platform", d.Digest)
		}
		platforms = append(platforms, d.Platform.OS+"/"+d.Platform.Architecture)
		img, err := r.res.Index.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cf.OS != d.Platform.OS || cf.Architecture != d.Platform.Architecture || cf.Config.Labels[labelVersion] != testVersion {
			t.Errorf("%s: config says %s/%s version %q", d.Digest, cf.OS, cf.Architecture, cf.Config.Labels[labelVersion])
		}
		f, err := elf.NewFile(bytes.NewReader(layerFile(t, img, BinaryPath[1:])))
		if err != nil {
			t.Fatalf("%s: %v", d.Platform.Architecture, err)
		}
		if want := machines[d.Platform.Architecture]; f.Machine != want {
			t.Errorf("%s image: the daemon is for %s, want %s", d.Platform.Architecture, f.Machine, want)
		}
	}
	if want := []string{"linux/amd64", "linux/arm64"}; !slices.Equal(platforms, want) {
		t.Errorf("index platforms %v, want %v", platforms, want)
	}

	p, err := layout.FromPath(r.path("image"))
	if err != nil {
		t.Fatal(err)
	}
	top, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	tm, err := top.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(tm.Manifests) != 1 || tm.Manifests[0].Digest != r.res.IndexDigest ||
		tm.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != testVersion {
		t.Errorf("layout index.json %+v, want one descriptor of %s named %s", tm.Manifests, r.res.IndexDigest, testVersion)
	}
	f, err := os.Open(r.path(artifactName(testVersion, "image.oci.tar")))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	index, err := os.ReadFile(r.path("image/index.json"))
	if err != nil {
		t.Fatal(err)
	}
	if got := tarFile(t, f, "index.json"); !bytes.Equal(got, index) {
		t.Errorf("the OCI archive's index.json differs from the layout's")
	}
}

// The same binaries give the same index digest and the same archives, byte
// for byte (a stand-in binary keeps this cheap under -race; `make release`
// twice gives the same SHA256SUMS).
func TestReleaseIsReproducible(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "standin")
	if err := os.WriteFile(bin, staticBinary(t), 0o755); err != nil {
		t.Fatal(err)
	}
	platforms := []Platform{{"linux", runtime.GOARCH}}
	var digests []v1.Hash
	var archives [][]byte
	for i := range 2 {
		idx, err := BuildIndex(testVersion, testRevision, testCreated, platforms, []string{bin})
		if err != nil {
			t.Fatal(err)
		}
		digests = append(digests, digest2(t, idx))
		// The same name: the archive's directory is named after it.
		archive := filepath.Join(dir, fmt.Sprint(i), "standin.tar.gz")
		if err := os.Mkdir(filepath.Dir(archive), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := writeCLIArchive(archive, filepath.Join("..", ".."), bin, testCreated); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(archive)
		if err != nil {
			t.Fatal(err)
		}
		archives = append(archives, b)
	}
	if digests[0] != digests[1] {
		t.Errorf("the same binary gave the indexes %s and %s", digests[0], digests[1])
	}
	if !bytes.Equal(archives[0], archives[1]) {
		t.Error("the same binary gave two different CLI archives")
	}

	r := buildTestRelease(t)
	if r.res.Chart != "" {
		chart := filepath.Join(dir, "chart.tgz")
		if err := normalizeTarGz(r.res.Chart, chart, testCreated); err != nil {
			t.Fatal(err)
		}
		sameFile(t, r.res.Chart, chart)
	}
}

func digest2(t *testing.T, idx v1.ImageIndex) v1.Hash {
	t.Helper()
	d, err := idx.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func sameFile(t *testing.T, a, b string) {
	t.Helper()
	ab, err := os.ReadFile(a)
	if err != nil {
		t.Fatal(err)
	}
	bb, err := os.ReadFile(b)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(ab, bb) {
		t.Errorf("%s and %s differ", filepath.Base(a), b)
	}
}

// Each CLI archive holds the binary for its platform, LICENSE and
// README.md, with fixed owners and times.
func TestReleaseCLIArchives(t *testing.T) {
	r := buildTestRelease(t)
	for _, p := range r.opts.CLIPlatforms {
		name := artifactName(testVersion, p.OS+"_"+p.Arch+".tar.gz")
		top := strings.TrimSuffix(name, ".tar.gz")
		tr := tar.NewReader(gunzip(t, r.path(name)))
		var names []string
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			names = append(names, h.Name)
			if h.Uid != 0 || h.Gid != 0 || h.Uname != "" || h.Gname != "" || !h.ModTime.Equal(testCreated) {
				t.Errorf("%s %s: owner %d:%d (%q:%q), mtime %s", name, h.Name, h.Uid, h.Gid, h.Uname, h.Gname, h.ModTime)
			}
			if h.Name == top+"/"+binaryName {
				b, _ := io.ReadAll(tr)
				f, err := elf.NewFile(bytes.NewReader(b))
				if err != nil || f.Machine != elfMachines[p.Arch] || h.Mode != 0o755 {
					t.Errorf("%s: the binary is not an executable ELF for %s (%v, mode %o)", name, p.Arch, err, h.Mode)
				}
			}
		}
		want := []string{top + "/", top + "/LICENSE", top + "/README.md", top + "/" + binaryName}
		if !slices.Equal(names, want) {
			t.Errorf("%s holds %q, want %q", name, names, want)
		}
	}
}

// indexDigestFor is the digest of idx's linux/arch image.
func indexDigestFor(t *testing.T, idx v1.ImageIndex, arch string) v1.Hash {
	t.Helper()
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range im.Manifests {
		if d.Platform != nil && d.Platform.OS == "linux" && d.Platform.Architecture == arch {
			return d.Digest
		}
	}
	t.Fatalf("no linux/%s image in the index", arch)
	return v1.Hash{}
}

// The released linux/amd64 daemon (in the image) prints the release version
// and commit.
func TestReleaseBinaryPrintsVersionAndCommit(t *testing.T) {
	r := buildTestRelease(t)
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		t.Skipf("the linux/amd64 binary does not run on %s/%s", runtime.GOOS, runtime.GOARCH)
	}
	img, err := r.res.Index.Image(indexDigestFor(t, r.res.Index, "amd64"))
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), binaryName)
	if err := os.WriteFile(bin, layerFile(t, img, BinaryPath[1:]), 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("%s version: %v\n%s", bin, err, out)
	}
	for _, want := range []string{"version: " + testVersion + "\n", "commit: " + testRevision + "\n", "go: go1."} {
		if !strings.Contains(string(out), want) {
			t.Errorf("version printed %q, want it to contain %q", out, want)
		}
	}
}

// SHA256SUMS lists every file of the release with its digest, and
// `sha256sum -c` agrees where it is installed.
func TestReleaseSHA256Sums(t *testing.T) {
	r := buildTestRelease(t)
	f, err := os.Open(r.path(sumsName))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	line := regexp.MustCompile(`^([0-9a-f]{64})  (\S+)$`)
	var listed []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		m := line.FindStringSubmatch(s.Text())
		if m == nil {
			t.Fatalf("%s: bad line %q", sumsName, s.Text())
		}
		b, err := os.ReadFile(r.path(m[2]))
		if err != nil {
			t.Fatal(err)
		}
		if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != m[1] {
			t.Errorf("%s: %s, listed %s", m[2], hex.EncodeToString(sum[:]), m[1])
		}
		listed = append(listed, m[2])
	}
	want := []string{
		artifactName(testVersion, "cli.cdx.json"),
		artifactName(testVersion, "image.cdx.json"),
		artifactName(testVersion, "image.oci.tar"),
		artifactName(testVersion, "linux_amd64.tar.gz"),
	}
	if r.res.Chart != "" {
		want = append([]string{filepath.Base(r.res.Chart)}, want...)
	}
	if !slices.Equal(listed, want) {
		t.Errorf("%s lists %q, want %q", sumsName, listed, want)
	}
	if _, err := exec.LookPath("sha256sum"); err == nil {
		cmd := exec.Command("sha256sum", "-c", sumsName)
		cmd.Dir = r.opts.Out
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("sha256sum -c: %v\n%s", err, out)
		}
	}
}

// Both SBOMs list every module the daemon is built from, at the version
// the root go.mod requires, as pkg:golang purls with their go.sum hash.
func TestReleaseSBOMsListTheModules(t *testing.T) {
	r := buildTestRelease(t)
	root := filepath.Join("..", "..")

	// What go.mod requires.
	out, err := exec.Command("go", "mod", "edit", "-json", filepath.Join(root, "go.mod")).Output()
	if err != nil {
		t.Fatal(err)
	}
	var gomod struct {
		Module  struct{ Path string }
		Require []struct{ Path, Version string }
		Replace []struct {
			Old, New struct{ Path, Version string }
		}
	}
	if err := json.Unmarshal(out, &gomod); err != nil {
		t.Fatal(err)
	}
	required := map[string]string{}
	for _, r := range gomod.Require {
		required[r.Path] = r.Version
	}
	// The modules whose packages the daemon links.
	cmd := exec.Command("go", "list", "-deps", "-f", "{{with .Module}}{{if not .Main}}{{.Path}} {{.Version}}{{end}}{{end}}", mainPackage)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	out, err = cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	linked := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if f := strings.Fields(l); len(f) == 2 {
			linked[f[0]] = f[1]
		}
	}
	if len(linked) < 10 || len(gomod.Replace) > 0 {
		t.Fatalf("go list found %d modules, go.mod has %d replacements: this test expects many and none", len(linked), len(gomod.Replace))
	}

	for _, kind := range []string{"cli", "image"} {
		name := artifactName(testVersion, kind+".cdx.json")
		f, err := os.Open(r.path(name))
		if err != nil {
			t.Fatal(err)
		}
		var bom cdx.BOM
		err = cdx.NewBOMDecoder(f, cdx.BOMFileFormatJSON).Decode(&bom)
		_ = f.Close()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		listed := map[string]cdx.Component{}
		for _, c := range *bom.Components {
			listed[c.PackageURL] = c
		}
		for path, version := range linked {
			if required[path] != version {
				t.Errorf("the daemon links %s %s, go.mod requires %q", path, version, required[path])
			}
			c, ok := listed[goPURL(path, version)]
			if !ok {
				t.Errorf("%s does not list %s", name, goPURL(path, version))
				continue
			}
			if c.Properties == nil || len(*c.Properties) != 1 || !strings.HasPrefix((*c.Properties)[0].Value, "h1:") {
				t.Errorf("%s: %s has no go.sum hash", name, c.PackageURL)
			}
		}
		if _, ok := listed[goPURL("stdlib", runtime.Version())]; !ok {
			t.Errorf("%s does not list the Go standard library %s", name, runtime.Version())
		}
		subject := bom.Metadata.Component
		switch kind {
		case "cli":
			if subject.PackageURL != goPURL(gomod.Module.Path, testVersion) {
				t.Errorf("%s describes %s, want the main module at %s", name, subject.PackageURL, testVersion)
			}
		case "image":
			if subject.Type != cdx.ComponentTypeContainer || !strings.Contains(subject.PackageURL, "@sha256%3A"+r.res.IndexDigest.Hex) {
				t.Errorf("%s describes %s %s, want the container image %s", name, subject.Type, subject.PackageURL, r.res.IndexDigest)
			}
		}
	}
}

// The push writes the index to REGISTRY/endpoint-aggregator:VERSION, and
// the chart (with helm) to REGISTRY/charts/endpoint-aggregator:CHARTVERSION.
func TestReleasePushRoundTrips(t *testing.T) {
	r := buildTestRelease(t)
	ref, err := name.NewTag(r.res.ImageRef)
	if err != nil {
		t.Fatal(err)
	}
	if want := r.registry + "/endpoint-aggregator:" + testVersion; r.res.ImageRef != want {
		t.Errorf("image %s, want %s", r.res.ImageRef, want)
	}
	idx, err := remote.Index(ref, remote.WithTransport(r.transport))
	if err != nil {
		t.Fatal(err)
	}
	if d := digest2(t, idx); d != r.res.IndexDigest {
		t.Errorf("the registry serves %s, the release wrote %s", d, r.res.IndexDigest)
	}
	if r.res.Chart == "" {
		t.Fatal("the release packaged no chart, so pushed none")
	}
	chartRef, err := name.NewTag(r.registry + "/charts/endpoint-aggregator:" + ChartVersion(testVersion))
	if err != nil {
		t.Fatal(err)
	}
	img, err := remote.Image(chartRef, remote.WithTransport(r.transport))
	if err != nil {
		t.Fatalf("the pushed chart: %v", err)
	}
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	if m.Config.MediaType != "application/vnd.cncf.helm.config.v1+json" {
		t.Errorf("the pushed chart's config is %s", m.Config.MediaType)
	}
	// Its one layer is the packaged chart, byte for byte.
	b, err := os.ReadFile(r.res.Chart)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	if len(m.Layers) != 1 || m.Layers[0].Digest.Hex != hex.EncodeToString(sum[:]) {
		t.Errorf("the pushed chart's layers %+v, want one of sha256:%x", m.Layers, sum)
	}
}

// The packaged chart is version X.Y.Z, appVersion vX.Y.Z, and runs the
// release's image by default.
func TestReleaseChartDefaultsToTheReleaseImage(t *testing.T) {
	r := buildTestRelease(t)
	if r.res.Chart == "" {
		t.Fatal("the release packaged no chart")
	}
	if want := "endpoint-aggregator-" + strings.TrimPrefix(testVersion, "v") + ".tgz"; filepath.Base(r.res.Chart) != want {
		t.Errorf("chart %s, want %s", filepath.Base(r.res.Chart), want)
	}
	chartYAML := string(tarFile(t, gunzip(t, r.res.Chart), chartName+"/Chart.yaml"))
	for _, want := range []string{"\nversion: " + ChartVersion(testVersion) + "\n", "\nappVersion: " + testVersion + "\n"} {
		if !strings.Contains(chartYAML, want) {
			t.Errorf("Chart.yaml lacks %q:\n%s", strings.TrimSpace(want), chartYAML)
		}
	}
	out, err := exec.Command(r.opts.Helm, "template", "ea", r.res.Chart, "--namespace", "ea").CombinedOutput()
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, out)
	}
	want := `image: "` + r.res.ImageRef + `"`
	if n := strings.Count(string(out), "image: "); n == 0 || n != strings.Count(string(out), want) {
		t.Errorf("helm template renders %d images, %d of them %s", n, strings.Count(string(out), want), want)
	}
	// That reference, asked of the registry, is the index the release pushed.
	ref, err := name.ParseReference(r.res.ImageRef, name.StrictValidation)
	if err != nil {
		t.Fatal(err)
	}
	desc, err := remote.Head(ref, remote.WithTransport(r.transport))
	if err != nil {
		t.Fatalf("the chart's default image %s: %v", ref, err)
	}
	if desc.Digest != r.res.IndexDigest || desc.MediaType != types.OCIImageIndex {
		t.Errorf("the chart's default image %s is %s %s in the registry, want the index %s", ref, desc.MediaType, desc.Digest, r.res.IndexDigest)
	}
}

func TestReleaseRefuses(t *testing.T) {
	for _, v := range []string{"0.1.0", "v0.1", "v0.1.0+build.1", "v01.2.3", ""} {
		if _, err := Release(context.Background(), ReleaseOptions{Version: v, Out: t.TempDir()}); err == nil || !strings.Contains(err.Error(), "want vMAJOR") {
			t.Errorf("version %q: %v, want it refused", v, err)
		}
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "precious"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := resetDir(dir); err == nil {
		t.Error("resetDir emptied a directory that is no release")
	}
	if _, err := os.Stat(filepath.Join(dir, "precious")); err != nil {
		t.Error(err)
	}
}

// A release binary gets the -X flags make image sets.
func TestReleaseLDFlagsMatchTheMakefile(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	xflag := regexp.MustCompile(`-X ([^ ='"]+)=`)
	var inMakefile []string
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "IMAGE_LDFLAGS") {
			for _, m := range xflag.FindAllStringSubmatch(line, -1) {
				inMakefile = append(inMakefile, m[1])
			}
		}
	}
	var inRelease []string
	for _, m := range xflag.FindAllStringSubmatch(LDFlags("v1.2.3", "abc"), -1) {
		inRelease = append(inRelease, m[1])
	}
	if len(inMakefile) == 0 || !slices.Equal(inMakefile, inRelease) {
		t.Errorf("-X in IMAGE_LDFLAGS %q, in LDFlags %q: want the same", inMakefile, inRelease)
	}
}
