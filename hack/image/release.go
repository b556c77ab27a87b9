package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The daemon's package and the variables its -ldflags -X set.
const (
	mainPackage = "./cmd/endpoint-aggregator"
	appPackage  = "github.com/endpoint-aggregator/endpoint-aggregator/cmd/endpoint-aggregator/app"
	binaryName  = "endpoint-aggregator"
	chartName   = "endpoint-aggregator"
)

// Platforms the release builds: the image's, and the CLI archives'.
var (
	ImagePlatforms = []Platform{{"linux", "amd64"}, {"linux", "arm64"}}
	CLIPlatforms   = []Platform{{"linux", "amd64"}, {"linux", "arm64"}, {"darwin", "amd64"}, {"darwin", "arm64"}}
)

// Platform is a GOOS/GOARCH pair.
type Platform struct{ OS, Arch string }

func (p Platform) String() string { return p.OS + "/" + p.Arch }

// ReleaseOptions say what `image release` builds from and where it writes.
type ReleaseOptions struct {
	// Version is the release, vMAJOR.MINOR.PATCH[-PRERELEASE]: the image
	// tag, the chart's appVersion, what `endpoint-aggregator version` prints.
	// The chart's version is the same without the "v".
	Version string
	// Revision is the git commit (the image's revision, the binaries' app.Commit).
	Revision string
	// Source is the root of the main module; Out the release directory.
	Source, Out string
	// Go and Helm are the go and helm commands. Without Helm no chart is packaged.
	Go, Helm string
	// Registry, when set, is where the image (Registry/endpoint-aggregator)
	// and the chart (oci://Registry/charts) are pushed; the packaged chart
	// then defaults to that image repository.
	Registry string
	// RegistryCA, when set, is the PEM CA the registry's certificate is
	// checked against (besides the system's), for the image push and
	// `helm push --ca-file`; the push is then over TLS even to loopback.
	RegistryCA string
	// Created is every timestamp the artifacts carry (SOURCE_DATE_EPOCH).
	Created time.Time
	// CLIPlatforms are the CLI archives to build (default: CLIPlatforms).
	CLIPlatforms []Platform
	// SkipCLI builds no CLI archives and no CLI SBOM: the image and the
	// chart only (the real-node tests).
	SkipCLI bool
	Log     io.Writer
}

// ReleaseResult is what a release wrote.
type ReleaseResult struct {
	Index       v1.ImageIndex
	IndexDigest v1.Hash
	// ImageRef is the image's repository:tag; Chart the packaged chart's
	// path (empty without Helm); Files every file SHA256SUMS lists.
	ImageRef string
	Chart    string
	Files    []string
}

// semverTag is a release version as git tags and image tags write it.
var semverTag = regexp.MustCompile(`^v(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$`)

// ChartVersion is the chart's SemVer 2 version for a release version: Helm
// charts are versioned without the "v" (helm package names the file by it).
func ChartVersion(version string) string { return strings.TrimPrefix(version, "v") }

func runRelease(args []string) error {
	fs := flag.NewFlagSet("release", flag.ContinueOnError)
	var o ReleaseOptions
	fs.StringVar(&o.Version, "version", "", "the release version vX.Y.Z[-pre] (required)")
	fs.StringVar(&o.Revision, "revision", "", "the git commit")
	fs.StringVar(&o.Source, "source", ".", "the root of the main module")
	fs.StringVar(&o.Out, "o", "bin/release", "the release directory (emptied first)")
	fs.StringVar(&o.Go, "go", "go", "the go command")
	fs.StringVar(&o.Helm, "helm", "", "the helm command (no chart without it)")
	fs.StringVar(&o.Registry, "registry", "", "push the image to REGISTRY/endpoint-aggregator and the chart to oci://REGISTRY/charts")
	fs.StringVar(&o.RegistryCA, "ca-file", "", "with -registry: the PEM CA of the registry's TLS certificate")
	fs.BoolVar(&o.SkipCLI, "no-cli", false, "build only the image and the chart (no CLI archives)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return errors.New("release takes no arguments")
	}
	created, err := sourceDateEpoch()
	if err != nil {
		return err
	}
	o.Created = created
	o.Log = os.Stdout
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	_, err = Release(ctx, o)
	return err
}

