package main

import (
	"archive/tar"
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"io"
	"log"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/google/go-containerregistry/pkg/v1/validate"
)

var (
	binaryOnce sync.Once
	binaryPath string
	binaryErr  error
)

// staticBinary builds a small static linux program for this machine's
// GOARCH once per test run: the builder checks what it is given, so a
// stand-in for the daemon has to be a real static executable.
func staticBinary(t *testing.T) []byte {
	t.Helper()
	binaryOnce.Do(func() {
		goCmd, err := exec.LookPath("go")
		if err != nil {
			binaryErr = err
			return
		}
		dir, err := os.MkdirTemp("", "hack-image-test-")
		if err != nil {
			binaryErr = err
			return
		}
		src := "package main\n\nfunc main() { println(\"stand-in daemon\") }\n"
		if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644); err != nil {
			binaryErr = err
			return
		}
		if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module standin\n\ngo 1.26\n"), 0o644); err != nil {
			binaryErr = err
			return
		}
		binaryPath = filepath.Join(dir, "standin")
		cmd := exec.Command(goCmd, "build", "-trimpath", "-ldflags=-s -w -buildid=", "-o", binaryPath, ".")
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH, "GOFLAGS=-buildvcs=false")
		if out, err := cmd.CombinedOutput(); err != nil {
			binaryErr = &buildError{err: err, out: string(out)}
		}
	})
	if binaryErr != nil {
		t.Fatalf("building the stand-in binary: %v", binaryErr)
	}
	b, err := os.ReadFile(binaryPath)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

type buildError struct {
	err error
	out string
}

func (e *buildError) Error() string { return e.err.Error() + "\n" + e.out }

func TestMain(m *testing.M) {
	code := m.Run()
	for _, f := range cleanups {
		f()
	}
	if binaryPath != "" {
		_ = os.RemoveAll(filepath.Dir(binaryPath))
	}
	os.Exit(code)
}

func testOptions(t *testing.T) Options {
	return Options{Binary: staticBinary(t), Arch: runtime.GOARCH, Version: "v1.2.3", Revision: "0123456789abcdef0123456789abcdef01234567"}
}

func mustBuild(t *testing.T, o Options) v1.Image {
	t.Helper()
	img, err := Build(o)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	return img
}

