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
	img, err := BuildTestImage(bin, "/"+path.Base(*binary), *arch, *user)
	if err != nil {
		return fmt.Errorf("%s: %w", *binary, err)
	}
	return writeTarball(*out, ref, img)
}

// BuildTestImage returns an image whose only file is binary at
// entrypoint, run as user.
func BuildTestImage(binary []byte, entrypoint, arch, user string) (v1.Image, error) {
	if err := checkBinary(binary, arch); err != nil {
		return nil, err
	}
	epoch := time.Unix(0, 0).UTC()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(entrypoint, "/"), Mode: 0o755,
		Size: int64(len(binary)), ModTime: epoch, Format: tar.FormatUSTAR}); err != nil {
		return nil, err
	}
	if _, err := tw.Write(binary); err != nil {
		return nil, err
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
	cf.Config = v1.Config{Entrypoint: []string{entrypoint}, User: user}
	return mutate.ConfigFile(img, cf)
}
