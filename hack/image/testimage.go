package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// runTestImage is `image test-image`: the images the real-node tests run
// (the sandbox's pause, a test server), each one static binary in a
// single layer with nothing else, written as a tarball that containerd
// imports. They are never pushed.
func runTestImage(args []string) error {
	fs := flag.NewFlagSet("test-image", flag.ContinueOnError)
	binary := fs.String("binary", "", "the static linux binary (required); it becomes /<its base name>")
	arch := fs.String("arch", defaultArch(), "GOARCH of the binary and the image's platform")
	tag := fs.String("tag", "", "the image's name:tag (required)")
	out := fs.String("o", "", "write the tarball here (required)")
	user := fs.String("user", User, "the image's USER")
	var adds, links, cmd, env listFlag
	fs.Var(&adds, "add", "also put HOSTPATH at IMAGEPATH (HOSTPATH:IMAGEPATH, repeatable; a static binary or any file)")
	fs.Var(&links, "symlink", "a symbolic link IMAGEPATH:TARGET (repeatable)")
	fs.Var(&cmd, "cmd", "the image's CMD, one argument per flag")
	fs.Var(&env, "env", "an environment variable NAME=VALUE (repeatable)")
	noEntrypoint := fs.Bool("no-entrypoint", false, "no ENTRYPOINT: the image runs its CMD, or the pod's args")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *binary == "" || *tag == "" || *out == "" || fs.NArg() > 0 {
		fs.Usage()
		return errors.New("need -binary, -tag and -o, and no arguments")
	}
	ref, err := name.NewTag(*tag, name.StrictValidation)
	if err != nil {
		return fmt.Errorf("-tag: %w", err)
	}
	bin, err := os.ReadFile(*binary)
	if err != nil {
		return err
	}
	if err := checkBinary(bin, *arch); err != nil {
		return fmt.Errorf("%s: %w", *binary, err)
	}
	entrypoint := "/" + path.Base(*binary)
	files := []testFile{{path: entrypoint, data: bin}}
	for _, a := range adds {
		host, dst, ok := strings.Cut(a, ":")
		if !ok {
			return fmt.Errorf("-add %q: want HOSTPATH:IMAGEPATH", a)
		}
		data, err := os.ReadFile(host)
		if err != nil {
			return err
		}
		files = append(files, testFile{path: dst, data: data})
	}
	for _, l := range links {
		p, target, ok := strings.Cut(l, ":")
		if !ok {
			return fmt.Errorf("-symlink %q: want IMAGEPATH:TARGET", l)
		}
		files = append(files, testFile{path: p, link: target})
	}
	cfg := v1.Config{Entrypoint: []string{entrypoint}, Cmd: cmd, User: *user, Env: env}
	if *noEntrypoint {
		cfg.Entrypoint = nil
	}
	img, err := BuildTestImage(files, *arch, cfg)
	if err != nil {
		return fmt.Errorf("%s: %w", *binary, err)
	}
	return writeTarball(*out, ref, img)
}

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// testFile is one file of a test image: data, or a symbolic link.
type testFile struct {
	path, link string
	data       []byte
}

// BuildTestImage returns an image of files (their directories created,
// everything owned by root, executable) with config.
func BuildTestImage(files []testFile, arch string, config v1.Config) (v1.Image, error) {
	epoch := time.Unix(0, 0).UTC()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	for _, f := range files {
		name := strings.TrimPrefix(path.Clean(f.path), "/")
		var parents []string
		for d := path.Dir(name); d != "." && !dirs[d]; d = path.Dir(d) {
			parents = append([]string{d}, parents...)
		}
		for _, d := range parents {
			dirs[d] = true
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, ModTime: epoch, Format: tar.FormatUSTAR}); err != nil {
				return nil, err
			}
		}
		h := &tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o755, Size: int64(len(f.data)), ModTime: epoch, Format: tar.FormatUSTAR}
		if f.link != "" {
			h = &tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: f.link, Mode: 0o777, ModTime: epoch, Format: tar.FormatUSTAR}
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(buf.Bytes())), nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.AppendLayers(img, layer)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Created = v1.Time{Time: epoch}
	cf.OS, cf.Architecture = "linux", arch
	cf.Config = config
	return mutate.ConfigFile(img, cf)
}