func digest(t *testing.T, img v1.Image) v1.Hash {
	t.Helper()
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func tarballBytes(t *testing.T, img v1.Image, tag string) []byte {
	t.Helper()
	ref, err := name.NewTag(tag)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := tarball.Write(ref, img, &b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// The same binary and options give the same image digest and the same
// tarball, byte for byte; a change to any input changes the digest.
func TestBuildIsReproducible(t *testing.T) {
	o := testOptions(t)
	a, b := mustBuild(t, o), mustBuild(t, testOptions(t))
	if da, db := digest(t, a), digest(t, b); da != db {
		t.Fatalf("two builds from the same binary: digests %s and %s", da, db)
	}
	const tag = "example.test/endpoint-aggregator:v1.2.3"
	if !bytes.Equal(tarballBytes(t, a, tag), tarballBytes(t, b, tag)) {
		t.Fatal("two builds from the same binary wrote different tarballs")
	}

	other := func(f func(*Options)) v1.Image {
		o := testOptions(t)
		f(&o)
		return mustBuild(t, o)
	}
	for what, img := range map[string]v1.Image{
		"binary":   other(func(o *Options) { o.Binary = append(slices.Clone(o.Binary), 0) }),
		"version":  other(func(o *Options) { o.Version = "v1.2.4" }),
		"revision": other(func(o *Options) { o.Revision = "" }),
		"created":  other(func(o *Options) { o.Created = time.Unix(1700000000, 0) }),
	} {
		if digest(t, img) == digest(t, a) {
			t.Errorf("another %s gave the same digest", what)
		}
	}
}

func TestImageConfig(t *testing.T) {
	// validate.Image runs on what is written and pushed (the tests below):
	// in memory, a tarball layer's descriptor has empty rather than nil
	// annotations, which validate reports and the serialized manifest omits.
	img := mustBuild(t, testOptions(t))
	if mt, _ := img.MediaType(); mt != types.OCIManifestSchema1 {
		t.Errorf("media type %s, want %s", mt, types.OCIManifestSchema1)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.OS != "linux" || cf.Architecture != runtime.GOARCH {
		t.Errorf("platform %s/%s, want linux/%s", cf.OS, cf.Architecture, runtime.GOARCH)
	}
	if !cf.Created.Time.Equal(time.Unix(0, 0)) {
		t.Errorf("created %s, want the Unix epoch", cf.Created.Time)
	}
	c := cf.Config
	if c.User != "65532:65532" {
		t.Errorf("user %q, want 65532:65532", c.User)
	}
	if !slices.Equal(c.Entrypoint, []string{"/endpoint-aggregator"}) || !slices.Equal(c.Cmd, []string{"run"}) {
		t.Errorf("entrypoint %q cmd %q, want [/endpoint-aggregator] [run]", c.Entrypoint, c.Cmd)
	}
	if len(c.ExposedPorts) != 1 {
		t.Errorf("exposed ports %v, want only 8080/tcp", c.ExposedPorts)
	}
	if _, ok := c.ExposedPorts["8080/tcp"]; !ok {
		t.Errorf("exposed ports %v, want 8080/tcp", c.ExposedPorts)
	}
	if c.WorkingDir != "/home/nonroot" {
		t.Errorf("working dir %q", c.WorkingDir)
	}
	if !slices.Contains(c.Env, "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt") {
		t.Errorf("env %q has no SSL_CERT_FILE", c.Env)
	}
	want := map[string]string{
		"org.opencontainers.image.title":       "endpoint-aggregator",
		"org.opencontainers.image.description": StaticLabels["org.opencontainers.image.description"],
		"org.opencontainers.image.source":      "https://github.com/endpoint-aggregator/endpoint-aggregator",
		"org.opencontainers.image.licenses":    "Apache-2.0",
		"org.opencontainers.image.version":     "v1.2.3",
		"org.opencontainers.image.revision":    "0123456789abcdef0123456789abcdef01234567",
	}
	if len(c.Labels) != len(want) {
		t.Errorf("labels %v, want %v", c.Labels, want)
	}
	for k, v := range want {
		if c.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, c.Labels[k], v)
		}
	}
	if len(cf.History) != 1 || len(cf.RootFS.DiffIDs) != 1 {
		t.Errorf("history %d entries, %d layers; want one of each", len(cf.History), len(cf.RootFS.DiffIDs))
	}

	o := testOptions(t)
	o.Revision = ""
	if cf, _ := mustBuild(t, o).ConfigFile(); cf != nil {
		if _, ok := cf.Config.Labels["org.opencontainers.image.revision"]; ok {
			t.Error("no revision given, but the revision label is set")
		}
	}
}

type tarEntry struct {
	typ      byte
	mode     int64
	uid, gid int
}

// The layer holds exactly the binary and the few files of distroless/static
// the daemon uses: no shell, no other program.
func TestLayerContents(t *testing.T) {
	o := testOptions(t)
	o.Created = time.Unix(1700000000, 0)
	img := mustBuild(t, o)
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers %d (%v), want 1", len(layers), err)
	}
	if mt, _ := layers[0].MediaType(); mt != types.OCILayer {
		t.Errorf("layer media type %s, want %s", mt, types.OCILayer)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rc.Close() }()

	want := map[string]tarEntry{
		"endpoint-aggregator":               {tar.TypeReg, 0o755, 0, 0},
		"etc/":                              {tar.TypeDir, 0o755, 0, 0},
		"etc/group":                         {tar.TypeReg, 0o644, 0, 0},
		"etc/passwd":                        {tar.TypeReg, 0o644, 0, 0},
		"etc/ssl/":                          {tar.TypeDir, 0o755, 0, 0},
		"etc/ssl/certs/":                    {tar.TypeDir, 0o755, 0, 0},
		"etc/ssl/certs/ca-certificates.crt": {tar.TypeReg, 0o644, 0, 0},
		"home/":                             {tar.TypeDir, 0o755, 0, 0},
		"home/nonroot/":                     {tar.TypeDir, 0o700, 65532, 65532},
		"tmp/":                              {tar.TypeDir, 0o1777, 0, 0},
	}
	var names []string
	files := map[string][]byte{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		if strings.HasPrefix(h.Name, "bin/") || strings.HasSuffix(h.Name, "/sh") {
			t.Errorf("the layer has %s", h.Name)
		}
		w, ok := want[h.Name]
		if !ok {
			t.Errorf("unexpected entry %s", h.Name)
			continue
		}
		if got := (tarEntry{h.Typeflag, h.Mode, h.Uid, h.Gid}); got != w {
			t.Errorf("%s: type %c mode %o uid %d gid %d, want type %c mode %o uid %d gid %d",
				h.Name, got.typ, got.mode, got.uid, got.gid, w.typ, w.mode, w.uid, w.gid)
		}
		if !h.ModTime.Equal(o.Created) || h.Uname != "" || h.Gname != "" {
			t.Errorf("%s: mtime %s uname %q gname %q, want %s and no names", h.Name, h.ModTime, h.Uname, h.Gname, o.Created)
		}
		if h.Typeflag == tar.TypeReg {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			files[h.Name] = b
		}
	}
	if len(names) != len(want) || !slices.IsSorted(names) {
		t.Errorf("entries %q: want the %d expected ones, sorted", names, len(want))
	}
	if !bytes.Equal(files["endpoint-aggregator"], o.Binary) {
		t.Error("the layer's binary differs from the one given")
	}
	if !strings.Contains(string(files["etc/passwd"]), "\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n") {
		t.Errorf("/etc/passwd has no nonroot 65532:\n%s", files["etc/passwd"])
	}
	if !strings.Contains(string(files["etc/group"]), "\nnonroot:x:65532:\n") {
		t.Errorf("/etc/group has no nonroot 65532:\n%s", files["etc/group"])
	}
	pool, n := x509.NewCertPool(), 0
	for rest := files["etc/ssl/certs/ca-certificates.crt"]; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			if len(bytes.TrimSpace(rest)) > 0 {
				t.Error("the CA bundle has trailing garbage")
			}
			break
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatalf("CA bundle: %v", err)
		}
		pool.AddCert(cert)
		n++
	}
	if n < 100 {
		t.Errorf("the CA bundle has %d certificates, want the Mozilla roots (100+)", n)
	}
}

