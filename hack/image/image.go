package main

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"path"
	"sort"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/crypto/x509roots/fallback/bundle"
)

// What the image is. The Dockerfile describes the same image on top of
// gcr.io/distroless/static:nonroot; dockerfile_test.go checks that the two
// agree, so change both together.
const (
	// BinaryPath is where the daemon's binary lives (COPY ... /endpoint-aggregator).
	BinaryPath = "/endpoint-aggregator"
	// User is the image's USER: distroless' nonroot, the UID and GID the
	// chart's securityContext runs as.
	User     = "65532:65532"
	UID      = 65532
	GID      = 65532
	UserName = "nonroot"
	// HomeDir is nonroot's home and the working directory, as in distroless.
	HomeDir = "/home/nonroot"
	// CACertsPath holds the Mozilla roots (as distroless' ca-certificates
	// does): a member kubeconfig without certificate-authority-data is
	// verified against them.
	CACertsPath = "/etc/ssl/certs/ca-certificates.crt"
	// MetricsPort serves /metrics, /healthz and /readyz (the default of
	// --metrics-bind-address and the chart's metrics.port).
	MetricsPort = "8080/tcp"
	// SourceURL is org.opencontainers.image.source (the chart's sources).
	SourceURL = "https://github.com/endpoint-aggregator/endpoint-aggregator"
)

// Entrypoint and Cmd: `docker run IMAGE` runs the daemon; the chart passes
// its own args ("run", flags) after the entrypoint.
var (
	Entrypoint = []string{BinaryPath}
	Cmd        = []string{"run"}
	// Env is distroless' environment.
	Env = []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"SSL_CERT_FILE=" + CACertsPath,
	}
)

// StaticLabels are the OCI annotations that do not depend on the build; the
// Dockerfile's LABEL carries the same ones. Build adds version and revision.
var StaticLabels = map[string]string{
	"org.opencontainers.image.title":       "endpoint-aggregator",
	"org.opencontainers.image.description": "Aggregates Services and EndpointSlices of member Kubernetes clusters into a hub (Multi-Cluster Services API)",
	"org.opencontainers.image.source":      SourceURL,
	"org.opencontainers.image.licenses":    "Apache-2.0",
}

const (
	labelVersion  = "org.opencontainers.image.version"
	labelRevision = "org.opencontainers.image.revision"
)

// Options say what to build from.
type Options struct {
	// Binary is the daemon: a static linux ELF executable for Arch.
	Binary []byte
	// Arch is the GOARCH of Binary and of the image's platform.
	Arch string
	// Version and Revision become the OCI version and revision labels
	// (revision omitted when empty).
	Version  string
	Revision string
	// Created is the config's creation time and every file's mtime
	// (SOURCE_DATE_EPOCH; the zero value means the Unix epoch).
	Created time.Time
}

// Build returns the image: one layer holding the binary and the few files of
// distroless/static the daemon uses, and a config with no base image. The
// same Options give the same digest.
func Build(o Options) (v1.Image, error) {
	if err := checkBinary(o.Binary, o.Arch); err != nil {
		return nil, err
	}
	created := o.Created
	if created.IsZero() {
		created = time.Unix(0, 0)
	}
	created = created.UTC()

	layerTar, err := rootFS(o.Binary, created)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
	if err != nil {
		return nil, err
	}

	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{
		Layer: layer,
		History: v1.History{
			Created:   v1.Time{Time: created},
			CreatedBy: "hack/image: " + BinaryPath + " on a distroless-like rootfs",
		},
	})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Created = v1.Time{Time: created}
	cf.OS = "linux"
	cf.Architecture = o.Arch
	cf.Config = v1.Config{
		Entrypoint:   Entrypoint,
		Cmd:          Cmd,
		User:         User,
		Env:          Env,
		WorkingDir:   HomeDir,
		ExposedPorts: map[string]struct{}{MetricsPort: {}},
		Labels:       labels(o),
	}
	return mutate.ConfigFile(img, cf)
}