// Release builds the binaries, the image index, the CLI archives, their
// SBOMs and the chart into o.Out, writes SHA256SUMS, and pushes with
// o.Registry set. The same sources and options give the same files.
func Release(ctx context.Context, o ReleaseOptions) (*ReleaseResult, error) {
	if !semverTag.MatchString(o.Version) {
		return nil, fmt.Errorf("version %q: want vMAJOR.MINOR.PATCH[-PRERELEASE]", o.Version)
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	if o.SkipCLI {
		o.CLIPlatforms = nil
	} else if o.CLIPlatforms == nil {
		o.CLIPlatforms = CLIPlatforms
	}
	if o.Go == "" {
		o.Go = "go"
	}
	if err := resetDir(o.Out); err != nil {
		return nil, err
	}
	work, err := os.MkdirTemp("", "release-")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.RemoveAll(work) }()

	repo, err := imageRepository(o)
	if err != nil {
		return nil, err
	}
	res := &ReleaseResult{ImageRef: repo + ":" + o.Version}

	// The binaries: one per platform, the linux ones shared by the image
	// and the CLI archives.
	bins := map[Platform]string{}
	for _, p := range append(append([]Platform(nil), ImagePlatforms...), o.CLIPlatforms...) {
		if _, ok := bins[p]; ok {
			continue
		}
		out := filepath.Join(work, p.OS+"_"+p.Arch, binaryName)
		fmt.Fprintf(o.Log, "go build %s (%s)\n", mainPackage, p)
		if err := goBuild(ctx, o, p, out); err != nil {
			return nil, err
		}
		bins[p] = out
	}

	// The image index.
	var imageBins []string
	for _, p := range ImagePlatforms {
		imageBins = append(imageBins, bins[p])
	}
	idx, err := BuildIndex(o.Version, o.Revision, o.Created, ImagePlatforms, imageBins)
	if err != nil {
		return nil, err
	}
	res.Index = idx
	if res.IndexDigest, err = idx.Digest(); err != nil {
		return nil, err
	}
	layoutDir := filepath.Join(o.Out, "image")
	if err := writeLayout(layoutDir, idx, res.ImageRef, o.Version); err != nil {
		return nil, err
	}
	ociTar := filepath.Join(o.Out, artifactName(o.Version, "image.oci.tar"))
	if err := writeDirTar(ociTar, layoutDir, o.Created); err != nil {
		return nil, err
	}
	fmt.Fprintf(o.Log, "%s: %s %v index %s\n", ociTar, res.ImageRef, ImagePlatforms, res.IndexDigest)

	imageSBOM, err := NewImageSBOM(o.Version, repo, res.IndexDigest, o.Created, imageBins)
	if err != nil {
		return nil, err
	}
	if err := writeSBOM(filepath.Join(o.Out, artifactName(o.Version, "image.cdx.json")), imageSBOM); err != nil {
		return nil, err
	}

	// The CLI archives.
	if err := writeCLI(o, bins); err != nil {
		return nil, err
	}

	// The chart.
	if o.Helm == "" {
		fmt.Fprintln(o.Log, "no helm: the chart is not packaged")
	} else {
		if res.Chart, err = packageChart(ctx, o, repo, work); err != nil {
			return nil, err
		}
		fmt.Fprintf(o.Log, "%s: version %s, appVersion %s, image %s\n", res.Chart, ChartVersion(o.Version), o.Version, res.ImageRef)
	}

	if res.Files, err = writeSHA256Sums(o.Out); err != nil {
		return nil, err
	}
	fmt.Fprintf(o.Log, "%s\n", filepath.Join(o.Out, sumsName))

	if o.Registry != "" {
		if err := push(ctx, o, res); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// writeCLI writes the CLI archive of each o.CLIPlatforms (bins holds
// their binaries) and their SBOM; nothing without CLI platforms.
func writeCLI(o ReleaseOptions, bins map[Platform]string) error {
	if len(o.CLIPlatforms) == 0 {
		return nil
	}
	var cliBins []string
	for _, p := range o.CLIPlatforms {
		archive := filepath.Join(o.Out, artifactName(o.Version, p.OS+"_"+p.Arch+".tar.gz"))
		if err := writeCLIArchive(archive, o.Source, bins[p], o.Created); err != nil {
			return err
		}
		cliBins = append(cliBins, bins[p])
		fmt.Fprintf(o.Log, "%s\n", archive)
	}
	cliSBOM, err := NewCLISBOM(o.Version, o.Created, cliBins)
	if err != nil {
		return err
	}
	return writeSBOM(filepath.Join(o.Out, artifactName(o.Version, "cli.cdx.json")), cliSBOM)
}

// artifactName is endpoint-aggregator_VERSION_SUFFIX.
func artifactName(version, suffix string) string {
	return binaryName + "_" + version + "_" + suffix
}

// resetDir empties dir for a new release, refusing a non-empty directory
// that holds no SHA256SUMS (not an earlier release).
func resetDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if len(entries) > 0 {
		if _, err := os.Stat(filepath.Join(dir, sumsName)); err != nil {
			return fmt.Errorf("%s is not empty and holds no %s: not removing it", dir, sumsName)
		}
		if err := os.RemoveAll(dir); err != nil {
			return err
		}
	}
	return os.MkdirAll(dir, 0o755)
}

// LDFlags are the -ldflags of a release binary: stripped, no build ID, and
// the version and commit `endpoint-aggregator version` prints (as make image
// sets them).
func LDFlags(version, commit string) string {
	return "-s -w -buildid= -X " + appPackage + ".Version=" + version + " -X " + appPackage + ".Commit=" + commit
}

// goBuild builds the static daemon for p: no cgo, no paths, no VCS stamp
// and no build ID, so the same sources and toolchain give the same bytes.
func goBuild(ctx context.Context, o ReleaseOptions, p Platform, out string) error {
	cmd := exec.CommandContext(ctx, o.Go, "build", "-trimpath", "-buildvcs=false",
		"-ldflags", LDFlags(o.Version, o.Revision), "-o", out, mainPackage)
	cmd.Dir = o.Source
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+p.OS, "GOARCH="+p.Arch)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %w\n%s", p, err, b)
	}
	return nil
}