// bin/image.tar as `make image` writes it reads back as the same image,
// under the tag docker load and ctr images import give it.
func TestTarballReadsBack(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "endpoint-aggregator")
	if err := os.WriteFile(bin, staticBinary(t), 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out", "image.tar")
	const tag = "registry.example/endpoint-aggregator:v1.2.3"
	t.Setenv("SOURCE_DATE_EPOCH", "1700000000")
	if err := run([]string{"-binary", bin, "-arch", runtime.GOARCH, "-tag", tag, "-o", out, "-version", "v1.2.3"}); err != nil {
		t.Fatal(err)
	}
	built := mustBuild(t, Options{Binary: staticBinary(t), Arch: runtime.GOARCH, Version: "v1.2.3", Created: time.Unix(1700000000, 0)})

	ref, _ := name.NewTag(tag)
	img, err := tarball.ImageFromPath(out, &ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := validate.Image(img); err != nil {
		t.Fatalf("validate: %v", err)
	}
	gotCfg, _ := img.ConfigName()
	wantCfg, _ := built.ConfigName()
	if gotCfg != wantCfg {
		t.Errorf("config (image ID) %s in the tarball, want %s", gotCfg, wantCfg)
	}
	gotLayers, _ := img.Layers()
	wantLayers, _ := built.Layers()
	gd, _ := gotLayers[0].Digest()
	wd, _ := wantLayers[0].Digest()
	if len(gotLayers) != 1 || gd != wd {
		t.Errorf("layers in the tarball differ from the built image's")
	}

	m, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(out) })
	if err != nil {
		t.Fatal(err)
	}
	if len(m) != 1 || !slices.Equal(m[0].RepoTags, []string{tag}) {
		t.Errorf("manifest.json %+v, want one image tagged %s", m, tag)
	}
	if fi, err := os.Stat(out); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("bin/image.tar: %v %v, want mode 0644", fi, err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "out", ".image-*")); len(left) > 0 {
		t.Errorf("temporary files left behind: %q", left)
	}
}

