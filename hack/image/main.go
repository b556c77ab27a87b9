// Command image builds the endpoint-aggregator container image from the
// static daemon binary, in Go, without Docker (`make image`): a single layer,
// fixed times, owners and modes, so the same binary gives the same digest. It
// writes a docker-compatible tarball (`docker load`, `ctr images import`) and,
// with -push, pushes the image to the tag's registry.
//
// `image release` (make release) builds a release: the multi-arch image
// index, the CLI archives, their SBOMs, the packaged chart and SHA256SUMS
// (release.go).
//
// `image registry` serves an in-memory registry over HTTPS for the real-node
// tests (registry.go).
//
// It is a module of its own (hack/image/go.mod) so go-containerregistry never
// enters the daemon's dependency graph.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) > 0 && args[0] == "test-image" {
		return runTestImage(args[1:])
	}
	if len(args) > 0 && args[0] == "release" {
		return runRelease(args[1:])
	}
	if len(args) > 0 && args[0] == "registry" {
		return runRegistry(args[1:])
	}
	fs := flag.NewFlagSet("image", flag.ContinueOnError)
	binary := fs.String("binary", "", "the static linux daemon binary (required)")
	arch := fs.String("arch", defaultArch(), "GOARCH of the binary and the image's platform (default: $GOARCH, else this machine's)")
	tag := fs.String("tag", "", "the image's name:tag, written into the tarball (required)")
	out := fs.String("o", "", "write the docker-compatible tarball here (e.g. bin/image.tar)")
	push := fs.Bool("push", false, "push the image to -tag's registry (credentials from the Docker config, as docker and crane use)")
	version := fs.String("version", "dev", "org.opencontainers.image.version")
	revision := fs.String("revision", "", "org.opencontainers.image.revision (the git commit; omitted when empty)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *binary == "" || *tag == "" || fs.NArg() > 0 {
		fs.Usage()
		return errors.New("need -binary and -tag, and no arguments")
	}
	if *out == "" && !*push {
		return errors.New("nothing to do: give -o, -push or both")
	}
	ref, err := name.NewTag(*tag, name.StrictValidation)
	if err != nil {
		return fmt.Errorf("-tag: %w", err)
	}
	created, err := sourceDateEpoch()
	if err != nil {
		return err
	}
	bin, err := os.ReadFile(*binary)
	if err != nil {
		return err
	}
	img, err := Build(Options{Binary: bin, Arch: *arch, Version: *version, Revision: *revision, Created: created})
	if err != nil {
		return fmt.Errorf("%s: %w", *binary, err)
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	configDigest, err := img.ConfigName()
	if err != nil {
		return err
	}

	if *out != "" {
		if err := writeTarball(*out, ref, img); err != nil {
			return err
		}
		fmt.Printf("%s: %s linux/%s digest %s (image ID %s)\n", *out, ref, *arch, digest, configDigest)
	}
	if *push {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
		defer stop()
		if err := remote.Write(ref, img, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
			return fmt.Errorf("push %s: %w", ref, err)
		}
		fmt.Printf("pushed %s@%s\n", ref.Context(), digest)
	}
	return nil
}

// writeTarball writes to a temporary name and renames, so an interrupted
// build never leaves a half-written tarball behind.
func writeTarball(out string, ref name.Tag, img v1.Image) error {
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	return writeAtomic(out, func(w io.Writer) error { return tarball.Write(ref, img, w) })
}

func defaultArch() string {
	if a := os.Getenv("GOARCH"); a != "" {
		return a
	}
	return runtime.GOARCH
}

// sourceDateEpoch is the reproducible-builds SOURCE_DATE_EPOCH, or the Unix
// epoch when it is unset.
func sourceDateEpoch() (time.Time, error) {
	s := os.Getenv("SOURCE_DATE_EPOCH")
	if s == "" {
		return time.Unix(0, 0).UTC(), nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH=%q: want seconds since the Unix epoch", s)
	}
	return time.Unix(n, 0).UTC(), nil
}
