package testenv

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Versions of the binaries that `make tools` builds. They must match
// K8S_VERSION and ETCD_VERSION in the Makefile (a test checks that).
const (
	KubernetesVersion = "v1.37.2"
	EtcdVersion       = "v3.7.0"
)

// AssetsEnv names the environment variable that points at the directory
// holding kube-apiserver, etcd, kubectl and kube-controller-manager.
const AssetsEnv = "ENDPOINT_AGGREGATOR_ASSETS"

// DefaultAssetsDir returns the directory the Makefile builds the binaries
// into when CACHE_DIR is not overridden:
// ${XDG_CACHE_HOME:-$HOME/.cache}/endpoint-aggregator/bin/k8s-<ver>-etcd-<ver>.
func DefaultAssetsDir() (string, error) {
	bin, err := cacheBinDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(bin, "k8s-"+KubernetesVersion+"-etcd-"+EtcdVersion), nil
}

// cacheBinDir returns the directory the Makefile builds its binaries under
// when CACHE_DIR is not overridden:
// ${XDG_CACHE_HOME:-$HOME/.cache}/endpoint-aggregator/bin.
func cacheBinDir() (string, error) {
	base := os.Getenv("XDG_CACHE_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("cannot locate the cache directory: %w", err)
		}
		base = filepath.Join(home, ".cache")
	}
	return filepath.Join(base, "endpoint-aggregator", "bin"), nil
}

// envOrDefaultPath returns $env made absolute, or defaultPath() when env is
// unset or empty.
func envOrDefaultPath(env string, defaultPath func() (string, error)) (string, error) {
	p := os.Getenv(env)
	if p == "" {
		d, err := defaultPath()
		if err != nil {
			return "", err
		}
		p = d
	}
	return filepath.Abs(p)
}

// AssetsDir returns the directory holding the control-plane binaries:
// $ENDPOINT_AGGREGATOR_ASSETS if set, else [DefaultAssetsDir]. It checks
// that kube-apiserver and etcd are there and executable.
func AssetsDir() (string, error) {
	abs, err := envOrDefaultPath(AssetsEnv, DefaultAssetsDir)
	if err != nil {
		return "", err
	}
	for _, bin := range []string{"kube-apiserver", "etcd"} {
		if err := checkExecutable(filepath.Join(abs, bin)); err != nil {
			return "", fmt.Errorf("%w (run `make tools` to build the Kubernetes binaries, or set %s to a directory that holds kube-apiserver and etcd)", err, AssetsEnv)
		}
	}
	return abs, nil
}

// ErrNoAssets is wrapped by AssetsDir's error when a binary is missing.
var ErrNoAssets = errors.New("control-plane binary not found")

func checkExecutable(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("%w: %s", ErrNoAssets, path)
	}
	if fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%w: %s is not an executable file", ErrNoAssets, path)
	}
	return nil
}