func labels(o Options) map[string]string {
	l := make(map[string]string, len(StaticLabels)+2)
	for k, v := range StaticLabels {
		l[k] = v
	}
	l[labelVersion] = o.Version
	if o.Revision != "" {
		l[labelRevision] = o.Revision
	}
	return l
}

// elfMachines maps the GOARCHes the image is built for to their ELF machine.
var elfMachines = map[string]elf.Machine{
	"amd64":   elf.EM_X86_64,
	"arm64":   elf.EM_AARCH64,
	"arm":     elf.EM_ARM,
	"386":     elf.EM_386,
	"ppc64le": elf.EM_PPC64,
	"s390x":   elf.EM_S390,
	"riscv64": elf.EM_RISCV,
}

// checkBinary refuses what would not run in an image without libc or a
// dynamic loader: anything but a static linux executable for arch.
func checkBinary(b []byte, arch string) error {
	want, ok := elfMachines[arch]
	if !ok {
		return fmt.Errorf("unsupported GOARCH %q", arch)
	}
	f, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		return fmt.Errorf("the binary is not an ELF file (build it with GOOS=linux): %w", err)
	}
	defer func() { _ = f.Close() }()
	if f.Type != elf.ET_EXEC && f.Type != elf.ET_DYN {
		return fmt.Errorf("the binary is an ELF %s, not an executable", f.Type)
	}
	if f.Machine != want {
		return fmt.Errorf("the binary is for %s, not GOARCH %s", f.Machine, arch)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return errors.New("the binary is dynamically linked (build it with CGO_ENABLED=0): the image has no libc")
		}
	}
	return nil
}

// The users and groups of distroless/static, whose nonroot the chart runs as.
const (
	passwd = "root:x:0:0:root:/root:/sbin/nologin\n" +
		"nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n" +
		"nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"
	group = "root:x:0:\n" +
		"nobody:x:65534:\n" +
		"nonroot:x:65532:\n"
)

type entry struct {
	hdr  tar.Header
	data []byte
}

// rootFS is the layer's tar: sorted entries, fixed owners, modes and times.
// No shell and no other binary: only the daemon runs in it.
func rootFS(binary []byte, mtime time.Time) ([]byte, error) {
	dir := func(name string, mode int64, uid, gid int) entry {
		return entry{hdr: tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: mode, Uid: uid, Gid: gid}}
	}
	file := func(name string, mode int64, data []byte) entry {
		return entry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data))}, data: data}
	}
	entries := []entry{
		file(BinaryPath[1:], 0o755, binary),
		dir("etc", 0o755, 0, 0),
		file("etc/group", 0o644, []byte(group)),
		file("etc/passwd", 0o644, []byte(passwd)),
		dir("etc/ssl", 0o755, 0, 0),
		dir("etc/ssl/certs", 0o755, 0, 0),
		file(CACertsPath[1:], 0o644, caBundle()),
		dir("home", 0o755, 0, 0),
		dir(HomeDir[1:], 0o700, UID, GID),
		dir("tmp", 0o1777, 0, 0),
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].hdr.Name < entries[j].hdr.Name })

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	seen := map[string]bool{}
	for _, e := range entries {
		if parent := path.Dir(path.Clean(e.hdr.Name)); parent != "." && !seen[parent+"/"] {
			return nil, fmt.Errorf("layer: %s comes before its directory", e.hdr.Name)
		}
		seen[e.hdr.Name] = true
		h := e.hdr
		h.ModTime = mtime
		h.Format = tar.FormatUSTAR
		if err := tw.WriteHeader(&h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// caBundle is the PEM bundle of the Mozilla roots pinned by
// golang.org/x/crypto/x509roots/fallback (hack/image/go.mod), in its order.
// Roots with a constraint PEM cannot express (a distrust date) are left out.
func caBundle() []byte {
	var b bytes.Buffer
	for r := range bundle.Roots() {
		if r.Constraint != nil {
			continue
		}
		_ = pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: r.Certificate})
	}
	return b.Bytes()
}