// -push writes the image to the tag's registry (here one on loopback): what
// the registry serves has the digest the build reported.
func TestPush(t *testing.T) {
	srv := httptest.NewServer(registry.New(registry.Logger(discardLogger())))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	tag := u.Host + "/endpoint-aggregator/endpoint-aggregator:v1.2.3"

	dir := t.TempDir()
	bin := filepath.Join(dir, "endpoint-aggregator")
	if err := os.WriteFile(bin, staticBinary(t), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("HOME", dir) // no Docker config: anonymous
	t.Setenv("DOCKER_CONFIG", dir)
	t.Setenv("SOURCE_DATE_EPOCH", "")
	if err := run([]string{"-binary", bin, "-arch", runtime.GOARCH, "-tag", tag, "-push", "-version", "v1.2.3"}); err != nil {
		t.Fatal(err)
	}
	want := digest(t, mustBuild(t, Options{Binary: staticBinary(t), Arch: runtime.GOARCH, Version: "v1.2.3"}))

	ref, _ := name.NewTag(tag)
	desc, err := remote.Get(ref)
	if err != nil {
		t.Fatal(err)
	}
	if desc.Digest != want || desc.MediaType != types.OCIManifestSchema1 {
		t.Errorf("registry has %s %s, want %s %s", desc.MediaType, desc.Digest, types.OCIManifestSchema1, want)
	}
	img, err := desc.Image()
	if err != nil {
		t.Fatal(err)
	}
	if err := validate.Image(img); err != nil {
		t.Errorf("validate pushed image: %v", err)
	}
}

func TestBuildRefuses(t *testing.T) {
	good := staticBinary(t)
	otherArch := "arm64"
	if runtime.GOARCH == "arm64" {
		otherArch = "amd64"
	}
	cases := map[string]Options{
		"not ELF":      {Binary: []byte("#!/bin/sh\necho hi\n"), Arch: runtime.GOARCH},
		"wrong arch":   {Binary: good, Arch: otherArch},
		"unknown arch": {Binary: good, Arch: "vax"},
	}
	// A dynamically linked program of this machine, if there is one.
	for _, p := range []string{"/bin/true", "/usr/bin/true"} {
		b, err := os.ReadFile(p)
		if err == nil && bytes.Contains(b, []byte("ld-linux")) {
			cases["dynamic "+p] = Options{Binary: b, Arch: runtime.GOARCH}
			break
		}
	}
	for what, o := range cases {
		if _, err := Build(o); err == nil {
			t.Errorf("%s: Build succeeded, want an error", what)
		} else {
			t.Logf("%s: %v", what, err)
		}
	}
}

func TestSourceDateEpoch(t *testing.T) {
	for in, want := range map[string]int64{"": 0, "0": 0, "1700000000": 1700000000} {
		t.Setenv("SOURCE_DATE_EPOCH", in)
		got, err := sourceDateEpoch()
		if err != nil || got.Unix() != want {
			t.Errorf("SOURCE_DATE_EPOCH=%q: %v %v, want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"yesterday", "-1", "1.5"} {
		t.Setenv("SOURCE_DATE_EPOCH", bad)
		if _, err := sourceDateEpoch(); err == nil {
			t.Errorf("SOURCE_DATE_EPOCH=%q accepted", bad)
		}
	}
}

func discardLogger() *log.Logger { return log.New(io.Discard, "", 0) }