// BuildIndex is the OCI image index of one image per platform (bins[i] is
// platforms[i]'s daemon), annotated like the images' labels.
func BuildIndex(version, revision string, created time.Time, platforms []Platform, bins []string) (v1.ImageIndex, error) {
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for i, p := range platforms {
		b, err := os.ReadFile(bins[i])
		if err != nil {
			return nil, err
		}
		img, err := Build(Options{Binary: b, Arch: p.Arch, Version: version, Revision: revision, Created: created})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        img,
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: p.OS, Architecture: p.Arch}},
		})
	}
	ann := labels(Options{Version: version, Revision: revision})
	ann["org.opencontainers.image.created"] = created.UTC().Format(time.RFC3339)
	return mutate.Annotations(idx, ann).(v1.ImageIndex), nil
}

// writeLayout writes idx as an OCI image layout whose index.json names it
// by tag (org.opencontainers.image.ref.name) and by full reference (as
// containerd's import reads it).
func writeLayout(dir string, idx v1.ImageIndex, ref, tag string) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	return p.AppendIndex(idx, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": tag,
		"io.containerd.image.name":          ref,
	}))
}

// imageRepository is where the image is (to be) pushed: REGISTRY/endpoint-aggregator,
// else the chart's default image.repository.
func imageRepository(o ReleaseOptions) (string, error) {
	var repo string
	if o.Registry != "" {
		repo = strings.TrimSuffix(o.Registry, "/") + "/" + binaryName
	} else {
		b, err := os.ReadFile(filepath.Join(o.Source, "charts", chartName, "values.yaml"))
		if err != nil {
			return "", err
		}
		m := valuesRepository.FindSubmatch(b)
		if m == nil {
			return "", errors.New("the chart's values.yaml sets no image.repository")
		}
		repo = string(m[2])
	}
	if _, err := name.NewRepository(repo, name.StrictValidation); err != nil {
		return "", fmt.Errorf("image repository %q: %w", repo, err)
	}
	return repo, nil
}

// valuesRepository finds image.repository in values.yaml (two-space
// indentation under a top-level image:).
var valuesRepository = regexp.MustCompile(`(?m)^(image:\n(?:  .*\n|\n)*?  repository: *)(\S+)`)

// push pushes the index to ImageRef and the chart to oci://REGISTRY/charts.
func push(ctx context.Context, o ReleaseOptions, res *ReleaseResult) error {
	ref, err := name.NewTag(res.ImageRef, name.StrictValidation)
	if err != nil {
		return err
	}
	opts := []remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)}
	args := []string{"push", res.Chart, "oci://" + strings.TrimSuffix(o.Registry, "/") + "/charts"}
	switch {
	case o.RegistryCA != "":
		tr, err := caTransport(o.RegistryCA)
		if err != nil {
			return err
		}
		opts = append(opts, remote.WithTransport(tr))
		args = append(args, "--ca-file", o.RegistryCA)
	case ref.Scheme() == "http":
		// Plain HTTP where go-containerregistry falls back to it:
		// localhost and loopback.
		args = append(args, "--plain-http")
	}
	if err := remote.WriteIndex(ref, res.Index, opts...); err != nil {
		return fmt.Errorf("push %s: %w", ref, err)
	}
	fmt.Fprintf(o.Log, "pushed %s@%s\n", ref, res.IndexDigest)
	if res.Chart == "" {
		return nil
	}
	cmd := exec.CommandContext(ctx, o.Helm, args...)
	b, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("helm %s: %w\n%s", strings.Join(args, " "), err, b)
	}
	_, _ = o.Log.Write(b)
	return nil
}

// caTransport is go-containerregistry's default transport trusting the PEM
// CA in caFile besides the system's roots.
func caTransport(caFile string) (http.RoundTripper, error) {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: no PEM certificate", caFile)
	}
	tr := remote.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	return tr, nil
}
